//! String ops: StringNormalizer, StringConcat, StringSplit, RegexFullMatch.

use super::common::{invalid, one};
use crate::kernel::{kernel_fn, tensor_input, BuildContext, CpuKernel};
use crate::shape::{broadcast_shapes, broadcast_strides, for_each_offset};
use crate::{attrs, CpuRegistry, Tensor, Value};
use onnx_runtime_ep_api::EpError;
use onnx_runtime_ir::DataType;

fn strings<'a>(node: &str, t: &'a Tensor, what: &str) -> Result<&'a [String], EpError> {
    if t.dtype() != DataType::String {
        return Err(invalid(
            node,
            format!("{what} must be a string tensor, got {}", t.dtype()),
        ));
    }
    Ok(t.strings())
}

#[derive(Clone, Copy, PartialEq)]
enum Case {
    Lower,
    Upper,
    None,
}

fn build_string_normalizer(ctx: &BuildContext<'_>) -> Result<Box<dyn CpuKernel>, EpError> {
    let node = ctx.node.describe();
    let case = match attrs::string(ctx.node, "case_change_action", "NONE")?.as_str() {
        "LOWER" => Case::Lower,
        "UPPER" => Case::Upper,
        "NONE" => Case::None,
        other => {
            return Err(EpError::invalid_attribute(
                ctx.node,
                "case_change_action",
                format!("'{other}' is not LOWER, UPPER or NONE"),
            ))
        }
    };
    let sensitive = attrs::int(ctx.node, "is_case_sensitive", 0)? != 0;
    let stop: Vec<String> = attrs::opt_strings(ctx.node, "stopwords")?
        .unwrap_or_default()
        .into_iter()
        .map(|w| if sensitive { w } else { w.to_lowercase() })
        .collect();
    Ok(kernel_fn(move |inputs| {
        let x = tensor_input(&node, inputs, 0)?;
        let s = strings(&node, x, "X")?;
        let two_d = match *x.shape() {
            [_] => false,
            [1, _] => true,
            _ => {
                return Err(invalid(
                    &node,
                    format!("X must be [C] or [1, C], got {:?}", x.shape()),
                ))
            }
        };
        let mut kept: Vec<String> = s
            .iter()
            .filter(|w| {
                let key = if sensitive {
                    w.to_string()
                } else {
                    w.to_lowercase()
                };
                !stop.contains(&key)
            })
            .map(|w| match case {
                Case::Lower => w.to_lowercase(),
                Case::Upper => w.to_uppercase(),
                Case::None => w.clone(),
            })
            .collect();
        if kept.is_empty() {
            kept.push(String::new());
        }
        let shape = if two_d {
            vec![1, kept.len()]
        } else {
            vec![kept.len()]
        };
        one(Tensor::from_strings(shape, kept))
    }))
}

fn build_string_concat(ctx: &BuildContext<'_>) -> Result<Box<dyn CpuKernel>, EpError> {
    let node = ctx.node.describe();
    Ok(kernel_fn(move |inputs| {
        let x = tensor_input(&node, inputs, 0)?;
        let y = tensor_input(&node, inputs, 1)?;
        let (xs, ys) = (strings(&node, x, "X")?, strings(&node, y, "Y")?);
        let shape = broadcast_shapes(&node, &[x.shape(), y.shape()])?;
        let (sx, sy) = (
            broadcast_strides(x.shape(), &shape),
            broadcast_strides(y.shape(), &shape),
        );
        let mut out = vec![String::new(); shape.iter().product()];
        for_each_offset(&shape, [&sx, &sy], |i, [a, b]| {
            let mut s = String::with_capacity(xs[a].len() + ys[b].len());
            s.push_str(&xs[a]);
            s.push_str(&ys[b]);
            out[i] = s;
        });
        one(Tensor::from_strings(shape, out))
    }))
}

/// Python's `str.split(None, maxsplit)`: runs of whitespace separate, ends are trimmed.
fn split_whitespace(s: &str, maxsplit: Option<usize>) -> Vec<String> {
    let mut out = Vec::new();
    let mut rest = s.trim_start();
    while !rest.is_empty() {
        if maxsplit.is_some_and(|m| out.len() == m) {
            out.push(rest.to_string());
            break;
        }
        match rest.find(char::is_whitespace) {
            Some(i) => {
                out.push(rest[..i].to_string());
                rest = rest[i..].trim_start();
            }
            None => {
                out.push(rest.to_string());
                break;
            }
        }
    }
    out
}

