//! `onnx-runtime generate MODEL_DIR`: text generation with an LLM decoder folder
//! (onnxruntime-genai's `genai_config.json` or Optimum's `config.json`), and `info` on such a
//! folder.

use clap::Args;
use onnx_runtime_genai::{
    inspect, GenerateOptions, Generation, Model, SamplingOptions, StopReason,
};
use onnx_runtime_session::SessionOptions;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::Instant;

/// `generate`'s arguments.
#[derive(Args)]
pub struct GenerateArgs {
    /// The model folder: genai_config.json (onnxruntime-genai) or config.json (Hugging Face
    /// Optimum) beside the .onnx file, and tokenizer.json for text prompts.
    pub model_dir: PathBuf,
    /// The prompt as text (needs tokenizer.json).
    #[arg(long, conflicts_with = "prompt_ids")]
    pub prompt: Option<String>,
    /// The prompt as token ids, e.g. 1,2,3 (no tokenizer needed).
    #[arg(long, value_name = "IDS", value_delimiter = ',')]
    pub prompt_ids: Option<Vec<u32>>,
    /// New tokens at most (generation also ends at an end-of-sequence token and at the
    /// folder's max_length).
    #[arg(long, value_name = "N", default_value_t = 128)]
    pub max_new_tokens: usize,
    /// Sample the next token (default: the folder's search.do_sample, else greedy).
    #[arg(long, conflicts_with = "greedy")]
    pub do_sample: bool,
    /// Take the most likely token even when the folder's configuration samples.
    #[arg(long)]
    pub greedy: bool,
    /// Sampling temperature (default: the folder's, else 1).
    #[arg(long)]
    pub temperature: Option<f32>,
    /// Keep the K most likely tokens when sampling (0: all; default: the folder's).
    #[arg(long, value_name = "K")]
    pub top_k: Option<usize>,
    /// Keep the most likely tokens up to this probability mass (default: the folder's, else 1).
    #[arg(long, value_name = "P")]
    pub top_p: Option<f32>,
    /// Penalise tokens already in the sequence (1: off; default: the folder's).
    #[arg(long)]
    pub repetition_penalty: Option<f32>,
    /// Seed of the sampler.
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// Do not stop at end-of-sequence tokens.
    #[arg(long)]
    pub ignore_eos: bool,
    /// Measure decoding: one short warm-up generation, then exactly --max-new-tokens
    /// tokens (end-of-sequence ignored), printing only the timing (and, with --ep cuda, the
    /// CUDA graphs of the prompt and decode steps).
    #[arg(long)]
    pub bench: bool,
    /// Cap the sequence (prompt and new tokens) below the folder's search.max_length: a
    /// shared KV buffer (past_present_share_buffer) then has this many rows, not the whole
    /// context's, as onnxruntime-genai's max_length search option.
    #[arg(long, value_name = "N")]
    pub max_length: Option<usize>,
    /// Print the generated token ids (space-separated) instead of their text, also when the
    /// folder has a tokenizer.
    #[arg(long)]
    pub print_ids: bool,
    #[command(flatten)]
    pub exec: crate::Exec,
}

