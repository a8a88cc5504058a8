//! [`Architecture`]: what the decoder graph itself says (layers and KV heads from the cache
//! inputs, heads from the attention nodes, quantization from MatMulNBits), and
//! [`check_model`], which holds the configuration against it.

use crate::config::{IoNames, ModelConfig};
use crate::error::{GenError, GenResult};
use onnx_runtime_ir::{Attribute, DataType, Dim, Graph, ValueType};
use std::collections::{BTreeMap, BTreeSet};

/// How the weights of the graph's matrix products are stored.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Quantization {
    /// MatMulNBits nodes by (bits, block size).
    pub nbits: BTreeMap<(i64, i64), usize>,
    /// MatMulNBits nodes with zero points.
    pub nbits_with_zero_points: usize,
    /// GatherBlockQuantized nodes (a quantized embedding table).
    pub gather_block_quantized: usize,
    /// Element types of the float weight matrices (MatMul/Gemm initializers), by count.
    pub float_weights: BTreeMap<String, usize>,
}

/// The decoder graph as found, for `info` and for checking the configuration.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Architecture {
    /// Layers with a past key input (counted from 0 while the names exist).
    pub layers: usize,
    /// From the past inputs' static dims `[batch, kv_heads, past, head_size]`.
    pub kv_heads: Option<usize>,
    pub head_size: Option<usize>,
    /// The element type of the KV cache.
    pub kv_dtype: Option<DataType>,
    /// The attention ops, e.g. `com.microsoft::GroupQueryAttention` x24, or the standard ops.
    pub attention: BTreeMap<String, usize>,
    /// `num_heads` and `kv_num_heads` of the attention nodes, when they carry them.
    pub heads: Option<usize>,
    pub attention_kv_heads: Option<usize>,
    /// GroupQueryAttention applies the rotary embedding itself (`do_rotary`).
    pub rotary_in_attention: bool,
    /// RotaryEmbedding nodes (com.microsoft or ONNX).
    pub rotary_nodes: usize,
    pub quantization: Quantization,
    /// The graph's inputs beyond ids, mask, positions and the cache (e.g. use_cache_branch).
    pub other_inputs: Vec<String>,
    pub nodes: usize,
}

fn int_attr(node: &onnx_runtime_ir::Node, name: &str) -> Option<i64> {
    match node.attribute(name) {
        Some(Attribute::Int(v)) => Some(*v),
        _ => None,
    }
}

fn static_dim(d: &Dim) -> Option<usize> {
    match d {
        Dim::Static(v) => Some(*v),
        Dim::Symbolic(_) => None,
    }
}

fn input_type<'g>(g: &'g Graph, name: &str) -> Option<&'g ValueType> {
    g.inputs
        .iter()
        .map(|&v| g.value(v))
        .find(|v| v.name == name)
        .and_then(|v| v.ty.as_ref())
}

fn has_input(g: &Graph, name: &str) -> bool {
    g.inputs.iter().any(|&v| g.value(v).name == name)
}

fn has_output(g: &Graph, name: &str) -> bool {
    g.outputs.iter().any(|&v| g.value(v).name == name)
}

