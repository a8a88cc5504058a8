//! `onnx-runtime`: run, inspect, benchmark and conformance-test ONNX models.

mod bench;
mod conformance;
mod generate;
mod info;
mod npy;
mod ops;
mod run;
mod values;

use clap::{Args, Parser, Subcommand, ValueEnum};
use onnx_runtime_ep_api::ExecutionProvider;
use onnx_runtime_session::{CudaGraph, OptimizationLevel, SessionOptions};
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

#[derive(Parser)]
#[command(
    name = "onnx-runtime",
    version,
    about = "Run ONNX models on the CPU (and CUDA)"
)]
struct Cli {
    /// Graph optimizations at session build: none (run the graph as written), basic
    /// (no-op removal, BatchNormalization/Mul/Add folded into Conv) or all (basic plus
    /// fusions into com.microsoft kernels).
    #[arg(
        long,
        global = true,
        default_value = "all",
        value_name = "none|basic|all"
    )]
    optimize: OptimizationLevel,
    #[command(subcommand)]
    command: Command,
}

/// How the commands that run a model (run, test, bench) run it. `info` runs nothing and
/// takes none of these.
#[derive(Args, Clone, Copy, Debug)]
struct Exec {
    /// Worker threads for kernels (default: one per core).
    #[arg(long, value_name = "N")]
    threads: Option<usize>,
    /// Where nodes run: cpu, or cuda (every node the CUDA provider has a kernel for runs on
    /// the GPU --device names, the rest on the CPU; inputs and outputs stay on the host).
    #[arg(long, value_enum, default_value = "cpu")]
    ep: Ep,
    /// Let idle worker threads sleep during a run instead of polling for work (less CPU
    /// time on the other cores, more latency; see SessionOptions::spin).
    #[arg(long)]
    no_spin: bool,
    /// With --ep cuda: auto records each input signature's second run into a CUDA graph and
    /// replays it from the third run on (when every node can be recorded); off runs node by
    /// node.
    #[arg(long, value_enum, default_value = "auto")]
    cuda_graph: GraphArg,
    /// With --ep cuda: the GPU to run on (its CUDA ordinal).
    #[arg(long, value_name = "N", default_value_t = 0)]
    device: usize,
    /// With --ep cuda: let float32 MatMul/Gemm/Conv use TF32 tensor cores (faster, about 10
    /// mantissa bits in the products; off: true float32).
    #[arg(long)]
    tf32: bool,
    /// Run a float32 model in half precision: fp16 or bf16 converts it at load (weights cast
    /// once, float32 inputs and outputs kept, shape arithmetic left in float32); fp32 runs
    /// it as written.
    #[arg(long, value_name = "fp32|fp16|bf16", default_value = "fp32")]
    precision: onnx_runtime_session::Precision,
}

