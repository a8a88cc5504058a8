//! Emission: a checked group becomes one `FusedElementwise` node in place of its last
//! member, with the program of its members' instructions, and the other members are removed.

use super::grouping::{Ctx, Plan};
use crate::optimize::rewriter::Rewriter;
use onnx_runtime_ep_cpu::ops::math::fused_elementwise::{Operand, Program, OP};
use onnx_runtime_ep_cpu::INTERNAL_DOMAIN;
use onnx_runtime_ir::{Attribute, NodeId, ValueId};
use std::collections::HashMap;

/// Rewrites the group's last node into the fused node and removes the others.
pub(super) fn emit(rw: &mut Rewriter<'_>, ctx: &Ctx, members: &[NodeId], plan: &Plan) {
    let mut prog = Program::default();
    let mut val: HashMap<ValueId, Operand> = HashMap::new();
    for (k, &v) in plan.inputs.iter().enumerate() {
        val.insert(v, Operand::Input(k));
    }
    for (&v, &c) in &plan.literals {
        val.insert(v, Operand::Lit(c));
    }
    for &m in members {
        let e = ctx.elem(m);
        let ops: Vec<Operand> = e.inputs.iter().map(|v| val[v]).collect();
        let r = e.emit(&ops, &mut prog);
        val.insert(e.out, r);
    }
    prog.outputs = plan.outputs.iter().map(|v| val[v]).collect();
    let dtype = ctx.dtype[members[0].0].expect("a typed group");
    let host = *members.last().expect("a group has members");
    let names: Vec<String> = members
        .iter()
        .map(|&m| rw.node(m).name.clone())
        .filter(|n| !n.is_empty())
        .collect();
    let node = rw.g.node_mut(host);
    node.op_type = OP.into();
    node.domain = INTERNAL_DOMAIN.into();
    if let (Some(first), Some(last)) = (names.first(), names.last()) {
        node.name = if first == last {
            format!("fused({first})")
        } else {
            format!("fused({first}..{last})")
        };
    }
    node.inputs = plan.inputs.iter().map(|&v| Some(v)).collect();
    node.outputs = plan.outputs.clone();
    node.attributes.clear();
    node.attributes
        .insert("program".into(), Attribute::String(prog.to_text()));
    node.attributes
        .insert("dtype".into(), Attribute::Int(dtype.onnx_code() as i64));
    for &m in members {
        if m != host {
            rw.remove(m);
        }
    }
    rw.new_domains.insert(INTERNAL_DOMAIN);
    rw.count("elementwise_chain");
}
