//! TfIdfVectorizer (opset 9): counts the pool's n-grams (with up to `max_skip_count` skipped
//! tokens between items) in each row of an int32/int64/string input, then weights the
//! counts: TF (raw counts), IDF (1 or weight when present) or TFIDF (count x weight).
//! Unigrams are counted once, not once per skip distance.

use super::common::{invalid, unsupported};
use crate::kernel::{tensor_input, BuildContext, CpuKernel};
use crate::{attrs, CpuRegistry, Tensor, Value};
use onnx_runtime_ep_api::EpError;
use onnx_runtime_ir::DataType;
use std::collections::HashMap;
use std::hash::Hash;

#[derive(Clone, Copy, PartialEq)]
enum Mode {
    Tf,
    Idf,
    TfIdf,
}

enum Pool {
    Ints(HashMap<Vec<i64>, usize>),
    Strings(HashMap<Vec<String>, usize>),
}

struct TfIdf {
    node: String,
    mode: Mode,
    min_n: usize,
    max_n: usize,
    max_skip: usize,
    /// n-gram id -> output coordinate.
    indexes: Vec<usize>,
    weights: Vec<f32>,
    out_size: usize,
    pool: Pool,
}

/// Splits `pool` into n-grams (ids in pool order) using the `ngram_counts` start offsets.
fn grams<K: Clone + Hash + Eq>(
    node: &onnx_runtime_ir::Node,
    pool: &[K],
    counts: &[i64],
) -> Result<HashMap<Vec<K>, usize>, EpError> {
    let mut map = HashMap::new();
    let mut id = 0usize;
    for (k, &start) in counts.iter().enumerate() {
        let n = k + 1;
        let end = counts.get(k + 1).copied().unwrap_or(pool.len() as i64);
        if start < 0
            || end < start
            || end as usize > pool.len()
            || !((end - start) as usize).is_multiple_of(n)
        {
            return Err(EpError::invalid_attribute(
                node,
                "ngram_counts",
                format!(
                    "{counts:?} does not split a pool of {} items into whole {n}-grams",
                    pool.len()
                ),
            ));
        }
        for g in pool[start as usize..end as usize].chunks(n) {
            map.entry(g.to_vec()).or_insert(id);
            id += 1;
        }
    }
    Ok(map)
}

impl TfIdf {
    /// Adds the n-gram counts of `row` to `freq` (by n-gram id).
    fn count_row<K: Clone + Hash + Eq>(
        &self,
        map: &HashMap<Vec<K>, usize>,
        row: &[K],
        freq: &mut [u64],
    ) {
        let mut min_n = self.min_n;
        for sd in 1..=self.max_skip + 1 {
            for start in 0..row.len() {
                if start + sd * (min_n - 1) >= row.len() {
                    break;
                }
                let mut gram = Vec::with_capacity(self.max_n);
                for n in 1..=self.max_n {
                    let at = start + (n - 1) * sd;
                    if at >= row.len() {
                        break;
                    }
                    gram.push(row[at].clone());
                    if n >= min_n {
                        if let Some(&id) = map.get(&gram) {
                            freq[id] += 1;
                        }
                    }
                }
            }
            if min_n == 1 {
                min_n = 2;
                if min_n > self.max_n {
                    break;
                }
            }
        }
    }
}

impl CpuKernel for TfIdf {
    fn run(&self, inputs: &[Option<&Value>]) -> Result<Vec<Value>, EpError> {
        let node = &self.node;
        let x = tensor_input(node, inputs, 0)?;
        let (rows, c, out_shape) = match x.shape() {
            [] => (1, 1, vec![self.out_size]),
            [c] => (1, *c, vec![self.out_size]),
            [b, c] => (*b, *c, vec![*b, self.out_size]),
            s => {
                return Err(invalid(
                    node,
                    format!("input must be [C] or [N, C], got {s:?}"),
                ))
            }
        };
        let n_ids = self.indexes.len();
        let mut freq = vec![0u64; rows * n_ids];
        match (&self.pool, x.dtype()) {
            (Pool::Ints(map), DataType::Int32 | DataType::Int64) => {
                let v = x.to_i64_vec().unwrap_or_default();
                for r in 0..rows {
                    self.count_row(map, &v[r * c..(r + 1) * c], &mut freq[r * n_ids..][..n_ids]);
                }
            }
            (Pool::Strings(map), DataType::String) => {
                let v = x.strings();
                for r in 0..rows {
                    self.count_row(map, &v[r * c..(r + 1) * c], &mut freq[r * n_ids..][..n_ids]);
                }
            }
            (Pool::Ints(_), d) => {
                return Err(unsupported(
                    node,
                    "TfIdfVectorizer",
                    d,
                    "int32 or int64 with pool_int64s",
                ))
            }
            (Pool::Strings(_), d) => {
                return Err(unsupported(
                    node,
                    "TfIdfVectorizer",
                    d,
                    "string input with pool_strings",
                ))
            }
        }
        let mut counts = vec![0u64; rows * self.out_size];
        for r in 0..rows {
            for (id, &o) in self.indexes.iter().enumerate() {
                counts[r * self.out_size + o] += freq[r * n_ids + id];
            }
        }
        let y: Vec<f32> = counts
            .iter()
            .enumerate()
            .map(|(p, &f)| {
                let w = self.weights.get(p % self.out_size).copied();
                match (self.mode, w) {
                    (Mode::Tf, _) => f as f32,
                    (Mode::Idf, Some(w)) => {
                        if f > 0 {
                            w
                        } else {
                            0.0
                        }
                    }
                    (Mode::Idf, None) => {
                        if f > 0 {
                            1.0
                        } else {
                            0.0
                        }
                    }
                    (Mode::TfIdf, Some(w)) => w * f as f32,
                    (Mode::TfIdf, None) => f as f32,
                }
            })
            .collect();
        Ok(vec![Value::Tensor(Tensor::from_vec(out_shape, y))])
    }
}