/// The CUDA provider's options from the command line (set once in main).
static CUDA_OPTIONS: std::sync::OnceLock<onnx_runtime_ep_cuda::CudaOptions> =
    std::sync::OnceLock::new();

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum GraphArg {
    Auto,
    Off,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Ep {
    Cpu,
    Cuda,
}

#[derive(Subcommand)]
enum Command {
    /// Run a model once and print (and optionally save) its outputs.
    Run {
        /// The model file (.onnx).
        model: PathBuf,
        /// An input from a file: NAME=FILE.npy or NAME=FILE.pb (a serialized TensorProto,
        /// SequenceProto, OptionalProto or MapProto).
        #[arg(long = "input", value_name = "NAME=FILE")]
        inputs: Vec<String>,
        /// Random values for every input not given with --input.
        #[arg(long)]
        random_inputs: bool,
        /// The size of a symbolic dimension of the random inputs (default 1); NAME must be
        /// one of the dimension names the model's inputs declare.
        #[arg(long = "dim", value_name = "NAME=SIZE")]
        dims: Vec<String>,
        /// Write each output to DIR/NAME.npy (or .pb with --format pb).
        #[arg(long)]
        output_dir: Option<PathBuf>,
        /// The files --output-dir writes: npy (numpy arrays; outputs that are not numeric or
        /// bool tensors are written as .pb all the same) or pb (serialized ONNX TensorProto,
        /// SequenceProto, OptionalProto or MapProto, as the backend test data stores them).
        #[arg(long, value_enum, default_value = "npy")]
        format: run::Format,
        /// Seed of the random inputs.
        #[arg(long, default_value_t = 0)]
        seed: u64,
        #[command(flatten)]
        exec: Exec,
    },
    /// Describe a model: inputs, outputs, opsets, ops, and what each provider cannot run.
    Info {
        /// The model file (.onnx), or an LLM folder (genai_config.json or config.json beside
        /// the model) to print the decoder architecture found.
        model: PathBuf,
        /// With cuda: build a session on GPU 0 and list, per op, the nodes placed on the CPU
        /// and why (no kernel at this opset, a dtype or attribute the device kernel refuses),
        /// and the device ops that synchronize to learn an output shape. Without a GPU, the
        /// ops the CUDA provider has no kernel for.
        #[arg(long, value_enum)]
        ep: Option<Ep>,
    },
    /// List every (domain, op, since-version) each execution provider registers.
    Ops {
        /// Only this provider's ops (default: both, one line per op).
        #[arg(long, value_enum)]
        ep: Option<Ep>,
        /// The Markdown page docs/operators.md is generated from (both providers side by
        /// side).
        #[arg(long)]
        markdown: bool,
    },
    /// Run ONNX backend test cases (folders with model.onnx and test_data_set_*).
    Test {
        /// Case folders, or folders of case folders.
        #[arg(required = true)]
        dirs: Vec<PathBuf>,
        /// Cases expected to pass: any of them failing is a regression (exit status 1).
        #[arg(long)]
        pass_list: Option<PathBuf>,
        /// Write the names of the cases that passed to this file.
        #[arg(long)]
        write_pass_list: Option<PathBuf>,
        /// Only cases whose name contains this.
        #[arg(long)]
        filter: Option<String>,
        /// Cases run in parallel (default: one per core).
        #[arg(short = 'j', long = "jobs")]
        jobs: Option<usize>,
        #[command(flatten)]
        exec: Exec,
    },
    /// Generate text with an LLM decoder folder (onnxruntime-genai or Hugging Face Optimum).
    Generate(generate::GenerateArgs),
    /// Measure latency and throughput on random inputs.
    Bench {
        /// The model file (.onnx).
        model: PathBuf,
        /// Untimed runs first (they warm caches, the allocator and the thread pool).
        #[arg(long, value_name = "N", default_value_t = 3)]
        warmup: usize,
        /// Timed runs (at least 1); the latency percentiles are over these.
        #[arg(long, value_name = "N", default_value_t = 20)]
        iterations: usize,
        /// An input from a file (NAME=FILE.npy or .pb); the others are random.
        #[arg(long = "input", value_name = "NAME=FILE")]
        inputs: Vec<String>,
        /// The size of a symbolic dimension of the random inputs (default 1); NAME must be
        /// one of the dimension names the model's inputs declare.
        #[arg(long = "dim", value_name = "NAME=SIZE")]
        dims: Vec<String>,
        /// After the timed runs, time every node over as many runs again and print where
        /// the time goes, by op type and by node (the N most expensive of each).
        #[arg(long, value_name = "N", num_args = 0..=1, default_missing_value = "15")]
        profile: Option<usize>,
        #[command(flatten)]
        exec: Exec,
    },
}

/// `base` (from `--optimize` and `--no-spin`) with the device `--ep` asks for.
fn session_options(base: &SessionOptions, ep: Ep) -> Result<SessionOptions, String> {
    Ok(SessionOptions {
        device: match ep {
            Ep::Cpu => None,
            Ep::Cuda => Some(cuda_provider()?),
        },
        ..base.clone()
    })
}

/// A CUDA provider on the GPU `--device` names (0 by default), or an error that says why
/// there is none.
pub fn cuda_provider() -> Result<Arc<dyn ExecutionProvider>, String> {
    let options = CUDA_OPTIONS.get().copied().unwrap_or_default();
    onnx_runtime_ep_cuda::CudaExecutionProvider::with_options(options)
        .map(|p| Arc::new(p) as Arc<dyn ExecutionProvider>)
        .map_err(|e| {
            format!("the CUDA execution provider is not available here: {e}; use --ep cpu")
        })
}

/// Rust ignores SIGPIPE, so printing into a closed pipe (`onnx-runtime info m.onnx | head`)
/// would panic; restore the default so the process ends quietly as other tools do.
fn restore_sigpipe() {
    #[cfg(unix)]
    // SAFETY: called first in main, before any other thread exists; SIG_DFL is a valid action.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
    }
}

