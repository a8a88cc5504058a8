//! Per-node timing of [`Session::run_profiled`](crate::Session::run_profiled): where a run's
//! time goes, by op type and by node. Control-flow nodes (If, Loop, Scan) count their whole
//! body as their own time.

use std::collections::HashMap;
use std::time::Duration;

/// Time spent in one op type or one node, summed over the runs recorded.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct OpTime {
    /// How many times a node of this kind ran.
    pub calls: u64,
    /// Total wall-clock time in those calls.
    pub total: Duration,
}

/// Accumulates step timings over any number of profiled runs.
#[derive(Clone, Debug, Default)]
pub struct Profile {
    runs: u64,
    by_op: HashMap<String, OpTime>,
    by_node: HashMap<String, (String, OpTime)>,
}

impl Profile {
    pub fn new() -> Profile {
        Profile::default()
    }

    pub(crate) fn record(&mut self, op_type: &str, node: &str, elapsed: Duration) {
        let op = self.by_op.entry(op_type.to_string()).or_default();
        op.calls += 1;
        op.total += elapsed;
        let n = self
            .by_node
            .entry(node.to_string())
            .or_insert_with(|| (op_type.to_string(), OpTime::default()));
        n.1.calls += 1;
        n.1.total += elapsed;
    }

    pub(crate) fn finish_run(&mut self) {
        self.runs += 1;
    }

    /// Profiled runs recorded so far.
    pub fn runs(&self) -> u64 {
        self.runs
    }

    /// Time by op type, most expensive first.
    pub fn by_op_type(&self) -> Vec<(String, OpTime)> {
        let mut v: Vec<_> = self.by_op.iter().map(|(k, t)| (k.clone(), *t)).collect();
        v.sort_by(|a, b| b.1.total.cmp(&a.1.total).then_with(|| a.0.cmp(&b.0)));
        v
    }

    /// Time by node (`(node description, op type, time)`), most expensive first.
    pub fn by_node(&self) -> Vec<(String, String, OpTime)> {
        let mut v: Vec<_> = self
            .by_node
            .iter()
            .map(|(k, (op, t))| (k.clone(), op.clone(), *t))
            .collect();
        v.sort_by(|a, b| b.2.total.cmp(&a.2.total).then_with(|| a.0.cmp(&b.0)));
        v
    }

    /// Total time in nodes over all recorded runs.
    pub fn total(&self) -> Duration {
        self.by_op.values().map(|t| t.total).sum()
    }
}
