//! Operator registry keyed by (domain, op, since-version).

use std::collections::HashMap;

/// Maps (domain, op) to entries by since-version. A lookup for a model's opset picks the
/// entry with the highest since-version not above it.
pub struct OpRegistry<F> {
    entries: HashMap<(String, String), Vec<(u64, F)>>,
}

impl<F> Default for OpRegistry<F> {
    fn default() -> Self {
        OpRegistry {
            entries: HashMap::new(),
        }
    }
}

fn normalize(domain: &str) -> &str {
    if domain == "ai.onnx" {
        ""
    } else {
        domain
    }
}

impl<F> OpRegistry<F> {
    pub fn new() -> Self {
        Self::default()
    }

    /// Registers `factory` for `op` in `domain` from opset `since` on. A later registration of
    /// the same (domain, op, since) replaces the earlier one.
    pub fn register(&mut self, domain: &str, op: &str, since: u64, factory: F) {
        let list = self
            .entries
            .entry((normalize(domain).to_string(), op.to_string()))
            .or_default();
        list.retain(|(s, _)| *s != since);
        list.push((since, factory));
        list.sort_by_key(|(s, _)| *s);
    }

    /// The entry for a model importing `domain` at `opset`, with its since-version.
    pub fn lookup(&self, domain: &str, op: &str, opset: u64) -> Option<(u64, &F)> {
        let list = self
            .entries
            .get(&(normalize(domain).to_string(), op.to_string()))?;
        list.iter()
            .rev()
            .find(|(since, _)| *since <= opset)
            .map(|(since, f)| (*since, f))
    }

    pub fn contains(&self, domain: &str, op: &str, opset: u64) -> bool {
        self.lookup(domain, op, opset).is_some()
    }

    /// Every registered (domain, op, since-version), sorted.
    pub fn keys(&self) -> Vec<(String, String, u64)> {
        let mut keys: Vec<_> = self
            .entries
            .iter()
            .flat_map(|((d, o), list)| list.iter().map(move |(s, _)| (d.clone(), o.clone(), *s)))
            .collect();
        keys.sort();
        keys
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn picks_highest_since_not_above_opset() {
        let mut r = OpRegistry::new();
        r.register("", "Split", 2, "v2");
        r.register("", "Split", 13, "v13");
        r.register("ai.onnx", "Split", 18, "v18");
        assert_eq!(r.lookup("", "Split", 1), None);
        assert_eq!(r.lookup("", "Split", 12), Some((2, &"v2")));
        assert_eq!(r.lookup("ai.onnx", "Split", 17), Some((13, &"v13")));
        assert_eq!(r.lookup("", "Split", 24), Some((18, &"v18")));
        assert_eq!(r.lookup("com.microsoft", "Split", 24), None);
    }
}
