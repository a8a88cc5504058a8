//! `onnx-runtime run`: one run with inputs from files or random ones.

use crate::values::{
    file_stem, parse_dims, parse_pairs, random_input, read_value_file, summarize, write_value_file,
    Rng,
};
use onnx_runtime_ep_cpu::Value;
use onnx_runtime_ir::{Dim, ValueType};
use onnx_runtime_session::{describe_type, IoInfo, Session, SessionOptions};
use std::collections::{BTreeSet, HashMap};
use std::path::{Path, PathBuf};
use std::time::Instant;

#[derive(Clone, Copy, Debug, clap::ValueEnum)]
pub enum Format {
    Npy,
    Pb,
}

pub struct RunArgs {
    pub model: PathBuf,
    pub inputs: Vec<String>,
    pub random_inputs: bool,
    pub dims: Vec<String>,
    pub output_dir: Option<PathBuf>,
    pub format: Format,
    pub seed: u64,
    /// Optimization level and placement.
    pub options: SessionOptions,
}

/// Loads and compiles a model. Load errors name the file once (the loader's messages do).
pub fn load_session(path: &Path, options: SessionOptions) -> Result<Session, String> {
    let model = onnx_runtime_loader::Model::load(path).map_err(|e| e.to_string())?;
    Session::from_model(model, options).map_err(|e| e.to_string())
}

/// The names of the symbolic dimensions the inputs declare.
fn symbolic_dims(inputs: &[IoInfo]) -> BTreeSet<&str> {
    let mut names = BTreeSet::new();
    for io in inputs {
        if let Some(ValueType::Tensor {
            shape: Some(shape), ..
        }) = &io.ty
        {
            for d in shape.dims() {
                if let Dim::Symbolic(name) = d {
                    names.insert(name.as_str());
                }
            }
        }
    }
    names
}

/// Every `--dim` name must be a symbolic dimension of an input (a misspelt name would
/// otherwise be ignored and the dimension left at 1).
fn check_dims(dims: &HashMap<String, usize>, inputs: &[IoInfo]) -> Result<(), String> {
    let known = symbolic_dims(inputs);
    let mut unknown: Vec<&str> = dims
        .keys()
        .map(String::as_str)
        .filter(|n| !known.contains(n))
        .collect();
    if unknown.is_empty() {
        return Ok(());
    }
    unknown.sort();
    let has = if known.is_empty() {
        "its inputs have no symbolic dimensions (every size is fixed)".to_string()
    } else {
        let names: Vec<&str> = known.into_iter().collect();
        format!("its inputs' symbolic dimensions are {}", names.join(", "))
    };
    Err(format!(
        "--dim {}: the model has no symbolic dimension of {}; {has}",
        unknown.join(", "),
        if unknown.len() == 1 {
            "that name"
        } else {
            "those names"
        }
    ))
}

/// The feeds for `session`: files named on the command line, random values for the rest
/// when asked for.
pub fn gather_inputs(
    session: &Session,
    files: &[String],
    random: bool,
    dims: &[String],
    seed: u64,
) -> Result<Vec<(String, Value)>, String> {
    let dims = parse_dims(dims)?;
    check_dims(&dims, session.inputs())?;
    let mut feeds = Vec::new();
    for (name, file) in parse_pairs(files, "--input")? {
        let io = session
            .inputs()
            .iter()
            .find(|io| io.name == name)
            .ok_or_else(|| {
                let names: Vec<&str> = session.inputs().iter().map(|i| i.name.as_str()).collect();
                format!("the model has no input '{name}'; its inputs are {names:?}")
            })?;
        feeds.push((name, read_value_file(file.as_ref(), io.ty.as_ref())?));
    }
    let mut rng = Rng::new(seed);
    let mut missing = Vec::new();
    for io in session.required_inputs() {
        if feeds.iter().any(|(n, _)| *n == io.name) {
            continue;
        }
        if random {
            feeds.push((io.name.clone(), random_input(io, &dims, &mut rng)?));
        } else {
            missing.push(format!("  {}: {}", io.name, describe_type(&io.ty)));
        }
    }
    if !missing.is_empty() {
        return Err(format!(
            "these inputs need values (--input NAME=FILE, or --random-inputs):\n{}",
            missing.join("\n")
        ));
    }
    Ok(feeds)
}

pub fn run(args: RunArgs) -> Result<(), String> {
    let t0 = Instant::now();
    let session = load_session(&args.model, args.options.clone())?;
    let load = t0.elapsed();
    let feeds = gather_inputs(
        &session,
        &args.inputs,
        args.random_inputs,
        &args.dims,
        args.seed,
    )?;
    let refs: Vec<(&str, Value)> = feeds.iter().map(|(n, v)| (n.as_str(), v.clone())).collect();
    let t1 = Instant::now();
    let outputs = session.run(&refs).map_err(|e| e.to_string())?;
    let elapsed = t1.elapsed();
    // The inputs are summarised once the run has accepted them (a rejected input is reported
    // by the error alone).
    for (name, v) in &feeds {
        println!("input  {}", summarize(name, v));
    }
    for (name, v) in &outputs {
        println!("output {}", summarize(name, v));
    }
    println!(
        "loaded in {:.1} ms, ran in {:.1} ms",
        load.as_secs_f64() * 1e3,
        elapsed.as_secs_f64() * 1e3
    );
    if let Some(dir) = &args.output_dir {
        std::fs::create_dir_all(dir)
            .map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
        for (name, v) in &outputs {
            let ext = match (args.format, v) {
                (Format::Npy, Value::Tensor(t)) if crate::npy::descr(t.dtype()).is_some() => "npy",
                _ => "pb",
            };
            let path = dir.join(format!("{}.{ext}", file_stem(name)));
            write_value_file(&path, name, v)?;
            println!("wrote {}", path.display());
        }
    }
    Ok(())
}