/// Keeps freed tensor memory in the process for the next run (glibc only). By default glibc
/// returns large blocks to the system (`mmap`/`munmap`, heap trimming), so every run of a
/// model with multi-megabyte activations faults its pages in again: on ppocr_v4_det that
/// was 4,000 page faults and about 30% of a run. Fixed thresholds of 64 MiB (mmap) and
/// 128 MiB (trim) keep the blocks in the heap, as an inference arena would.
fn keep_freed_memory() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: mallopt only sets allocator parameters; called first in main, before any other
    // thread exists.
    unsafe {
        libc::mallopt(libc::M_MMAP_THRESHOLD, 64 << 20);
        libc::mallopt(libc::M_TRIM_THRESHOLD, 128 << 20);
    }
}

fn main() -> ExitCode {
    restore_sigpipe();
    keep_freed_memory();
    let cli = Cli::parse();
    if let Some(n) = cli.command.exec().and_then(|e| e.threads) {
        if let Err(e) = rayon::ThreadPoolBuilder::new()
            .num_threads(n.max(1))
            .build_global()
        {
            eprintln!("error: cannot set up {n} threads: {e}");
            return ExitCode::from(2);
        }
    }
    match dispatch(cli) {
        Ok(0) => ExitCode::SUCCESS,
        Ok(code) => ExitCode::from(code as u8),
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::from(2)
        }
    }
}

impl Command {
    /// How the command runs the model; `None` for `info`, which runs nothing.
    fn exec(&self) -> Option<Exec> {
        match self {
            Command::Run { exec, .. }
            | Command::Test { exec, .. }
            | Command::Bench { exec, .. } => Some(*exec),
            Command::Generate(args) => Some(args.exec),
            Command::Info { .. } | Command::Ops { .. } => None,
        }
    }
}

/// Runs the subcommand; the exit code, or the error to print.
fn dispatch(cli: Cli) -> Result<i32, String> {
    let exec = cli.command.exec();
    let ep = exec.map_or(Ep::Cpu, |e| e.ep);
    // Optimization and spinning from the command line; `session_options` adds the device.
    if let Some(e) = exec {
        let _ = CUDA_OPTIONS.set(onnx_runtime_ep_cuda::CudaOptions {
            device: e.device,
            tf32: e.tf32,
        });
    }
    let base = SessionOptions {
        optimization: cli.optimize,
        spin: !exec.is_some_and(|e| e.no_spin),
        cuda_graph: match exec.map(|e| e.cuda_graph) {
            Some(GraphArg::Off) => CudaGraph::Off,
            _ => CudaGraph::Auto,
        },
        precision: exec.map(|e| e.precision).unwrap_or_default(),
        ..Default::default()
    };
    match cli.command {
        Command::Run {
            model,
            inputs,
            random_inputs,
            dims,
            output_dir,
            format,
            seed,
            ..
        } => run::run(run::RunArgs {
            model,
            inputs,
            random_inputs,
            dims,
            output_dir,
            format,
            seed,
            options: session_options(&base, ep)?,
        })
        .map(|_| 0),
        Command::Info { model, ep } => {
            let cuda = match ep {
                Some(Ep::Cuda) => Some(session_options(&base, Ep::Cpu)?),
                _ => None,
            };
            info::info(&model, cli.optimize, cuda).map(|_| 0)
        }
        Command::Ops { ep, markdown } => ops::ops(ep, markdown),
        Command::Generate(args) => generate::generate(args, session_options(&base, ep)?).map(|_| 0),
        Command::Test {
            dirs,
            pass_list,
            write_pass_list,
            filter,
            jobs,
            ..
        } => {
            // Check once that the device exists; the runner makes one provider per worker.
            let device: Option<conformance::MakeDevice> = match ep {
                Ep::Cpu => None,
                Ep::Cuda => {
                    cuda_provider()?;
                    Some(cuda_provider)
                }
            };
            conformance::run(
                conformance::TestArgs {
                    dirs,
                    pass_list,
                    write_pass_list,
                    filter,
                    jobs,
                    device,
                },
                session_options(&base, Ep::Cpu)?,
            )
        }
        Command::Bench {
            model,
            warmup,
            iterations,
            inputs,
            dims,
            profile,
            ..
        } => bench::bench(
            &model,
            &bench::BenchOptions {
                warmup,
                iterations,
                inputs: &inputs,
                dims: &dims,
                threads: exec.and_then(|e| e.threads),
                options: session_options(&base, ep)?,
                profile,
            },
        )
        .map(|_| 0),
    }
}
