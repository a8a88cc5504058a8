//! `onnx-runtime bench`: latency percentiles and throughput on random inputs.

use crate::run::{gather_inputs, load_session};
use indicatif::{ProgressBar, ProgressStyle};
use onnx_runtime_ep_cpu::Value;
use onnx_runtime_session::{CaptureReport, Input, OutputOn, Profile, Session, SessionOptions};
use std::path::Path;
use std::time::{Duration, Instant};

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    let idx = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[idx.min(sorted.len() - 1)]
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

/// What `onnx-runtime bench` was asked for.
pub struct BenchOptions<'a> {
    pub warmup: usize,
    pub iterations: usize,
    pub inputs: &'a [String],
    pub dims: &'a [String],
    pub threads: Option<usize>,
    /// Optimization level and placement.
    pub options: SessionOptions,
    /// Print a per-node profile with this many rows per table.
    pub profile: Option<usize>,
}

pub fn bench(path: &Path, o: &BenchOptions<'_>) -> Result<(), String> {
    let (warmup, iterations) = (o.warmup, o.iterations);
    let optimize = o.options.optimization;
    if iterations == 0 {
        return Err("--iterations must be at least 1".into());
    }
    let t0 = Instant::now();
    let session = load_session(path, o.options.clone())?;
    let load = t0.elapsed();
    if let Some(r) = session.precision_report() {
        println!(
            "precision: {} nodes in half precision, {} initializers cast, {} casts at the edges",
            r.half_nodes, r.initializers, r.casts
        );
        for (op, why) in &r.kept {
            println!("  {op} stays float32: {why}");
        }
    }
    let feeds = gather_inputs(&session, o.inputs, true, o.dims, 0)?;
    let refs: Vec<(&str, Value)> = feeds.iter().map(|(n, v)| (n.as_str(), v.clone())).collect();
    // The first run is eager (it also warms a CUDA graph's kernels): its outputs are the
    // reference every later run, replayed or not, must match byte for byte.
    let first = session.run(&refs).map_err(|e| e.to_string())?;
    for _ in 1..warmup {
        session.run(&refs).map_err(|e| e.to_string())?;
    }
    let bar = ProgressBar::new(iterations as u64);
    bar.set_style(
        ProgressStyle::with_template("{bar:40} {pos}/{len} runs, {elapsed} elapsed, eta {eta}")
            .map_err(|e| e.to_string())?,
    );
    let mut times = Vec::with_capacity(iterations);
    let start = Instant::now();
    for _ in 0..iterations {
        let t = Instant::now();
        session.run(&refs).map_err(|e| e.to_string())?;
        times.push(t.elapsed());
        bar.inc(1);
    }
    let total = start.elapsed();
    bar.finish_and_clear();
    times.sort();
    let mean = times.iter().sum::<Duration>() / iterations as u32;
    println!("model: {}", path.display());
    println!(
        "threads: {}, warmup: {warmup}, iterations: {iterations}, optimize: {optimize:?}, load: {:.1} ms",
        o.threads.unwrap_or_else(rayon::current_num_threads),
        ms(load)
    );
    println!(
        "latency ms: min {:.3}  p50 {:.3}  p90 {:.3}  p99 {:.3}  mean {:.3}",
        ms(times[0]),
        ms(percentile(&times, 0.5)),
        ms(percentile(&times, 0.9)),
        ms(percentile(&times, 0.99)),
        ms(mean)
    );
    println!(
        "throughput: {:.2} runs/s",
        iterations as f64 / total.as_secs_f64()
    );
    if o.options.device.is_some() {
        bench_bound(&session, &refs, warmup, iterations)?;
        print_capture(&session.capture_report());
        let last = session.run(&refs).map_err(|e| e.to_string())?;
        let same = first.len() == last.len()
            && first
                .iter()
                .zip(&last)
                .all(|((_, a), (_, b))| same_bytes(a, b));
        println!(
            "outputs of the last run {} those of the first (eager) run byte for byte",
            if same { "equal" } else { "DIFFER from" }
        );
    }
    let refused = session.refused_nodes();
    if !refused.is_empty() {
        println!(
            "{} device node(s) had calls the device kernel refused (run by the CPU kernel):",
            refused.len()
        );
        for r in refused.iter().take(8) {
            println!("  {}: {} call(s); first: {}", r.node, r.calls, r.reason);
        }
    }
    if let Some(rows) = o.profile {
        let mut profile = Profile::new();
        for _ in 0..iterations {
            session
                .run_profiled(&refs, &mut profile)
                .map_err(|e| e.to_string())?;
        }
        print_profile(&profile, rows);
    }
    Ok(())
}

