//! FusedElementwise programs: the parser (the syntax of the CPU provider's
//! `ops::math::fused_elementwise`, which is the reference; this crate does not depend on it)
//! and the CUDA C generated for a program and a dtype.

use crate::compiler::ModuleSpec;
use onnx_runtime_ir::DataType;
use std::collections::HashMap;
use std::fmt::Write as _;

/// Most node inputs plus outputs a kernel takes (`FE_MAXOPS` in `kernels/fused.cu`).
pub const MAX_OPS: usize = 24;
/// Most instructions in a program (the CPU provider's limit).
pub const MAX_INSTRS: usize = 96;

const FUSED_CU: &str = include_str!("../../kernels/fused.cu");
const MARKER: &str = "// @@FE_EVAL@@";

/// Each op: (name, operand count, C expression over `$0`, `$1`, `$2` in the compute type `C`).
/// Operands are registers or parenthesized literals, so repeating one is free of effects.
const OPS: &[(&str, usize, &str)] = &[
    ("Relu", 1, "($0 < (C)0 ? (C)0 : $0)"),
    ("Sigmoid", 1, "fe_sigmoid($0)"),
    ("Tanh", 1, "tanh($0)"),
    ("Exp", 1, "exp($0)"),
    ("Log", 1, "log($0)"),
    ("Erf", 1, "erf($0)"),
    ("Neg", 1, "(-$0)"),
    ("Abs", 1, "fabs($0)"),
    ("Sqrt", 1, "sqrt($0)"),
    ("Reciprocal", 1, "((C)1 / $0)"),
    ("Softplus", 1, "fe_softplus($0)"),
    ("Softsign", 1, "($0 / ((C)1 + fabs($0)))"),
    ("Mish", 1, "($0 * tanh(fe_softplus($0)))"),
    (
        "HardSwish",
        1,
        "($0 * fmin(fmax($0 / (C)6 + (C)0.5, (C)0), (C)1))",
    ),
    ("Floor", 1, "floor($0)"),
    ("Ceil", 1, "ceil($0)"),
    // The default rounding mode: halves to even.
    ("Round", 1, "rint($0)"),
    ("Sign", 1, "($0 > (C)0 ? (C)1 : ($0 < (C)0 ? (C)-1 : $0))"),
    ("Sin", 1, "sin($0)"),
    ("Cos", 1, "cos($0)"),
    (
        "Gelu",
        1,
        "((C)0.5 * $0 * ((C)1 + erf($0 * (C)0.70710678118654752440)))",
    ),
    (
        "GeluTanh",
        1,
        "((C)0.5 * $0 * ((C)1 + tanh((C)0.79788456080286535588 * ($0 + (C)0.044715 * $0 * $0 * $0))))",
    ),
    ("LeakyRelu", 2, "($0 < (C)0 ? $0 * $1 : $0)"),
    ("Elu", 2, "($0 < (C)0 ? $1 * expm1($0) : $0)"),
    ("Celu", 2, "(fmax($0, (C)0) + fmin($1 * expm1($0 / $1), (C)0))"),
    ("ThresholdedRelu", 2, "($0 > $1 ? $0 : (C)0)"),
    ("Swish", 2, "($0 * fe_sigmoid($1 * $0))"),
    ("Selu", 3, "($0 > (C)0 ? $2 * $0 : $2 * ($1 * exp($0) - $1))"),
    ("HardSigmoid", 3, "fmin(fmax($1 * $0 + $2, (C)0), (C)1)"),
    ("Clip", 3, "fe_clip($0, $1, $2)"),
    ("Add", 2, "($0 + $1)"),
    ("Sub", 2, "($0 - $1)"),
    ("Mul", 2, "($0 * $1)"),
    ("Div", 2, "($0 / $1)"),
    ("Pow", 2, "pow($0, $1)"),
    ("Max", 2, "fe_max($0, $1)"),
    ("Min", 2, "fe_min($0, $1)"),
    ("PRelu", 2, "($0 < (C)0 ? $0 * $1 : $0)"),
];

/// Every op name a program may use.
pub fn op_names() -> impl Iterator<Item = &'static str> {
    OPS.iter().map(|o| o.0)
}

#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Operand {
    Input(usize),
    Temp(usize),
    Lit(f64),
}

#[derive(Clone, Debug, PartialEq)]
pub struct Instr {
    /// Index into [`OPS`].
    pub op: usize,
    pub args: Vec<Operand>,
}

/// A parsed program; temporary `k` is the result of instruction `k`.
#[derive(Clone, Debug, PartialEq, Default)]
pub struct Program {
    pub instrs: Vec<Instr>,
    pub outputs: Vec<Operand>,
}

