//! `onnx-runtime test`: runs ONNX backend-style cases and compares their outputs.

mod cases;
pub mod compare;

use cases::{discover, run_case, Case, DeviceUse};
use onnx_runtime_ep_api::ExecutionProvider;
use onnx_runtime_session::SessionOptions;
use rayon::prelude::*;
use std::collections::{BTreeMap, BTreeSet};
use std::io::Write;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::{Path, PathBuf};
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
    /// Passed, with where its nodes ran.
    Pass(DeviceUse),
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

/// A pass list file: one case name a line; `#` starts a comment line. A comment
/// `# off: NAME: why` keeps NAME off the list on purpose (say, expected data that encodes
/// behaviour the spec leaves undefined): it is neither expected to pass nor suggested, and
/// rewriting the list keeps it off.
#[derive(Debug, Default)]
struct PassList {
    names: BTreeSet<String>,
    /// The names kept off, with why.
    off: BTreeMap<String, String>,
    /// Every comment line, in order (kept when the list is rewritten).
    comments: Vec<String>,
}

impl PassList {
    fn parse(text: &str) -> PassList {
        let mut list = PassList::default();
        for line in text.lines().map(str::trim).filter(|l| !l.is_empty()) {
            if let Some(comment) = line.strip_prefix('#') {
                list.comments.push(line.to_string());
                if let Some(rest) = comment.trim_start().strip_prefix("off:") {
                    let (name, why) = rest.split_once(':').unwrap_or((rest, ""));
                    list.off
                        .insert(name.trim().to_string(), why.trim().to_string());
                }
            } else {
                list.names.insert(line.to_string());
            }
        }
        list
    }

    fn read(path: &Path) -> Result<PassList, String> {
        std::fs::read_to_string(path)
            .map(|t| PassList::parse(&t))
            .map_err(|e| format!("cannot read pass list {}: {e}", path.display()))
    }

    /// The file for the cases that `passed`: this list's comments, then the names, less those
    /// kept off.
    fn render(&self, passed: &BTreeSet<String>) -> String {
        let mut text = String::new();
        for c in &self.comments {
            text.push_str(c);
            text.push('\n');
        }
        for n in passed.iter().filter(|n| !self.off.contains_key(*n)) {
            text.push_str(n);
            text.push('\n');
        }
        text
    }
}

/// Runs the cases; returns the process exit code.
pub fn run(args: TestArgs, options: SessionOptions) -> Result<i32, String> {
    let mut cases = Vec::new();
    for dir in &args.dirs {
        discover(dir, &mut cases)?;
    }
    if cases.is_empty() {
        let dirs: Vec<String> = args.dirs.iter().map(|d| d.display().to_string()).collect();
        return Err(format!(
            "no test cases (folders with model.onnx and test_data_set_*) under {}",
            dirs.join(", ")
        ));
    }
    if let Some(f) = &args.filter {
        let found = cases.len();
        cases.retain(|c| c.name.contains(f.as_str()));
        if cases.is_empty() {
            return Err(format!(
                "--filter '{f}' matches none of the {found} cases found (it keeps the cases \
                 whose name contains it)"
            ));
        }
    }
    let pass_list = args.pass_list.as_deref().map(PassList::read).transpose()?;
    // Rewriting a pass list keeps its comments and the cases it keeps off.
    let written_list = match &args.write_pass_list {
        Some(p) if p.exists() => PassList::read(p)?,
        _ => PassList::default(),
    };

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
                    Outcome::Pass(u) if args.device.is_some() => {
                        let mut line =
                            format!("PASS {} ({} node calls on the device", case.name, u.calls);
                        if u.refused > 0 {
                            line.push_str(&format!(", {} refused and run on the CPU", u.refused));
                        }
                        if !u.host_ops.is_empty() {
                            line.push_str(&format!("; on the CPU: {}", u.host_ops.join(", ")));
                        }
                        line.push(')');
                        line
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
    if let Some(PassList {
        names: list, off, ..
    }) = &pass_list
    {
        let ran: BTreeSet<&String> = results.iter().map(|(n, _)| n).collect();
        let regressions: Vec<&String> = list
            .iter()
            .filter(|n| ran.contains(n) && !passed.contains(*n))
            .collect();
        let absent = list.iter().filter(|n| !ran.contains(n)).count();
        if absent > 0 && args.filter.is_none() {
            eprintln!("note: {absent} cases of the pass list were not found");
        }
        let new: Vec<&String> = passed
            .iter()
            .filter(|n| !list.contains(*n) && !off.contains_key(*n))
            .collect();
        let off_passing = passed.iter().filter(|n| off.contains_key(*n)).count();
        if off_passing > 0 {
            eprintln!(
                "note: {off_passing} cases the pass list keeps off (its '# off:' lines) pass here"
            );
        }
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
        let text = written_list.render(&passed);
        std::fs::write(path, text).map_err(|e| format!("cannot write {}: {e}", path.display()))?;
    }
    if args.device.is_some() {
        print_device_summary(&results, n_passed);
    }
    println!("{n_passed} passed, {failed} failed");
    Ok(code)
}

/// With `--ep cuda`: how many passing cases ran every node on the device, how many ran a node
/// on the CPU, and the ops that most often sent a node to the CPU.
fn print_device_summary(results: &[(String, Outcome)], n_passed: usize) {
    let uses: Vec<&DeviceUse> = results
        .iter()
        .filter_map(|(_, o)| match o {
            Outcome::Pass(u) => Some(u),
            Outcome::Fail(_) => None,
        })
        .collect();
    let all = uses
        .iter()
        .filter(|u| u.all_on_device() && u.calls > 0)
        .count();
    let some = uses.iter().filter(|u| u.calls > 0).count();
    let host = uses.iter().filter(|u| !u.all_on_device()).count();
    let mut by_op: std::collections::BTreeMap<&str, usize> = Default::default();
    for u in &uses {
        for op in &u.host_ops {
            *by_op.entry(op.as_str()).or_default() += 1;
        }
    }
    let mut ops: Vec<(&str, usize)> = by_op.into_iter().collect();
    ops.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(b.0)));
    if !ops.is_empty() {
        let top: Vec<String> = ops
            .iter()
            .take(40)
            .map(|(op, n)| format!("{op} {n}"))
            .collect();
        println!("ops placed on the CPU (passing cases): {}", top.join(", "));
    }
    println!(
        "{all} of the {n_passed} passing cases ran every node on the device; {host} ran a node on \
         the CPU; {some} ran at least one node on the device"
    );
}