/// Times runs with the tensor inputs already on the device and every output left there
/// (`Session::run_bound`, as an IO-binding caller runs), each run synchronized: the latency
/// without the host copies of the inputs and outputs.
fn bench_bound(
    session: &Session,
    refs: &[(&str, Value)],
    warmup: usize,
    iterations: usize,
) -> Result<(), String> {
    let mut uploaded = Vec::with_capacity(refs.len());
    for (name, v) in refs {
        match v.as_tensor() {
            Some(t) => uploaded.push((
                *name,
                Some(session.to_device(t).map_err(|e| e.to_string())?),
            )),
            None => uploaded.push((*name, None)),
        }
    }
    let inputs: Vec<(&str, Input<'_>)> = uploaded
        .iter()
        .zip(refs)
        .map(|((name, d), (_, v))| match d {
            Some(d) => (*name, Input::Device(d)),
            None => (*name, Input::Host(v)),
        })
        .collect();
    let outputs: Vec<(&str, OutputOn)> = session
        .outputs()
        .iter()
        .map(|io| (io.name.as_str(), OutputOn::Device))
        .collect();
    let run = || -> Result<(), String> {
        let out = session
            .run_bound(&inputs, &outputs)
            .map_err(|e| e.to_string())?;
        session.synchronize().map_err(|e| e.to_string())?;
        drop(out);
        Ok(())
    };
    for _ in 0..warmup.max(2) {
        run()?;
    }
    let mut times = Vec::with_capacity(iterations);
    for _ in 0..iterations {
        let t = Instant::now();
        run()?;
        times.push(t.elapsed());
    }
    times.sort();
    println!(
        "device-resident latency ms (inputs and outputs on the device): min {:.3}  p50 {:.3}  p90 {:.3}",
        ms(times[0]),
        ms(percentile(&times, 0.5)),
        ms(percentile(&times, 0.9)),
    );
    Ok(())
}

fn same_bytes(a: &Value, b: &Value) -> bool {
    match (a.as_tensor(), b.as_tensor()) {
        (Some(a), Some(b)) if a.dtype() == onnx_runtime_ir::DataType::String => {
            a.shape() == b.shape() && a.strings() == b.strings()
        }
        (Some(a), Some(b)) => {
            a.dtype() == b.dtype() && a.shape() == b.shape() && a.bytes() == b.bytes()
        }
        // Sequences and maps: compared through their debug form.
        _ => format!("{a:?}") == format!("{b:?}"),
    }
}

/// Whether the timed runs replayed a CUDA graph, and if not, why.
pub fn print_capture(report: &CaptureReport) {
    if !report.blockers.is_empty() {
        const SHOWN: usize = 5;
        println!(
            "cuda graph: not used, {} node(s) prevent it:",
            report.blockers.len()
        );
        for b in report.blockers.iter().take(SHOWN) {
            println!("  {b}");
        }
        if report.blockers.len() > SHOWN {
            println!("  ... ({} more)", report.blockers.len() - SHOWN);
        }
        return;
    }
    for sig in &report.signatures {
        println!(
            "cuda graph for inputs {}: {}, {} replays, {:.1} MiB of graph memory",
            sig.inputs_summary(),
            sig.state,
            sig.replays,
            sig.graph_bytes as f64 / (1 << 20) as f64
        );
    }
}

/// The per-node profile: time per run by op type, then the most expensive nodes.
fn print_profile(p: &Profile, rows: usize) {
    let runs = p.runs().max(1) as f64;
    let total = ms(p.total()).max(f64::MIN_POSITIVE);
    println!(
        "profile over {} runs: {:.3} ms per run in nodes",
        p.runs(),
        ms(p.total()) / runs
    );
    println!(
        "  {:<28} {:>7} {:>10} {:>6}",
        "op type", "calls", "ms/run", "%"
    );
    for (op, t) in p.by_op_type().into_iter().take(rows) {
        println!(
            "  {:<28} {:>7.0} {:>10.3} {:>5.1}%",
            op,
            t.calls as f64 / runs,
            ms(t.total) / runs,
            100.0 * ms(t.total) / total
        );
    }
    println!(
        "  {:<40} {:<20} {:>10} {:>6}",
        "node", "op type", "ms/run", "%"
    );
    for (node, op, t) in p.by_node().into_iter().take(rows) {
        println!(
            "  {:<40} {:<20} {:>10.3} {:>5.1}%",
            node,
            op,
            ms(t.total) / runs,
            100.0 * ms(t.total) / total
        );
    }
}
