//! Choosing the next token from logits: greedy or sampled (temperature, top-k, top-p), with a
//! repetition penalty, from a small seeded PRNG so a seed always gives the same text.

use crate::config::SearchDefaults;
use crate::error::{GenError, GenResult};

/// How the next token is chosen.
#[derive(Clone, Debug, PartialEq)]
pub struct SamplingOptions {
    /// Sample from the distribution; `false` takes the most likely token (greedy).
    pub do_sample: bool,
    /// Logits are divided by it before sampling (must be positive when sampling).
    pub temperature: f32,
    /// Keep only the `top_k` most likely tokens (0: all).
    pub top_k: usize,
    /// Keep the smallest set of most likely tokens whose probabilities add up to `top_p`
    /// (1: all).
    pub top_p: f32,
    /// Logits of tokens already in the sequence (prompt included) are divided by it when
    /// positive and multiplied by it when negative (the CTRL / transformers rule); 1 is off.
    pub repetition_penalty: f32,
    /// Seed of the sampler's PRNG.
    pub seed: u64,
}

impl Default for SamplingOptions {
    fn default() -> Self {
        SamplingOptions {
            do_sample: false,
            temperature: 1.0,
            top_k: 0,
            top_p: 1.0,
            repetition_penalty: 1.0,
            seed: 0,
        }
    }
}

impl SamplingOptions {
    /// The folder's `search` defaults.
    pub fn from_search(s: &SearchDefaults) -> SamplingOptions {
        SamplingOptions {
            do_sample: s.do_sample,
            temperature: s.temperature,
            top_k: s.top_k,
            top_p: s.top_p,
            repetition_penalty: s.repetition_penalty,
            seed: 0,
        }
    }

    /// Checks the ranges: temperature > 0 when sampling, 0 < top_p <= 1, penalty > 0.
    pub fn validate(&self) -> GenResult<()> {
        let finite = |v: f32| v.is_finite();
        if self.do_sample && !(finite(self.temperature) && self.temperature > 0.0) {
            return Err(GenError::option(
                "temperature",
                format!(
                    "{} must be positive with sampling (greedy decoding needs no temperature)",
                    self.temperature
                ),
            ));
        }
        if !(finite(self.top_p) && self.top_p > 0.0 && self.top_p <= 1.0) {
            return Err(GenError::option(
                "top_p",
                format!("{} must be in (0, 1]", self.top_p),
            ));
        }
        if !(finite(self.repetition_penalty) && self.repetition_penalty > 0.0) {
            return Err(GenError::option(
                "repetition_penalty",
                format!("{} must be positive (1 is off)", self.repetition_penalty),
            ));
        }
        Ok(())
    }
}

/// xoshiro256** seeded through SplitMix64: small, fast and the same on every platform.
#[derive(Clone, Debug)]
pub struct Rng {
    s: [u64; 4],
}

impl Rng {
    pub fn new(seed: u64) -> Rng {
        let mut x = seed;
        let mut next = || {
            x = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
            let mut z = x;
            z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
            z ^ (z >> 31)
        };
        Rng {
            s: [next(), next(), next(), next()],
        }
    }

    pub fn next_u64(&mut self) -> u64 {
        let s = &mut self.s;
        let out = s[1].wrapping_mul(5).rotate_left(7).wrapping_mul(9);
        let t = s[1] << 17;
        s[2] ^= s[0];
        s[3] ^= s[1];
        s[1] ^= s[2];
        s[0] ^= s[3];
        s[2] ^= t;
        s[3] = s[3].rotate_left(45);
        out
    }

    /// Uniform in [0, 1) with 53 random bits.
    pub fn next_f64(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 * (1.0 / (1u64 << 53) as f64)
    }
}

/// Applies the repetition penalty to `logits` for every distinct token of `history`.
pub fn apply_repetition_penalty(logits: &mut [f32], history: &[u32], penalty: f32) {
    if penalty == 1.0 {
        return;
    }
    let mut seen = vec![false; logits.len()];
    for &t in history {
        let Some(slot) = seen.get_mut(t as usize) else {
            continue;
        };
        if std::mem::replace(slot, true) {
            continue;
        }
        let l = &mut logits[t as usize];
        *l = if *l > 0.0 { *l / penalty } else { *l * penalty };
    }
}

