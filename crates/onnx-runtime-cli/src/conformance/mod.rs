//! `onnx-runtime test`: runs ONNX backend-style cases and compares their outputs.

mod cases;
pub mod compare;

use cases::{discover, run_case, Case};
use onnx_runtime_ep_api::ExecutionProvider;
use onnx_runtime_session::SessionOptions;
use rayon::prelude::*;
use std::collections::BTreeSet;
use std::io::Write;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

/// Makes an accelerator provider, or says why there is none.
pub type MakeDevice = fn() -> Result<Arc<dyn ExecutionProvider>, String>;

pub struct TestArgs {
    pub dirs: Vec<PathBuf>,
    pub pass_list: Option<PathBuf>,
    pub write_pass_list: Option<PathBuf>,
    pub filter: Option<String>,
    pub jobs: Option<usize>,
    /// Makes the accelerator provider for `--ep cuda`. Each worker thread makes its own, so
    /// a device-side error reported at a synchronization belongs to that worker's case.
    pub device: Option<MakeDevice>,
}

enum Outcome {
    /// Passed, with the number of node calls that ran on the device.
    Pass(usize),
    Fail(String),
}

thread_local! {
    static DEVICE: std::cell::RefCell<Option<Arc<dyn ExecutionProvider>>> =
        const { std::cell::RefCell::new(None) };
}

/// The options of one case: `base` with this worker's device when there is one.
fn case_options(base: &SessionOptions, make: Option<MakeDevice>) -> Result<SessionOptions, String> {
    let Some(make) = make else {
        return Ok(base.clone());
    };
    let device = DEVICE.with(|d| -> Result<_, String> {
        let mut d = d.borrow_mut();
        if d.is_none() {
            *d = Some(make()?);
        }
        Ok(d.clone())
    })?;
    Ok(SessionOptions {
        device,
        ..base.clone()
    })
}

thread_local! {
    static PANIC_AT: std::cell::RefCell<Option<String>> = const { std::cell::RefCell::new(None) };
}

/// Runs one case, turning a panic into a failure that says where it happened.
fn guarded(case: &Case, options: &SessionOptions) -> Outcome {
    match catch_unwind(AssertUnwindSafe(|| run_case(case, options))) {
        Ok(Ok(n)) => Outcome::Pass(n),
        Ok(Err(e)) => Outcome::Fail(e),
        Err(payload) => {
            let msg = payload
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| payload.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "unknown payload".into());
            let at = PANIC_AT.with(|p| p.borrow_mut().take()).unwrap_or_default();
            Outcome::Fail(format!("panic{at}: {msg}"))
        }
    }
}

fn read_list(path: &PathBuf) -> Result<BTreeSet<String>, String> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| format!("cannot read pass list {}: {e}", path.display()))?;
    Ok(text
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .map(String::from)
        .collect())
}

/// Runs the cases; returns the process exit code.
pub fn run(args: TestArgs, options: SessionOptions) -> Result<i32, String> {
    let mut cases = Vec::new();
    for dir in &args.dirs {
        discover(dir, &mut cases)?;
    }
    if let Some(f) = &args.filter {
        cases.retain(|c| c.name.contains(f.as_str()));
    }
    let pass_list = args.pass_list.as_ref().map(read_list).transpose()?;

    // Panics are reported per case, with their location, instead of on stderr.
    std::panic::set_hook(Box::new(|info| {
        let at = info
            .location()
            .map(|l| format!(" at {}:{}", l.file(), l.line()))
            .unwrap_or_default();
        PANIC_AT.with(|p| *p.borrow_mut() = Some(at));
    }));

    let stdout = Mutex::new(std::io::stdout());
    let work = || {
        cases
            .par_iter()
            .map(|case| {
                let outcome = match case_options(&options, args.device) {
                    Ok(o) => guarded(case, &o),
                    Err(e) => Outcome::Fail(e),
                };
                let line = match &outcome {
                    Outcome::Pass(calls) if args.device.is_some() => {
                        format!("PASS {} ({calls} node calls on the device)", case.name)
                    }
                    Outcome::Pass(_) => format!("PASS {}", case.name),
                    Outcome::Fail(e) => {
                        format!("FAIL {}: {}", case.name, e.replace('\n', " "))
                    }
                };
                if let Ok(mut out) = stdout.lock() {
                    let _ = writeln!(out, "{line}");
                }
                (case.name.clone(), outcome)
            })
            .collect::<Vec<_>>()
    };
    let results = match args.jobs {
        Some(j) => rayon::ThreadPoolBuilder::new()
            .num_threads(j.max(1))
            .build()
            .map_err(|e| e.to_string())?
            .install(work),
        None => work(),
    };
    let _ = std::panic::take_hook();

    // Counted per case run (two directories may hold cases of the same name); a name counts
    // as passing only if every case of that name passed.
    let n_passed = results
        .iter()
        .filter(|(_, o)| matches!(o, Outcome::Pass(_)))
        .count();
    let failed = results.len() - n_passed;
    let failed_names: BTreeSet<&String> = results
        .iter()
        .filter(|(_, o)| !matches!(o, Outcome::Pass(_)))
        .map(|(n, _)| n)
        .collect();
    let passed: BTreeSet<String> = results
        .iter()
        .filter(|(n, _)| !failed_names.contains(n))
        .map(|(n, _)| n.clone())
        .collect();
    let mut code = 0;
    if let Some(list) = &pass_list {
        let ran: BTreeSet<&String> = results.iter().map(|(n, _)| n).collect();
        let regressions: Vec<&String> = list
            .iter()
            .filter(|n| ran.contains(n) && !passed.contains(*n))
            .collect();
        let absent = list.iter().filter(|n| !ran.contains(n)).count();
        if absent > 0 && args.filter.is_none() {
            eprintln!("note: {absent} cases of the pass list were not found");
        }
        let new: Vec<&String> = passed.iter().filter(|n| !list.contains(*n)).collect();
        if !new.is_empty() {
            eprintln!(
                "note: {} cases pass that the pass list does not name (regenerate it to lock them in)",
                new.len()
            );
        }
        if !regressions.is_empty() {
            eprintln!("REGRESSIONS (in the pass list, now failing):");
            for r in &regressions {
                eprintln!("  {r}");
            }
            code = 1;
        }
    } else if failed > 0 && args.write_pass_list.is_none() {
        code = 1;
    }
    if let Some(path) = &args.write_pass_list {
        let mut text = String::new();
        for n in &passed {
            text.push_str(n);
            text.push('\n');
        }
        std::fs::write(path, text).map_err(|e| format!("cannot write {}: {e}", path.display()))?;
    }
    if args.device.is_some() {
        let on_device = results
            .iter()
            .filter(|(_, o)| matches!(o, Outcome::Pass(n) if *n > 0))
            .count();
        println!("{on_device} of the {n_passed} passing cases ran at least one node on the device");
    }
    println!("{n_passed} passed, {failed} failed");
    Ok(code)
}