impl Architecture {
    /// Reads the graph with the names of `io`.
    pub fn detect(g: &Graph, io: &IoNames) -> Architecture {
        let mut a = Architecture {
            nodes: g.nodes.len(),
            ..Default::default()
        };
        while has_input(g, &IoNames::layer(&io.past_key, a.layers)) {
            a.layers += 1;
        }
        if let Some(ValueType::Tensor { dtype, shape }) =
            input_type(g, &IoNames::layer(&io.past_key, 0))
        {
            a.kv_dtype = Some(*dtype);
            if let Some(s) = shape.as_ref().filter(|s| s.rank() == 4) {
                a.kv_heads = static_dim(&s.dims()[1]);
                a.head_size = static_dim(&s.dims()[3]);
            }
        }
        let mut named: BTreeSet<String> =
            [&io.input_ids, &io.logits].into_iter().cloned().collect();
        named.extend(io.attention_mask.clone());
        named.extend(io.position_ids.clone());
        for l in 0..a.layers {
            named.insert(IoNames::layer(&io.past_key, l));
            named.insert(IoNames::layer(&io.past_value, l));
        }
        a.other_inputs = g
            .inputs
            .iter()
            .map(|&v| g.value(v).name.clone())
            .filter(|n| {
                !named.contains(n)
                    && g.value_by_name(n)
                        .is_none_or(|v| g.initializer(v).is_none())
            })
            .collect();
        let q = &mut a.quantization;
        for node in &g.nodes {
            let op = node.op_type.as_str();
            let key = if node.normalized_domain().is_empty() {
                op.to_string()
            } else {
                format!("{}::{op}", node.domain)
            };
            match op {
                "GroupQueryAttention"
                | "MultiHeadAttention"
                | "Attention"
                | "PagedAttention"
                | "SparseAttention" => {
                    *a.attention.entry(key).or_default() += 1;
                    a.heads = a.heads.or(int_attr(node, "num_heads").map(|v| v as usize));
                    a.attention_kv_heads = a
                        .attention_kv_heads
                        .or(int_attr(node, "kv_num_heads").map(|v| v as usize));
                    if int_attr(node, "do_rotary") == Some(1) {
                        a.rotary_in_attention = true;
                    }
                }
                "RotaryEmbedding" => a.rotary_nodes += 1,
                "MatMulNBits" => {
                    let bits = int_attr(node, "bits").unwrap_or(4);
                    let block = int_attr(node, "block_size").unwrap_or(0);
                    *q.nbits.entry((bits, block)).or_default() += 1;
                    if node.inputs.get(3).copied().flatten().is_some() {
                        q.nbits_with_zero_points += 1;
                    }
                }
                "GatherBlockQuantized" => q.gather_block_quantized += 1,
                "MatMul" | "Gemm" => {
                    if let Some(t) = node
                        .inputs
                        .get(1)
                        .copied()
                        .flatten()
                        .and_then(|v| g.initializer(v))
                    {
                        *q.float_weights.entry(t.dtype.to_string()).or_default() += 1;
                    }
                }
                _ => {}
            }
        }
        if a.attention.is_empty() {
            let softmax = g.nodes.iter().filter(|n| n.op_type == "Softmax").count();
            if softmax > 0 {
                a.attention
                    .insert("standard ops (MatMul, Softmax)".into(), softmax);
            }
        }
        a
    }

    /// One line per fact, for `onnx-runtime info MODEL_DIR`.
    pub fn describe(&self, cfg: &ModelConfig) -> Vec<String> {
        let or_q = |v: Option<usize>| v.map_or("?".to_string(), |v| v.to_string());
        let mut out = vec![
            format!("format: {}", cfg.format),
            format!("model: {}", cfg.model_file.display()),
            format!(
                "type: {}",
                cfg.model_type.as_deref().unwrap_or("(not given)")
            ),
            format!(
                "layers: {} (graph: {} with a KV cache input)",
                cfg.num_layers, self.layers
            ),
            format!(
                "attention heads: {} (graph: {}), KV heads: {} (graph: {}), head size: {} (graph: {})",
                cfg.num_heads,
                or_q(self.heads),
                cfg.num_kv_heads,
                or_q(self.kv_heads.or(self.attention_kv_heads)),
                cfg.head_size,
                or_q(self.head_size)
            ),
            format!(
                "hidden size: {}, vocabulary: {}, context: {}",
                cfg.hidden_size,
                or_q(cfg.vocab_size),
                or_q(cfg.context_length)
            ),
        ];
        let attention: Vec<String> = self
            .attention
            .iter()
            .map(|(op, n)| format!("{op} x{n}"))
            .collect();
        let rotary = if self.rotary_in_attention {
            ", rotary inside the attention op".to_string()
        } else if self.rotary_nodes > 0 {
            format!(", {} RotaryEmbedding nodes", self.rotary_nodes)
        } else {
            String::new()
        };
        out.push(format!(
            "attention: {}{rotary}",
            if attention.is_empty() {
                "(no attention op found)".into()
            } else {
                attention.join(", ")
            }
        ));
        let cache = if cfg.past_present_share_buffer {
            format!(
                "one buffer of {} rows per layer shared by past and present (past_present_share_buffer)",
                or_q(cfg.max_length())
            )
        } else {
            "grows by one row per token (present fed back as past)".into()
        };
        out.push(format!(
            "KV cache: {}, {cache}",
            self.kv_dtype
                .map_or("dtype not declared".to_string(), |d| d.to_string())
        ));
        let q = &self.quantization;
        let mut quant: Vec<String> = q
            .nbits
            .iter()
            .map(|((bits, block), n)| format!("MatMulNBits int{bits} block {block} x{n}"))
            .collect();
        if q.nbits_with_zero_points > 0 {
            quant.push(format!("{} with zero points", q.nbits_with_zero_points));
        }
        if q.gather_block_quantized > 0 {
            quant.push(format!(
                "GatherBlockQuantized x{}",
                q.gather_block_quantized
            ));
        }
        for (dt, n) in &q.float_weights {
            quant.push(format!("{dt} MatMul/Gemm weights x{n}"));
        }
        out.push(format!(
            "weights: {}",
            if quant.is_empty() {
                "(no matrix product found)".into()
            } else {
                quant.join(", ")
            }
        ));
        let eos: Vec<String> = cfg.eos_token_ids.iter().map(|t| t.to_string()).collect();
        out.push(format!(
            "tokens: eos {}, bos {}, pad {}",
            if eos.is_empty() {
                "(none)".into()
            } else {
                eos.join(", ")
            },
            cfg.bos_token_id.map_or("-".into(), |t| t.to_string()),
            cfg.pad_token_id.map_or("-".into(), |t| t.to_string())
        ));
        if !self.other_inputs.is_empty() {
            out.push(format!("other inputs: {}", self.other_inputs.join(", ")));
        }
        out
    }
}