/// The index of the largest logit (the first one on ties, as numpy's argmax). NaN logits
/// are never chosen.
pub fn argmax(logits: &[f32]) -> u32 {
    let mut best = 0usize;
    let mut best_v = f32::NEG_INFINITY;
    for (i, &v) in logits.iter().enumerate() {
        if v > best_v {
            best = i;
            best_v = v;
        }
    }
    best as u32
}

/// The tokens that survive top-k and then top-p, most likely first, with their
/// probabilities renormalised over the survivors. `logits` are already divided by the
/// temperature.
pub fn filtered_distribution(logits: &[f32], top_k: usize, top_p: f32) -> Vec<(u32, f64)> {
    let mut order: Vec<u32> = (0..logits.len() as u32)
        .filter(|&i| !logits[i as usize].is_nan())
        .collect();
    // Most likely first; the lower id first on ties, so the order is total and stable.
    order.sort_by(|&a, &b| {
        logits[b as usize]
            .total_cmp(&logits[a as usize])
            .then(a.cmp(&b))
    });
    if top_k > 0 && top_k < order.len() {
        order.truncate(top_k);
    }
    let Some(&first) = order.first() else {
        return Vec::new();
    };
    let max = logits[first as usize] as f64;
    let mut probs: Vec<(u32, f64)> = order
        .iter()
        .map(|&i| (i, (logits[i as usize] as f64 - max).exp()))
        .collect();
    let total: f64 = probs.iter().map(|p| p.1).sum();
    probs.iter_mut().for_each(|p| p.1 /= total);
    if top_p < 1.0 {
        // Keep tokens until their mass reaches top_p (the one that crosses it included).
        let mut mass = 0.0;
        let mut keep = probs.len();
        for (n, p) in probs.iter().enumerate() {
            mass += p.1;
            if mass >= top_p as f64 {
                keep = n + 1;
                break;
            }
        }
        probs.truncate(keep.max(1));
        let total: f64 = probs.iter().map(|p| p.1).sum();
        probs.iter_mut().for_each(|p| p.1 /= total);
    }
    probs
}