fn operand(tok: &str, temps: &HashMap<usize, usize>) -> Result<Operand, String> {
    let digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    if let Some(k) = tok.strip_prefix("in").filter(|s| digits(s)) {
        return k
            .parse()
            .map(Operand::Input)
            .map_err(|_| format!("bad input '{tok}'"));
    }
    if let Some(k) = tok.strip_prefix('t').filter(|s| digits(s)) {
        let k: usize = k.parse().map_err(|_| format!("bad temporary '{tok}'"))?;
        return temps
            .get(&k)
            .map(|&d| Operand::Temp(d))
            .ok_or_else(|| format!("temporary '{tok}' is read before it is defined"));
    }
    tok.parse::<f64>()
        .map(Operand::Lit)
        .map_err(|_| format!("'{tok}' is not an input (in<k>), a temporary (t<k>) or a number"))
}

impl Program {
    /// Parses a program: `t<k> = <Op> <operands>` lines, then `out <operand>` lines.
    pub fn parse(text: &str) -> Result<Program, String> {
        let mut temps: HashMap<usize, usize> = HashMap::new();
        let mut prog = Program::default();
        for (no, raw) in text.lines().enumerate() {
            let line = raw.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let at = |m: String| format!("line {}: {m} (in '{line}')", no + 1);
            let toks: Vec<&str> = line.split_whitespace().collect();
            if toks[0] == "out" {
                if toks.len() != 2 {
                    return Err(at("'out' takes one operand".into()));
                }
                prog.outputs.push(operand(toks[1], &temps).map_err(at)?);
                continue;
            }
            if !prog.outputs.is_empty() {
                return Err(at("instructions must come before the 'out' lines".into()));
            }
            if toks.len() < 3 || toks[1] != "=" {
                return Err(at(
                    "expected 't<k> = <Op> <operands>' or 'out <operand>'".into()
                ));
            }
            let k = toks[0]
                .strip_prefix('t')
                .and_then(|s| s.parse::<usize>().ok())
                .ok_or_else(|| at(format!("'{}' is not a temporary (t<k>)", toks[0])))?;
            let op = OPS
                .iter()
                .position(|o| o.0 == toks[2])
                .ok_or_else(|| at(format!("unknown op '{}'", toks[2])))?;
            let args: Vec<Operand> = toks[3..]
                .iter()
                .map(|t| operand(t, &temps))
                .collect::<Result<_, _>>()
                .map_err(at)?;
            if args.len() != OPS[op].1 {
                return Err(at(format!(
                    "{} takes {} operand(s), got {}",
                    OPS[op].0,
                    OPS[op].1,
                    args.len()
                )));
            }
            let dst = prog.instrs.len();
            if temps.insert(k, dst).is_some() {
                return Err(at(format!("t{k} is defined twice")));
            }
            prog.instrs.push(Instr { op, args });
        }
        if prog.outputs.is_empty() {
            return Err("the program has no 'out' line".into());
        }
        if prog.instrs.len() > MAX_INSTRS {
            return Err(format!(
                "the program has {} instructions; at most {MAX_INSTRS} are supported",
                prog.instrs.len()
            ));
        }
        Ok(prog)
    }

    /// One past the highest input the program reads.
    pub fn n_inputs(&self) -> usize {
        self.instrs
            .iter()
            .flat_map(|i| i.args.iter())
            .chain(&self.outputs)
            .filter_map(|o| match o {
                Operand::Input(k) => Some(k + 1),
                _ => None,
            })
            .max()
            .unwrap_or(0)
    }
}

/// The C text of an operand: `a[k]`, `t<k>` or a literal in the compute type.
fn c_operand(o: &Operand) -> String {
    match *o {
        Operand::Input(k) => format!("a[{k}]"),
        Operand::Temp(k) => format!("t{k}"),
        Operand::Lit(v) if v.is_nan() => "FE_NAN".into(),
        Operand::Lit(v) if v.is_infinite() => {
            if v > 0.0 {
                "FE_INF".into()
            } else {
                "(-FE_INF)".into()
            }
        }
        // `{:e}` of an f64 is its shortest round-trip form, a valid C double literal.
        Operand::Lit(v) => format!("((C){v:e})"),
    }
}

/// The storage and compute types, conversions and kernel-name tag of a dtype.
struct TypeInfo {
    tag: &'static str,
    storage: &'static str,
    compute: &'static str,
    load: &'static str,
    store: &'static str,
    half: bool,
}