/// Checks that the graph has every input and output the configuration names and that the
/// cache inputs have the configured layer count, KV heads and head size.
pub fn check_model(cfg: &ModelConfig, g: &Graph, arch: &Architecture) -> GenResult<()> {
    let err = |message: String| GenError::ModelMismatch {
        model: cfg.model_file.clone(),
        message,
    };
    let inputs: Vec<String> = g.inputs.iter().map(|&v| g.value(v).name.clone()).collect();
    let outputs: Vec<String> = g.outputs.iter().map(|&v| g.value(v).name.clone()).collect();
    let io = &cfg.io;
    let mut want_in = vec![io.input_ids.clone()];
    let mut want_out = vec![io.logits.clone()];
    for l in 0..cfg.num_layers {
        want_in.push(IoNames::layer(&io.past_key, l));
        want_in.push(IoNames::layer(&io.past_value, l));
        want_out.push(IoNames::layer(&io.present_key, l));
        want_out.push(IoNames::layer(&io.present_value, l));
    }
    let missing_in: Vec<&String> = want_in.iter().filter(|n| !has_input(g, n)).collect();
    if !missing_in.is_empty() {
        return Err(err(format!(
            "has no input {} that {} names (its inputs: {})",
            missing_in
                .iter()
                .map(|n| format!("'{n}'"))
                .collect::<Vec<_>>()
                .join(", "),
            cfg.config_file.display(),
            inputs.join(", ")
        )));
    }
    let missing_out: Vec<&String> = want_out.iter().filter(|n| !has_output(g, n)).collect();
    if !missing_out.is_empty() {
        return Err(err(format!(
            "has no output {} that {} names (its outputs: {})",
            missing_out
                .iter()
                .map(|n| format!("'{n}'"))
                .collect::<Vec<_>>()
                .join(", "),
            cfg.config_file.display(),
            outputs.join(", ")
        )));
    }
    if arch.layers != cfg.num_layers {
        return Err(err(format!(
            "has KV cache inputs for {} layers, the configuration says {}",
            arch.layers, cfg.num_layers
        )));
    }
    for (what, found, want) in [
        (
            "KV heads (dim 1 of the past inputs)",
            arch.kv_heads,
            cfg.num_kv_heads,
        ),
        (
            "head size (dim 3 of the past inputs)",
            arch.head_size,
            cfg.head_size,
        ),
    ] {
        if let Some(f) = found.filter(|&f| f != want) {
            return Err(err(format!("{what} is {f}, the configuration says {want}")));
        }
    }
    for name in [
        Some(&io.input_ids),
        io.attention_mask.as_ref(),
        io.position_ids.as_ref(),
    ]
    .into_iter()
    .flatten()
    {
        if let Some(ValueType::Tensor { dtype, .. }) = input_type(g, name) {
            if !matches!(dtype, DataType::Int64 | DataType::Int32) {
                return Err(err(format!(
                    "input '{name}' is {dtype}; token ids, masks and positions must be int64 or int32"
                )));
            }
        }
    }
    if let Some(dt) = arch.kv_dtype {
        if !matches!(
            dt,
            DataType::Float32 | DataType::Float16 | DataType::BFloat16
        ) {
            return Err(err(format!(
                "the KV cache inputs are {dt}; float32, float16 or bfloat16 are supported"
            )));
        }
    }
    Ok(())
}
