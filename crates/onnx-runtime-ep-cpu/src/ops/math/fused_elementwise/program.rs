//! The program of a `FusedElementwise` node: its text format, the [`Op`]s it computes, the
//! parser ([`Program::parse`]) and printer ([`Program::to_text`]), and the size limits device
//! kernels rely on. The session's optimizer writes programs with these types; the kernel in
//! the parent module runs them.
//!
//! # The program
//!
//! Attribute `program` (a string) holds one instruction per line, in SSA form:
//!
//! ```text
//! t0 = Div in0 1.4142135381698608
//! t1 = Erf t0
//! t2 = Add t1 1.0
//! t3 = Mul in0 t2
//! t4 = Mul t3 0.5
//! out t4
//! ```
//!
//! Operands are `in<k>` (node input `k`), `t<k>` (a temporary defined on an earlier line) or a
//! float literal (Rust's `f64` syntax: `0.5`, `1e-5`, `inf`, `-inf`, `NaN`). Each temporary is
//! defined once. `out <operand>` lines name the node's outputs in order. Blank lines and lines
//! starting with `#` are ignored. Ops and their operands are those of [`Op`]; op attributes
//! (LeakyRelu's alpha, Clip's bounds, ...) are trailing operands, literals in practice.

use std::collections::HashMap;
use std::fmt::Write as _;

/// Most inputs a program reads (device kernels pass their addresses by value).
pub const MAX_INPUTS: usize = 16;
/// Most outputs a program writes.
pub const MAX_OUTPUTS: usize = 8;
/// Most instructions in a program.
pub const MAX_INSTRS: usize = 96;

macro_rules! ops {
    ($($name:ident $arity:literal),* $(,)?) => {
        /// The instructions of a program, with their operand counts (trailing operands are the
        /// op's attributes).
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
        pub enum Op { $($name),* }

        impl Op {
            /// Every op.
            pub const ALL: &'static [Op] = &[$(Op::$name),*];

            /// The name programs spell it with.
            pub fn name(self) -> &'static str {
                match self { $(Op::$name => stringify!($name)),* }
            }

            /// How many operands it takes.
            pub fn arity(self) -> usize {
                match self { $(Op::$name => $arity),* }
            }
        }
    };
}

ops! {
    // x
    Relu 1, Sigmoid 1, Tanh 1, Exp 1, Log 1, Erf 1, Neg 1, Abs 1, Sqrt 1, Reciprocal 1,
    Softplus 1, Softsign 1, Mish 1, HardSwish 1, Floor 1, Ceil 1, Round 1, Sign 1, Sin 1, Cos 1,
    // 0.5 x (1 + erf(x / sqrt 2)); the tanh approximation
    Gelu 1, GeluTanh 1,
    // x alpha
    LeakyRelu 2, Elu 2, Celu 2, ThresholdedRelu 2,
    // x * sigmoid(alpha x): Swish, com.microsoft QuickGelu
    Swish 2,
    // x alpha gamma
    Selu 3,
    // x alpha beta
    HardSigmoid 3,
    // x lo hi: (x < lo ? lo : x), then (> hi ? hi : .); NaN stays NaN
    Clip 3,
    // a b
    Add 2, Sub 2, Mul 2, Div 2, Pow 2, Max 2, Min 2,
    // x slope: x < 0 ? x * slope : x
    PRelu 2,
}

impl Op {
    pub fn from_name(name: &str) -> Option<Op> {
        Op::ALL.iter().copied().find(|o| o.name() == name)
    }
}

/// An instruction operand.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Operand {
    /// Node input `k`.
    Input(usize),
    /// Temporary `k` (defined by an earlier instruction).
    Temp(usize),
    /// A literal, converted to the compute type where it is used.
    Lit(f64),
}

impl std::fmt::Display for Operand {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Operand::Input(k) => write!(f, "in{k}"),
            Operand::Temp(k) => write!(f, "t{k}"),
            // `{:?}` of an f64 round-trips through `str::parse` (`1.0`, `1e-5`, `inf`, `NaN`).
            Operand::Lit(v) => write!(f, "{v:?}"),
        }
    }
}