/// Chooses the next token. `logits` are the model's for the last position (changed in place
/// by the penalty and the temperature); `history` is every token of the sequence so far.
pub fn choose(logits: &mut [f32], history: &[u32], opts: &SamplingOptions, rng: &mut Rng) -> u32 {
    apply_repetition_penalty(logits, history, opts.repetition_penalty);
    if !opts.do_sample {
        return argmax(logits);
    }
    let t = opts.temperature;
    if t != 1.0 {
        logits.iter_mut().for_each(|l| *l /= t);
    }
    let probs = filtered_distribution(logits, opts.top_k, opts.top_p);
    let u = rng.next_f64();
    let mut acc = 0.0;
    for &(id, p) in &probs {
        acc += p;
        if u < acc {
            return id;
        }
    }
    probs.last().map_or_else(|| argmax(logits), |p| p.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn repetition_penalty_divides_positive_and_multiplies_negative_once_per_token() {
        let mut l = vec![2.0, -2.0, 1.0, 4.0];
        apply_repetition_penalty(&mut l, &[0, 1, 1, 0, 9], 2.0);
        assert_eq!(l, vec![1.0, -4.0, 1.0, 4.0]);
        let mut l = vec![2.0, -2.0];
        apply_repetition_penalty(&mut l, &[0, 1], 1.0);
        assert_eq!(l, vec![2.0, -2.0]);
    }

    #[test]
    fn argmax_takes_the_first_of_equal_maxima_and_skips_nan() {
        assert_eq!(argmax(&[1.0, 3.0, 3.0, 2.0]), 1);
        assert_eq!(argmax(&[f32::NAN, 0.5, 0.1]), 1);
    }

    fn softmax(l: &[f64]) -> Vec<f64> {
        let m = l.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
        let e: Vec<f64> = l.iter().map(|x| (x - m).exp()).collect();
        let s: f64 = e.iter().sum();
        e.iter().map(|x| x / s).collect()
    }

    #[test]
    fn top_k_keeps_the_k_most_likely_renormalised() {
        let logits = [0.5f32, 3.0, 1.0, 2.0, -1.0];
        let d = filtered_distribution(&logits, 2, 1.0);
        let ids: Vec<u32> = d.iter().map(|p| p.0).collect();
        assert_eq!(ids, vec![1, 3]);
        let want = softmax(&[3.0, 2.0]);
        for (p, w) in d.iter().zip(&want) {
            assert!((p.1 - w).abs() < 1e-12);
        }
        assert_eq!(filtered_distribution(&logits, 0, 1.0).len(), 5);
    }

    #[test]
    fn top_p_keeps_the_smallest_set_reaching_the_mass() {
        let logits: Vec<f32> = [0.5f64, 0.3, 0.15, 0.05]
            .iter()
            .map(|p| p.ln() as f32)
            .collect();
        let ids = |p: f32| -> Vec<u32> {
            filtered_distribution(&logits, 0, p)
                .iter()
                .map(|x| x.0)
                .collect()
        };
        assert_eq!(ids(0.5), vec![0]);
        assert_eq!(ids(0.6), vec![0, 1]);
        assert_eq!(ids(0.79), vec![0, 1]);
        assert_eq!(ids(0.81), vec![0, 1, 2]);
        assert_eq!(ids(0.01), vec![0]);
        let d = filtered_distribution(&logits, 0, 0.9);
        assert!((d.iter().map(|p| p.1).sum::<f64>() - 1.0).abs() < 1e-12);
        assert!((d[0].1 - 0.5 / 0.95).abs() < 1e-6);
        // top-k applies first.
        let d = filtered_distribution(&logits, 1, 0.99);
        assert_eq!(d.len(), 1);
    }

    #[test]
    fn sampling_is_reproducible_and_follows_the_distribution() {
        let logits = [1.0f32, 2.0, 0.0, 1.5];
        let opts = SamplingOptions {
            do_sample: true,
            seed: 7,
            ..Default::default()
        };
        let draw = |seed| {
            let mut rng = Rng::new(seed);
            (0..20000)
                .map(|_| choose(&mut logits.clone(), &[], &opts, &mut rng))
                .collect::<Vec<_>>()
        };
        let a = draw(7);
        assert_eq!(a, draw(7));
        assert_ne!(a, draw(8));
        let want = softmax(&[1.0, 2.0, 0.0, 1.5]);
        for (id, w) in want.iter().enumerate() {
            let got = a.iter().filter(|&&t| t as usize == id).count() as f64 / a.len() as f64;
            assert!((got - w).abs() < 0.015, "token {id}: {got} vs {w}");
        }
    }

    #[test]
    fn low_temperature_approaches_greedy() {
        let opts = SamplingOptions {
            do_sample: true,
            temperature: 0.01,
            ..Default::default()
        };
        let mut rng = Rng::new(1);
        for _ in 0..100 {
            assert_eq!(choose(&mut [1.0, 1.2, 0.9], &[], &opts, &mut rng), 1);
        }
    }

    #[test]
    fn out_of_range_options_are_errors() {
        let bad = [
            SamplingOptions {
                do_sample: true,
                temperature: 0.0,
                ..Default::default()
            },
            SamplingOptions {
                top_p: 1.5,
                ..Default::default()
            },
            SamplingOptions {
                repetition_penalty: 0.0,
                ..Default::default()
            },
        ];
        for (o, name) in bad
            .iter()
            .zip(["temperature", "top_p", "repetition_penalty"])
        {
            let e = o.validate().unwrap_err().to_string();
            assert!(e.contains(name), "{e}");
        }
        SamplingOptions::default().validate().unwrap();
    }

    #[test]
    fn rng_is_uniform_enough() {
        let mut r = Rng::new(42);
        let n = 100000;
        let mean = (0..n).map(|_| r.next_f64()).sum::<f64>() / n as f64;
        assert!((mean - 0.5).abs() < 0.01);
    }
}