fn ms(d: std::time::Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

fn sampling(args: &GenerateArgs, model: &Model) -> SamplingOptions {
    let mut s = SamplingOptions::from_search(&model.config.search);
    s.do_sample = (s.do_sample || args.do_sample) && !args.greedy;
    if let Some(t) = args.temperature {
        s.temperature = t;
    }
    if let Some(k) = args.top_k {
        s.top_k = k;
    }
    if let Some(p) = args.top_p {
        s.top_p = p;
    }
    if let Some(r) = args.repetition_penalty {
        s.repetition_penalty = r;
    }
    s.seed = args.seed;
    s
}

fn report(out: &Generation) {
    let t = &out.timing;
    let mut err = std::io::stderr().lock();
    let rate = |r: Option<f64>| r.map_or("-".to_string(), |r| format!("{r:.1}"));
    let _ = writeln!(
        err,
        "prompt: {} tokens in {:.2} ms ({} tokens/s)",
        out.prompt_tokens,
        ms(t.prompt),
        rate(t.prompt_tokens_per_s(out.prompt_tokens))
    );
    let _ = writeln!(err, "time to first token: {:.2} ms", ms(t.first_token));
    let _ = writeln!(
        err,
        "decode: {} tokens in {:.2} ms ({} tokens/s)",
        t.decode_steps,
        ms(t.decode),
        rate(t.decode_tokens_per_s())
    );
    let why = match out.stop {
        StopReason::StopToken => "end-of-sequence token",
        StopReason::MaxNewTokens => "--max-new-tokens reached",
        StopReason::MaxLength => "the sequence reached max_length",
    };
    let _ = writeln!(err, "generated {} tokens; stopped: {why}", out.tokens.len());
}

/// The session's CUDA graphs after a bench: each input signature seen, named by its step
/// kind (the decode step feeds one token), with its state and replays.
fn print_graphs(model: &Model) {
    let report = model.session.capture_report();
    let mut err = std::io::stderr().lock();
    if !report.blockers.is_empty() {
        let _ = writeln!(
            err,
            "cuda graph: not used, {} node(s) prevent it:",
            report.blockers.len()
        );
        for b in report.blockers.iter().take(5) {
            let _ = writeln!(err, "  {b}");
        }
        return;
    }
    let ids = model
        .session
        .inputs()
        .iter()
        .position(|io| io.name == model.config.io.input_ids);
    for sig in &report.signatures {
        let one_token = ids
            .and_then(|i| sig.inputs.get(i))
            .is_some_and(|s| s.ends_with("[1, 1]"));
        let what = if one_token { "decode" } else { "prompt" };
        let _ = writeln!(
            err,
            "cuda graph ({what} step, inputs {}): {}, {} replays, {:.1} MiB of graph memory",
            sig.inputs_summary(),
            sig.state,
            sig.replays,
            sig.graph_bytes as f64 / (1 << 20) as f64
        );
    }
}

/// Runs `generate`: loads the folder, streams the new text (or ids, without a tokenizer) to
/// stdout, then the timing to stderr.
pub fn generate(args: GenerateArgs, options: SessionOptions) -> Result<(), String> {
    let t0 = Instant::now();
    let mut model = Model::load(&args.model_dir, options).map_err(|e| e.to_string())?;
    let load = t0.elapsed();
    if let Some(n) = args.max_length {
        model.set_max_length(n).map_err(|e| e.to_string())?;
    }
    let prompt = match (&args.prompt, &args.prompt_ids) {
        (_, Some(ids)) => ids.clone(),
        (Some(text), None) => model.encode(text).map_err(|e| e.to_string())?,
        (None, None) => {
            return Err("give the prompt with --prompt TEXT or --prompt-ids 1,2,3".into())
        }
    };
    let mut opts = GenerateOptions {
        max_new_tokens: args.max_new_tokens,
        sampling: sampling(&args, &model),
        stop_tokens: (args.ignore_eos || args.bench).then(Vec::new),
        keep_logits: false,
    };
    if args.bench {
        let warm = GenerateOptions {
            max_new_tokens: opts.max_new_tokens.min(4),
            ..opts.clone()
        };
        model
            .generate(&prompt, &warm, &mut |_| {})
            .map_err(|e| e.to_string())?;
        let out = model
            .generate(&prompt, &opts, &mut |_| {})
            .map_err(|e| e.to_string())?;
        eprintln!(
            "model: {} (loaded in {:.0} ms)",
            args.model_dir.display(),
            ms(load)
        );
        report(&out);
        if model.session.device().is_some() {
            print_graphs(&model);
        }
        return Ok(());
    }
    let ids_only = args.print_ids || model.tokenizer.is_none();
    let mut stdout = std::io::stdout().lock();
    let mut first = true;
    opts.keep_logits = false;
    let out = model
        .generate(&prompt, &opts, &mut |e| {
            if ids_only {
                let _ = write!(stdout, "{}{}", if first { "" } else { " " }, e.id);
            } else {
                let _ = write!(stdout, "{}", e.text);
            }
            first = false;
            let _ = stdout.flush();
        })
        .map_err(|e| e.to_string())?;
    let _ = writeln!(stdout);
    drop(stdout);
    report(&out);
    Ok(())
}

/// `info MODEL_DIR`: the configuration and what the graph holds.
pub fn info_folder(dir: &Path) -> Result<(), String> {
    let found = inspect(dir).map_err(|e| e.to_string())?;
    let (cfg, arch) = (&found.config, &found.arch);
    println!("folder: {}", dir.display());
    for line in arch.describe(cfg) {
        println!("{line}");
    }
    match onnx_runtime_genai::Tokenizer::from_dir(dir) {
        Ok(t) => println!("tokenizer: tokenizer.json ({} tokens)", t.vocab_size()),
        Err(e) => println!("tokenizer: none ({e})"),
    }
    if let Some(e) = &found.mismatch {
        println!("does not match its configuration: {e}");
    }
    println!(
        "nodes: {} (run `onnx-runtime info {}` for the op histogram)",
        arch.nodes,
        cfg.model_file.display()
    );
    Ok(())
}