/// `dst = op args...`.
#[derive(Clone, Debug, PartialEq)]
pub struct Instr {
    pub dst: usize,
    pub op: Op,
    pub args: Vec<Operand>,
}

/// A parsed program: temporaries are numbered densely in definition order.
#[derive(Clone, Debug, PartialEq, Default)]
pub struct Program {
    pub instrs: Vec<Instr>,
    pub outputs: Vec<Operand>,
}

fn parse_operand(tok: &str, temps: &HashMap<usize, usize>) -> Result<Operand, String> {
    let digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    if let Some(k) = tok.strip_prefix("in").filter(|s| digits(s)) {
        let k: usize = k.parse().map_err(|_| format!("bad input '{tok}'"))?;
        return Ok(Operand::Input(k));
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
    /// Parses and checks a program (see the module docs for the syntax).
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
                prog.outputs
                    .push(parse_operand(toks[1], &temps).map_err(at)?);
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
            let op = Op::from_name(toks[2]).ok_or_else(|| {
                at(format!(
                    "unknown op '{}'; known: {}",
                    toks[2],
                    Op::ALL
                        .iter()
                        .map(|o| o.name())
                        .collect::<Vec<_>>()
                        .join(", ")
                ))
            })?;
            let args: Vec<Operand> = toks[3..]
                .iter()
                .map(|t| parse_operand(t, &temps))
                .collect::<Result<_, _>>()
                .map_err(at)?;
            if args.len() != op.arity() {
                return Err(at(format!(
                    "{} takes {} operand(s), got {}",
                    op.name(),
                    op.arity(),
                    args.len()
                )));
            }
            let dst = temps.len();
            if temps.insert(k, dst).is_some() {
                return Err(at(format!("t{k} is defined twice")));
            }
            prog.instrs.push(Instr { dst, op, args });
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
        if prog.outputs.len() > MAX_OUTPUTS {
            return Err(format!(
                "the program has {} outputs; at most {MAX_OUTPUTS} are supported",
                prog.outputs.len()
            ));
        }
        if prog.n_inputs() > MAX_INPUTS {
            return Err(format!(
                "the program reads {} inputs; at most {MAX_INPUTS} are supported",
                prog.n_inputs()
            ));
        }
        Ok(prog)
    }

    /// The text form ([`Program::parse`] reads it back).
    pub fn to_text(&self) -> String {
        let mut s = String::new();
        for i in &self.instrs {
            let _ = write!(s, "t{} = {}", i.dst, i.op.name());
            for a in &i.args {
                let _ = write!(s, " {a}");
            }
            s.push('\n');
        }
        for o in &self.outputs {
            let _ = writeln!(s, "out {o}");
        }
        s
    }

    /// How many node inputs the program reads (one past the highest `in<k>`).
    pub fn n_inputs(&self) -> usize {
        let all = self
            .instrs
            .iter()
            .flat_map(|i| i.args.iter())
            .chain(&self.outputs);
        all.filter_map(|o| match o {
            Operand::Input(k) => Some(k + 1),
            _ => None,
        })
        .max()
        .unwrap_or(0)
    }

    pub fn n_temps(&self) -> usize {
        self.instrs.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn programs_round_trip_through_text() {
        let text = "t0 = Div in0 1.4142135381698608\nt1 = Erf t0\nt2 = Add t1 1.0\n\
                    t3 = Mul in0 t2\nt4 = Clip t3 -inf 6.0\nt5 = Mul t4 1e-5\nout t5\nout t1\n";
        let p = Program::parse(text).unwrap();
        assert_eq!(p.instrs.len(), 6);
        assert_eq!(p.n_inputs(), 1);
        assert_eq!(p.to_text(), text);
        assert_eq!(Program::parse(&p.to_text()).unwrap(), p);
        let nan = Program::parse("t0 = Max in1 NaN\nout t0").unwrap();
        assert!(matches!(nan.instrs[0].args[1], Operand::Lit(v) if v.is_nan()));
        assert_eq!(nan.n_inputs(), 2);
    }
}