fn build(ctx: &BuildContext<'_>) -> Result<Box<dyn CpuKernel>, EpError> {
    let n = ctx.node;
    let bad = |name: &str, msg: String| EpError::invalid_attribute(n, name, msg);
    let mode = match attrs::string(n, "mode", "")?.as_str() {
        "TF" => Mode::Tf,
        "IDF" => Mode::Idf,
        "TFIDF" => Mode::TfIdf,
        other => return Err(bad("mode", format!("'{other}' is not TF, IDF or TFIDF"))),
    };
    let min_n = attrs::int(n, "min_gram_length", 0)?;
    let max_n = attrs::int(n, "max_gram_length", 0)?;
    let max_skip = attrs::int(n, "max_skip_count", 0)?;
    if min_n < 1 || max_n < min_n || max_skip < 0 {
        return Err(bad(
            "min_gram_length",
            format!("need 1 <= min_gram_length ({min_n}) <= max_gram_length ({max_n}) and max_skip_count ({max_skip}) >= 0"),
        ));
    }
    let counts = attrs::ints(n, "ngram_counts")?;
    let raw_idx = attrs::ints(n, "ngram_indexes")?;
    let indexes: Vec<usize> = raw_idx
        .iter()
        .map(|&i| usize::try_from(i).map_err(|_| bad("ngram_indexes", format!("{i} is negative"))))
        .collect::<Result<_, _>>()?;
    let pool = match (
        attrs::opt_ints(n, "pool_int64s")?,
        attrs::opt_strings(n, "pool_strings")?,
    ) {
        (Some(p), None) => Pool::Ints(grams(n, &p, &counts)?),
        (None, Some(p)) => Pool::Strings(grams(n, &p, &counts)?),
        _ => {
            return Err(bad(
                "pool_int64s",
                "exactly one of pool_int64s and pool_strings must be set".into(),
            ))
        }
    };
    let n_grams = match &pool {
        Pool::Ints(m) => m.values().max().map_or(0, |&v| v + 1),
        Pool::Strings(m) => m.values().max().map_or(0, |&v| v + 1),
    };
    if indexes.len() < n_grams {
        return Err(bad(
            "ngram_indexes",
            format!("{} indexes for {n_grams} pool n-grams", indexes.len()),
        ));
    }
    let out_size = indexes.iter().max().map_or(0, |&m| m + 1);
    Ok(Box::new(TfIdf {
        node: n.describe(),
        mode,
        min_n: min_n as usize,
        max_n: max_n as usize,
        max_skip: max_skip as usize,
        indexes,
        weights: attrs::opt_floats(n, "weights")?.unwrap_or_default(),
        out_size,
        pool,
    }))
}

pub fn register(r: &mut CpuRegistry) {
    r.register("", "TfIdfVectorizer", 9, build);
}

#[cfg(test)]
mod tests {
    use super::super::common::testutil::*;
    use onnx_runtime_ir::Attribute;

    /// The spec's example: skips of 2 give the 2-grams [94, 12] and [17, 28].
    #[test]
    fn skip_bigrams_and_unigrams_counted_once() {
        let n = node(
            "TfIdfVectorizer",
            1,
            1,
            vec![
                ("mode", Attribute::String("TF".into())),
                ("min_gram_length", Attribute::Int(1)),
                ("max_gram_length", Attribute::Int(2)),
                ("max_skip_count", Attribute::Int(2)),
                ("ngram_counts", Attribute::Ints(vec![0, 2])),
                ("ngram_indexes", Attribute::Ints(vec![0, 1, 2, 3])),
                ("pool_int64s", Attribute::Ints(vec![94, 17, 94, 12, 17, 28])),
            ],
        );
        let res = run(
            &n,
            9,
            &[t(&[2, 5], vec![94i64, 17, 36, 12, 28, 94, 94, 1, 2, 3])],
        )
        .unwrap();
        let (shape, y) = out::<f32>(&res, 0);
        assert_eq!(shape, vec![2, 4]);
        assert_eq!(y, vec![1., 1., 1., 1., 2., 0., 0., 0.]);
    }
}