fn type_info(dtype: DataType) -> Option<TypeInfo> {
    let f = |tag, storage, compute, load, store, half| TypeInfo {
        tag,
        storage,
        compute,
        load,
        store,
        half,
    };
    Some(match dtype {
        DataType::Float32 => f("f32", "float", "float", "x", "x", false),
        DataType::Float64 => f("f64", "double", "double", "x", "x", false),
        DataType::Float16 => f(
            "f16",
            "__half",
            "float",
            "__half2float(x)",
            "__float2half_rn(x)",
            true,
        ),
        DataType::BFloat16 => f(
            "bf16",
            "__nv_bfloat16",
            "float",
            "__bfloat162float(x)",
            "__float2bfloat16_rn(x)",
            true,
        ),
        _ => return None,
    })
}

/// Whether a generated kernel exists for `dtype`.
pub fn supports(dtype: DataType) -> bool {
    type_info(dtype).is_some()
}

/// Elements per thread of the flat walk (`FE_V`): one 16-byte vector, halved for long
/// programs over many operands so the unrolled lanes stay in registers.
pub fn vec_width(prog: &Program, n_inputs: usize, dtype: DataType) -> usize {
    let elem = match dtype {
        DataType::Float64 => 8,
        DataType::Float32 => 4,
        _ => 2,
    };
    let mut v = 16 / elem;
    while v > 1 && (prog.instrs.len() + n_inputs + prog.outputs.len()) * v > 384 {
        v /= 2;
    }
    v
}