fn build_string_split(ctx: &BuildContext<'_>) -> Result<Box<dyn CpuKernel>, EpError> {
    let node = ctx.node.describe();
    let delim = attrs::opt_string(ctx.node, "delimiter")?.filter(|d| !d.is_empty());
    let maxsplit = match attrs::opt_int(ctx.node, "maxsplit")? {
        Some(m) if m >= 0 => Some(m as usize),
        _ => None,
    };
    Ok(kernel_fn(move |inputs| {
        let x = tensor_input(&node, inputs, 0)?;
        let xs = strings(&node, x, "X")?;
        let parts: Vec<Vec<String>> = xs
            .iter()
            .map(|s| match &delim {
                None => split_whitespace(s, maxsplit),
                Some(d) => match maxsplit {
                    Some(m) => s.splitn(m + 1, d.as_str()).map(str::to_string).collect(),
                    None => s.split(d.as_str()).map(str::to_string).collect(),
                },
            })
            .collect();
        let width = parts.iter().map(Vec::len).max().unwrap_or(0);
        let mut flat = Vec::with_capacity(parts.len() * width);
        let mut counts = Vec::with_capacity(parts.len());
        for p in parts {
            counts.push(p.len() as i64);
            let n = p.len();
            flat.extend(p);
            flat.extend(std::iter::repeat_n(String::new(), width - n));
        }
        let mut shape = x.shape().to_vec();
        shape.push(width);
        Ok(vec![
            Value::Tensor(Tensor::from_strings(shape, flat)),
            Value::Tensor(Tensor::from_vec(x.shape().to_vec(), counts)),
        ])
    }))
}

fn build_regex_full_match(ctx: &BuildContext<'_>) -> Result<Box<dyn CpuKernel>, EpError> {
    let node = ctx.node.describe();
    let pattern = attrs::opt_string(ctx.node, "pattern")?
        .ok_or_else(|| EpError::invalid_attribute(ctx.node, "pattern", "is required"))?;
    let re = regex::Regex::new(&format!("^(?:{pattern})$")).map_err(|e| {
        EpError::invalid_attribute(
            ctx.node,
            "pattern",
            format!("'{pattern}' is not a valid regex: {e}"),
        )
    })?;
    Ok(kernel_fn(move |inputs| {
        let x = tensor_input(&node, inputs, 0)?;
        let m: Vec<bool> = strings(&node, x, "X")?
            .iter()
            .map(|s| re.is_match(s))
            .collect();
        one(Tensor::from_bools(x.shape().to_vec(), &m))
    }))
}

pub fn register(r: &mut CpuRegistry) {
    r.register("", "StringNormalizer", 10, build_string_normalizer);
    r.register("", "StringConcat", 20, build_string_concat);
    r.register("", "StringSplit", 20, build_string_split);
    r.register("", "RegexFullMatch", 20, build_regex_full_match);
}

#[cfg(test)]
mod tests {
    use super::super::common::testutil::*;
    use super::split_whitespace;
    use crate::{Tensor, Value};
    use onnx_runtime_ir::Attribute;

    fn s(shape: &[usize], v: &[&str]) -> Option<Value> {
        Some(Value::Tensor(Tensor::from_strings(
            shape.to_vec(),
            v.iter().map(|x| x.to_string()).collect(),
        )))
    }

    #[test]
    fn python_split_semantics() {
        // "  a b\tc  ".split(None, 1) == ['a', 'b\tc  ']
        assert_eq!(split_whitespace("  a b\tc  ", Some(1)), vec!["a", "b\tc  "]);
        assert_eq!(split_whitespace("  a b\tc  ", None), vec!["a", "b", "c"]);
        assert!(split_whitespace("   ", None).is_empty());
        let n = node(
            "StringSplit",
            1,
            2,
            vec![("delimiter", Attribute::String("-".into()))],
        );
        let o = run(&n, 20, &[s(&[2], &["a-b-c", "d"])]).unwrap();
        let y = o[0].as_tensor().unwrap();
        assert_eq!(y.shape(), &[2, 3]);
        assert_eq!(y.strings(), &["a", "b", "c", "d", "", ""]);
        assert_eq!(out::<i64>(&o, 1).1, vec![3, 1]);
    }

    #[test]
    fn normalizer_concat_regex() {
        let n = node(
            "StringNormalizer",
            1,
            1,
            vec![
                ("case_change_action", Attribute::String("UPPER".into())),
                ("stopwords", Attribute::Strings(vec!["the".into()])),
            ],
        );
        let o = run(&n, 10, &[s(&[1, 3], &["The", "cat", "sat"])]).unwrap();
        let y = o[0].as_tensor().unwrap();
        assert_eq!(
            (y.shape(), y.strings()),
            (
                &[1usize, 2][..],
                &["CAT".to_string(), "SAT".to_string()][..]
            )
        );
        let o = run(
            &node("StringConcat", 2, 1, vec![]),
            20,
            &[s(&[2], &["a", "b"]), s(&[], &["!"])],
        )
        .unwrap();
        assert_eq!(o[0].as_tensor().unwrap().strings(), &["a!", "b!"]);
        let n = node(
            "RegexFullMatch",
            1,
            1,
            vec![("pattern", Attribute::String(r"\w+@\w+\.com".into()))],
        );
        let o = run(&n, 20, &[s(&[2], &["me@x.com", "me@x.com.au"])]).unwrap();
        assert_eq!(o[0].as_tensor().unwrap().bytes(), &[1, 0]);
    }
}