/// FNV-1a of the program text, for the module's name.
fn fnv(text: &str) -> u64 {
    text.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

/// The CUDA source of `prog` over `n_inputs` node inputs for `dtype`: the prefix, the
/// helpers and the walk of `kernels/fused.cu`, and `fe_eval`.
pub fn source(prog: &Program, n_inputs: usize, dtype: DataType) -> Result<String, String> {
    let ti = type_info(dtype).ok_or_else(|| format!("no generated kernel for {dtype}"))?;
    let n_out = prog.outputs.len();
    if n_inputs == 0 || prog.n_inputs() > n_inputs || n_out == 0 || n_inputs + n_out > MAX_OPS {
        return Err(format!(
            "the program reads {} of {n_inputs} input(s) and writes {n_out} output(s); the \
             CUDA kernel takes 1 to {MAX_OPS} inputs and outputs together",
            prog.n_inputs()
        ));
    }
    let mut s = String::new();
    let _ = writeln!(s, "// FusedElementwise ({dtype}), program:");
    for i in &prog.instrs {
        let args: Vec<String> = i.args.iter().map(|a| format!("{a:?}")).collect();
        let _ = writeln!(s, "//   {} {}", OPS[i.op].0, args.join(" "));
    }
    let _ = writeln!(s, "#define FE_NIN {n_inputs}");
    let _ = writeln!(s, "#define FE_NOUT {n_out}");
    let _ = writeln!(s, "#define FE_V {}", vec_width(prog, n_inputs, dtype));
    let _ = writeln!(s, "typedef {} FeT;", ti.storage);
    let _ = writeln!(s, "typedef {} C;", ti.compute);
    let _ = writeln!(
        s,
        "__device__ __forceinline__ C fe_in(FeT x) {{ return {}; }}",
        ti.load
    );
    let _ = writeln!(
        s,
        "__device__ __forceinline__ FeT fe_out(C x) {{ return {}; }}",
        ti.store
    );
    if dtype == DataType::Float64 {
        s.push_str("#define FE_INF __longlong_as_double(0x7ff0000000000000LL)\n");
        s.push_str("#define FE_NAN __longlong_as_double(0x7ff8000000000000LL)\n");
    } else {
        s.push_str("#define FE_INF __int_as_float(0x7f800000)\n");
        s.push_str("#define FE_NAN __int_as_float(0x7fc00000)\n");
    }
    let (head, tail) = FUSED_CU
        .split_once(MARKER)
        .expect("kernels/fused.cu has the fe_eval marker");
    s.push_str(head);
    s.push_str(
        "__device__ __forceinline__ void fe_eval(const C (&a)[FE_NIN], C (&r)[FE_NOUT]) {\n",
    );
    for (k, i) in prog.instrs.iter().enumerate() {
        let mut expr = OPS[i.op].2.to_string();
        for (j, a) in i.args.iter().enumerate() {
            expr = expr.replace(&format!("${j}"), &c_operand(a));
        }
        let _ = writeln!(s, "  const C t{k} = (C){expr};");
    }
    for (o, out) in prog.outputs.iter().enumerate() {
        let _ = writeln!(s, "  r[{o}] = {};", c_operand(out));
    }
    s.push_str("}\n");
    s.push_str(tail);
    Ok(s)
}

/// The module of `prog` over `n_inputs` inputs for `dtype` (kernel `fused_ew`).
pub fn module(prog: &Program, n_inputs: usize, dtype: DataType) -> Result<ModuleSpec, String> {
    let src = source(prog, n_inputs, dtype)?;
    let ti = type_info(dtype).expect("source checked the dtype");
    let name = format!("fused_ew_{}_{:016x}", ti.tag, fnv(&src));
    let spec = ModuleSpec::generated(name, src);
    Ok(if ti.half { spec.with_half() } else { spec })
}

/// Parses `text` and builds its module (for tests and the compile checks).
pub fn module_for(text: &str, n_inputs: usize, dtype: DataType) -> Result<ModuleSpec, String> {
    module(&Program::parse(text)?, n_inputs, dtype)
}

/// A program with every op once, chained over three inputs, with special literals: what the
/// module list compiles for each dtype.
pub fn every_op_program() -> String {
    let mut s = String::new();
    let mut last = "in0".to_string();
    for (k, (name, arity, _)) in OPS.iter().enumerate() {
        let args = match arity {
            1 => last.clone(),
            2 => format!("{last} in{}", 1 + k % 2),
            _ => format!("{last} -inf 6.0"),
        };
        let _ = writeln!(s, "t{k} = {name} {args}");
        last = format!("t{k}");
    }
    let n = OPS.len();
    let _ = writeln!(s, "t{n} = Max {last} NaN");
    let _ = writeln!(s, "t{} = Mul t{n} 1e-5", n + 1);
    let _ = writeln!(s, "out t{}\nout t0\nout in2", n + 1);
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_the_cpu_syntax_and_rejects_bad_programs() {
        let p = Program::parse(
            "t0 = Div in0 1.4142135381698608\nt1 = Erf t0\nt2 = Add t1 1.0\n\
             t3 = Mul in0 t2\nt4 = Clip t3 -inf 6.0\nout t4\nout t1\n",
        )
        .unwrap();
        assert_eq!(p.instrs.len(), 5);
        assert_eq!(p.outputs, vec![Operand::Temp(4), Operand::Temp(1)]);
        assert_eq!(p.n_inputs(), 1);
        for (text, want) in [
            ("t0 = Frob in0\nout t0", "unknown op"),
            ("t0 = Add in0\nout t0", "operand"),
            ("t0 = Relu t3\nout t0", "before it is defined"),
            ("t0 = Relu in0\nt0 = Relu in0\nout t0", "twice"),
            ("t0 = Relu in0", "no 'out'"),
        ] {
            let e = Program::parse(text).unwrap_err();
            assert!(e.contains(want), "{text:?}: {e}");
        }
    }

    #[test]
    fn generated_source_inlines_the_program() {
        let spec = module_for(
            "t0 = Add in0 in1\nt1 = LeakyRelu t0 0.1\nt2 = Max t1 -inf\nout t2\nout t0",
            2,
            DataType::Float16,
        )
        .unwrap();
        let src = spec.full_source();
        assert!(spec.needs_half);
        assert!(src.contains("#define FE_NIN 2") && src.contains("#define FE_NOUT 2"));
        assert!(src.contains("#define FE_V 8"));
        assert!(src.contains("const C t0 = (C)(a[0] + a[1]);"), "{src}");
        assert!(src.contains("((C)1e-1)"), "{src}");
        assert!(src.contains("fe_max(t1, (-FE_INF))"), "{src}");
        assert!(src.contains("r[1] = t0;"));
        assert!(!src.contains(MARKER));
        // Identical programs give identical modules (one compile, one cache entry); another
        // dtype or program another.
        let again = module_for(
            "t0 = Add in0 in1\nt1 = LeakyRelu t0 0.1\nt2 = Max t1 -inf\nout t2\nout t0",
            2,
            DataType::Float16,
        )
        .unwrap();
        assert_eq!(spec, again);
        let f32m = module_for("t0 = Add in0 in1\nout t0", 2, DataType::Float32).unwrap();
        assert!(!f32m.needs_half);
        assert_ne!(f32m.name, spec.name);
        assert!(module_for("t0 = Add in0 in1\nout t0", 2, DataType::Int32).is_err());
        assert!(module_for("t0 = Add in0 in1\nout t0", 1, DataType::Float32).is_err());
        // Every op's template names only the operands it takes.
        for (name, arity, expr) in OPS {
            for j in 0..3 {
                assert_eq!(expr.contains(&format!("${j}")), j < *arity, "{name}");
            }
        }
        Program::parse(&every_op_program()).unwrap();
    }
}
