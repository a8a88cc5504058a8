//! [`ModelConfig`]: a decoder folder's configuration, from either format.
//!
//! - onnxruntime-genai (its model builder's output): `genai_config.json` beside the model,
//!   with `model.decoder` (sizes, the model file, input and output names with `%d` for the
//!   layer), `model.context_length`, the special tokens, and `search` (generation defaults,
//!   `past_present_share_buffer`).
//! - Hugging Face Optimum: `config.json` (the transformers config: `num_hidden_layers`,
//!   `num_attention_heads`, `num_key_value_heads`, `hidden_size`, `eos_token_id`, ...) beside
//!   `model.onnx` or `decoder_model_merged.onnx`, with the names Optimum exports
//!   (`past_key_values.N.key`, `present.N.key`).

use crate::error::{GenError, GenResult};
use serde_json::Value as Json;
use std::path::{Path, PathBuf};

/// Which exporter wrote the folder.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    /// `genai_config.json` (the onnxruntime-genai model builder).
    Genai,
    /// `config.json` (Hugging Face Optimum).
    Optimum,
}

impl std::fmt::Display for Format {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Format::Genai => "onnxruntime-genai (genai_config.json)",
            Format::Optimum => "Hugging Face Optimum (config.json)",
        })
    }
}

/// The graph's input and output names. Per-layer names are templates with `%d` for the
/// layer index, as `genai_config.json` writes them.
#[derive(Clone, Debug, PartialEq)]
pub struct IoNames {
    pub input_ids: String,
    pub attention_mask: Option<String>,
    pub position_ids: Option<String>,
    pub past_key: String,
    pub past_value: String,
    pub logits: String,
    pub present_key: String,
    pub present_value: String,
}

impl IoNames {
    /// A per-layer template with the layer's index in place of `%d`.
    pub fn layer(template: &str, layer: usize) -> String {
        template.replacen("%d", &layer.to_string(), 1)
    }
}

/// Generation defaults of the folder (`search` in `genai_config.json`; Optimum folders may
/// carry `generation_config.json`, whose sampling fields are read the same way).
#[derive(Clone, Debug, PartialEq)]
pub struct SearchDefaults {
    /// The total length (prompt and generated tokens) the runtime allocates for.
    pub max_length: Option<usize>,
    pub do_sample: bool,
    pub top_k: usize,
    pub top_p: f32,
    pub temperature: f32,
    pub repetition_penalty: f32,
}

impl Default for SearchDefaults {
    fn default() -> Self {
        SearchDefaults {
            max_length: None,
            do_sample: false,
            top_k: 50,
            top_p: 1.0,
            temperature: 1.0,
            repetition_penalty: 1.0,
        }
    }
}

/// A decoder folder's configuration.
#[derive(Clone, Debug, PartialEq)]
pub struct ModelConfig {
    pub format: Format,
    /// The folder.
    pub dir: PathBuf,
    /// The configuration file read.
    pub config_file: PathBuf,
    /// The ONNX file.
    pub model_file: PathBuf,
    /// `model.type` or `model_type` (qwen2, llama, phi3...), when given.
    pub model_type: Option<String>,
    pub num_layers: usize,
    pub num_heads: usize,
    pub num_kv_heads: usize,
    pub head_size: usize,
    pub hidden_size: usize,
    pub vocab_size: Option<usize>,
    /// `model.context_length` or `max_position_embeddings`.
    pub context_length: Option<usize>,
    /// Tokens that end generation (one or several).
    pub eos_token_ids: Vec<u32>,
    pub bos_token_id: Option<u32>,
    pub pad_token_id: Option<u32>,
    pub io: IoNames,
    /// The KV cache is one buffer of `search.max_length` rows per layer that the model
    /// writes in place (past and present share it); `attention_mask` says how many rows
    /// are valid. Otherwise the cache grows by one row per step (Concat style).
    pub past_present_share_buffer: bool,
    pub search: SearchDefaults,
}

/// A JSON document with the file it came from, for errors that name the field.
struct Doc<'a> {
    file: &'a Path,
    root: &'a Json,
}

impl Doc<'_> {
    fn err(&self, field: &str, message: impl Into<String>) -> GenError {
        GenError::Config {
            file: self.file.to_path_buf(),
            field: field.to_string(),
            message: message.into(),
        }
    }

    /// The value at a dotted path, `None` when any part is missing or null.
    fn get(&self, path: &str) -> Option<&Json> {
        let mut v = self.root;
        for part in path.split('.') {
            v = v.get(part)?;
        }
        (!v.is_null()).then_some(v)
    }

    fn opt_usize(&self, path: &str) -> GenResult<Option<usize>> {
        match self.get(path) {
            None => Ok(None),
            Some(v) => v
                .as_u64()
                .map(|n| Some(n as usize))
                .ok_or_else(|| self.err(path, format!("must be a non-negative integer, not {v}"))),
        }
    }

    fn usize(&self, path: &str) -> GenResult<usize> {
        self.opt_usize(path)?
            .ok_or_else(|| self.err(path, "is missing (a non-negative integer is required)"))
    }

    /// The first of `paths` that is present.
    fn usize_any(&self, paths: &[&str]) -> GenResult<Option<usize>> {
        for p in paths {
            if let Some(v) = self.opt_usize(p)? {
                return Ok(Some(v));
            }
        }
        Ok(None)
    }

    fn opt_str(&self, path: &str) -> GenResult<Option<String>> {
        match self.get(path) {
            None => Ok(None),
            Some(Json::String(s)) => Ok(Some(s.clone())),
            Some(v) => Err(self.err(path, format!("must be a string, not {v}"))),
        }
    }

    fn str(&self, path: &str) -> GenResult<String> {
        self.opt_str(path)?
            .ok_or_else(|| self.err(path, "is missing (a string is required)"))
    }

    fn opt_f32(&self, path: &str) -> GenResult<Option<f32>> {
        match self.get(path) {
            None => Ok(None),
            Some(v) => v
                .as_f64()
                .map(|x| Some(x as f32))
                .ok_or_else(|| self.err(path, format!("must be a number, not {v}"))),
        }
    }

    fn opt_bool(&self, path: &str) -> GenResult<Option<bool>> {
        match self.get(path) {
            None => Ok(None),
            Some(Json::Bool(b)) => Ok(Some(*b)),
            Some(v) => Err(self.err(path, format!("must be true or false, not {v}"))),
        }
    }

    /// A token id or a list of them (`eos_token_id` is either).
    fn token_ids(&self, path: &str) -> GenResult<Vec<u32>> {
        let one = |v: &Json| {
            v.as_u64()
                .filter(|&n| n <= u32::MAX as u64)
                .map(|n| n as u32)
                .ok_or_else(|| self.err(path, format!("{v} is not a token id")))
        };
        match self.get(path) {
            None => Ok(Vec::new()),
            Some(Json::Array(items)) => items.iter().map(one).collect(),
            Some(v) => Ok(vec![one(v)?]),
        }
    }

    fn token_id(&self, path: &str) -> GenResult<Option<u32>> {
        Ok(self.token_ids(path)?.first().copied())
    }

    /// Sampling defaults under `prefix` (`search.` in genai_config.json, empty in
    /// generation_config.json).
    fn search(&self, prefix: &str) -> GenResult<SearchDefaults> {
        let d = SearchDefaults::default();
        let p = |f: &str| format!("{prefix}{f}");
        Ok(SearchDefaults {
            max_length: self.opt_usize(&p("max_length"))?,
            do_sample: self.opt_bool(&p("do_sample"))?.unwrap_or(d.do_sample),
            top_k: self.opt_usize(&p("top_k"))?.unwrap_or(d.top_k),
            top_p: self.opt_f32(&p("top_p"))?.unwrap_or(d.top_p),
            temperature: self.opt_f32(&p("temperature"))?.unwrap_or(d.temperature),
            repetition_penalty: self
                .opt_f32(&p("repetition_penalty"))?
                .unwrap_or(d.repetition_penalty),
        })
    }
}

fn read_json(path: &Path) -> GenResult<Json> {
    let text = std::fs::read_to_string(path).map_err(|e| GenError::io(path, e))?;
    serde_json::from_str(&text).map_err(|e| GenError::Config {
        file: path.to_path_buf(),
        field: "(document)".into(),
        message: format!("not valid JSON: {e}"),
    })
}

/// The Optimum model files looked for, in order.
pub const OPTIMUM_MODEL_FILES: &[&str] = &["model.onnx", "decoder_model_merged.onnx"];

impl ModelConfig {
    /// Reads `dir/genai_config.json`, or else `dir/config.json`.
    pub fn from_dir(dir: impl AsRef<Path>) -> GenResult<ModelConfig> {
        let dir = dir.as_ref();
        if !dir.is_dir() {
            return Err(GenError::Folder {
                dir: dir.to_path_buf(),
                message: "is not a folder (generate takes a model folder with genai_config.json or config.json)".into(),
            });
        }
        let genai = dir.join("genai_config.json");
        if genai.is_file() {
            return Self::from_genai_json(dir, &genai, &read_json(&genai)?);
        }
        let hf = dir.join("config.json");
        if hf.is_file() {
            let generation = dir.join("generation_config.json");
            let gen_json = if generation.is_file() {
                Some((generation.clone(), read_json(&generation)?))
            } else {
                None
            };
            return Self::from_optimum_json(
                dir,
                &hf,
                &read_json(&hf)?,
                gen_json.as_ref().map(|(p, j)| (p.as_path(), j)),
            );
        }
        Err(GenError::Folder {
            dir: dir.to_path_buf(),
            message: "has neither genai_config.json (onnxruntime-genai) nor config.json (Hugging Face Optimum)".into(),
        })
    }

    /// Parses an onnxruntime-genai `genai_config.json` document (`file` names it in errors).
    pub fn from_genai_json(dir: &Path, file: &Path, json: &Json) -> GenResult<ModelConfig> {
        let doc = Doc { file, root: json };
        let dec = "model.decoder";
        let f = |s: &str| format!("{dec}.{s}");
        let num_heads = doc.usize(&f("num_attention_heads"))?;
        let hidden_size = doc.usize(&f("hidden_size"))?;
        let head_size = doc.usize(&f("head_size"))?;
        let num_kv_heads = doc
            .opt_usize(&f("num_key_value_heads"))?
            .unwrap_or(num_heads);
        let filename = doc.str(&f("filename"))?;
        let io = IoNames {
            input_ids: doc
                .opt_str(&f("inputs.input_ids"))?
                .unwrap_or_else(|| "input_ids".into()),
            attention_mask: Some(
                doc.opt_str(&f("inputs.attention_mask"))?
                    .unwrap_or_else(|| "attention_mask".into()),
            ),
            position_ids: doc.opt_str(&f("inputs.position_ids"))?,
            past_key: doc.str(&f("inputs.past_key_names"))?,
            past_value: doc.str(&f("inputs.past_value_names"))?,
            logits: doc
                .opt_str(&f("outputs.logits"))?
                .unwrap_or_else(|| "logits".into()),
            present_key: doc.str(&f("outputs.present_key_names"))?,
            present_value: doc.str(&f("outputs.present_value_names"))?,
        };
        for (field, name) in [
            ("inputs.past_key_names", &io.past_key),
            ("inputs.past_value_names", &io.past_value),
            ("outputs.present_key_names", &io.present_key),
            ("outputs.present_value_names", &io.present_value),
        ] {
            if !name.contains("%d") {
                return Err(doc.err(&f(field), format!("'{name}' has no %d for the layer index")));
            }
        }
        let eos = doc.token_ids("model.eos_token_id")?;
        if eos.is_empty() {
            return Err(doc.err("model.eos_token_id", "is missing (a token id or a list)"));
        }
        let search = doc.search("search.")?;
        let cfg = ModelConfig {
            format: Format::Genai,
            dir: dir.to_path_buf(),
            config_file: file.to_path_buf(),
            model_file: dir.join(&filename),
            model_type: doc.opt_str("model.type")?,
            num_layers: doc.usize(&f("num_hidden_layers"))?,
            num_heads,
            num_kv_heads,
            head_size,
            hidden_size,
            vocab_size: doc.opt_usize("model.vocab_size")?,
            context_length: doc.opt_usize("model.context_length")?,
            eos_token_ids: eos,
            bos_token_id: doc.token_id("model.bos_token_id")?,
            pad_token_id: doc.token_id("model.pad_token_id")?,
            io,
            past_present_share_buffer: doc
                .opt_bool("search.past_present_share_buffer")?
                .unwrap_or(false),
            search,
        };
        cfg.check(&doc)?;
        Ok(cfg)
    }

    /// Parses a Hugging Face `config.json` (and `generation_config.json`, when the folder has
    /// one) of an Optimum export.
    pub fn from_optimum_json(
        dir: &Path,
        file: &Path,
        json: &Json,
        generation: Option<(&Path, &Json)>,
    ) -> GenResult<ModelConfig> {
        let doc = Doc { file, root: json };
        // Transformers' names, then GPT-2's.
        let num_layers = doc
            .usize_any(&["num_hidden_layers", "n_layer", "num_layers"])?
            .ok_or_else(|| doc.err("num_hidden_layers", "is missing"))?;
        let num_heads = doc
            .usize_any(&["num_attention_heads", "n_head"])?
            .ok_or_else(|| doc.err("num_attention_heads", "is missing"))?;
        let hidden_size = doc
            .usize_any(&["hidden_size", "n_embd", "d_model"])?
            .ok_or_else(|| doc.err("hidden_size", "is missing"))?;
        let num_kv_heads = doc
            .usize_any(&["num_key_value_heads", "multi_query_group_num"])?
            .unwrap_or(num_heads);
        if num_heads == 0 {
            return Err(doc.err("num_attention_heads", "must be positive"));
        }
        let head_size = doc
            .opt_usize("head_dim")?
            .unwrap_or(hidden_size / num_heads);
        let model_file = OPTIMUM_MODEL_FILES
            .iter()
            .map(|f| dir.join(f))
            .find(|p| p.is_file())
            .ok_or_else(|| GenError::Folder {
                dir: dir.to_path_buf(),
                message: format!(
                    "config.json is there but no model file: looked for {}",
                    OPTIMUM_MODEL_FILES.join(", ")
                ),
            })?;
        let mut eos = doc.token_ids("eos_token_id")?;
        let mut search = SearchDefaults {
            max_length: None,
            ..SearchDefaults::default()
        };
        if let Some((gen_file, gen_json)) = generation {
            let g = Doc {
                file: gen_file,
                root: gen_json,
            };
            search = g.search("")?;
            // Generation defaults of transformers: top_k 50 only matters with do_sample.
            for id in g.token_ids("eos_token_id")? {
                if !eos.contains(&id) {
                    eos.push(id);
                }
            }
        }
        let cfg = ModelConfig {
            format: Format::Optimum,
            dir: dir.to_path_buf(),
            config_file: file.to_path_buf(),
            model_file,
            model_type: doc.opt_str("model_type")?,
            num_layers,
            num_heads,
            num_kv_heads,
            head_size,
            hidden_size,
            vocab_size: doc.opt_usize("vocab_size")?,
            context_length: doc.usize_any(&["max_position_embeddings", "n_positions"])?,
            eos_token_ids: eos,
            bos_token_id: doc.token_id("bos_token_id")?,
            pad_token_id: doc.token_id("pad_token_id")?,
            io: IoNames {
                input_ids: "input_ids".into(),
                attention_mask: Some("attention_mask".into()),
                position_ids: Some("position_ids".into()),
                past_key: "past_key_values.%d.key".into(),
                past_value: "past_key_values.%d.value".into(),
                logits: "logits".into(),
                present_key: "present.%d.key".into(),
                present_value: "present.%d.value".into(),
            },
            past_present_share_buffer: false,
            search,
        };
        cfg.check(&doc)?;
        Ok(cfg)
    }

    fn check(&self, doc: &Doc<'_>) -> GenResult<()> {
        let (heads, kv) = match self.format {
            Format::Genai => (
                "model.decoder.num_attention_heads",
                "model.decoder.num_key_value_heads",
            ),
            Format::Optimum => ("num_attention_heads", "num_key_value_heads"),
        };
        if self.num_layers == 0 {
            return Err(doc.err(
                if self.format == Format::Genai {
                    "model.decoder.num_hidden_layers"
                } else {
                    "num_hidden_layers"
                },
                "must be positive",
            ));
        }
        if self.num_kv_heads == 0 || !self.num_heads.is_multiple_of(self.num_kv_heads) {
            return Err(doc.err(
                kv,
                format!(
                    "{} does not divide {heads} = {}",
                    self.num_kv_heads, self.num_heads
                ),
            ));
        }
        if self.head_size == 0 {
            return Err(doc.err(
                if self.format == Format::Genai {
                    "model.decoder.head_size"
                } else {
                    "head_dim"
                },
                "must be positive",
            ));
        }
        if self.past_present_share_buffer && self.max_length().is_none() {
            return Err(doc.err(
                "search.max_length",
                "is missing: past_present_share_buffer needs the buffer's length",
            ));
        }
        Ok(())
    }

    /// The most tokens (prompt and generated) a generation can hold: `search.max_length`,
    /// else the context length; `None` when the folder gives neither.
    pub fn max_length(&self) -> Option<usize> {
        match (self.search.max_length, self.context_length) {
            (Some(m), Some(c)) => Some(m.min(c)),
            (m, c) => m.or(c),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn genai_doc() -> Json {
        json!({
            "model": {
                "bos_token_id": 1, "context_length": 2048, "eos_token_id": [2, 7],
                "pad_token_id": 0, "type": "qwen2", "vocab_size": 32000,
                "decoder": {
                    "filename": "model.onnx", "head_size": 64, "hidden_size": 896,
                    "num_attention_heads": 14, "num_key_value_heads": 2, "num_hidden_layers": 24,
                    "inputs": {
                        "input_ids": "input_ids", "attention_mask": "attention_mask",
                        "past_key_names": "past_key_values.%d.key",
                        "past_value_names": "past_key_values.%d.value"
                    },
                    "outputs": {
                        "logits": "logits", "present_key_names": "present.%d.key",
                        "present_value_names": "present.%d.value"
                    }
                }
            },
            "search": {
                "max_length": 512, "past_present_share_buffer": true, "do_sample": true,
                "top_k": 40, "top_p": 0.9, "temperature": 0.7, "repetition_penalty": 1.1
            }
        })
    }

    fn parse(doc: &Json) -> GenResult<ModelConfig> {
        ModelConfig::from_genai_json(Path::new("/m"), Path::new("/m/genai_config.json"), doc)
    }

    #[test]
    fn genai_config_is_read() {
        let c = parse(&genai_doc()).unwrap();
        assert_eq!(c.format, Format::Genai);
        assert_eq!((c.num_layers, c.num_heads, c.num_kv_heads), (24, 14, 2));
        assert_eq!((c.head_size, c.hidden_size), (64, 896));
        assert_eq!(c.eos_token_ids, vec![2, 7]);
        assert_eq!((c.bos_token_id, c.pad_token_id), (Some(1), Some(0)));
        assert!(c.past_present_share_buffer);
        assert_eq!(c.max_length(), Some(512));
        assert_eq!(c.io.position_ids, None);
        assert_eq!(IoNames::layer(&c.io.past_key, 3), "past_key_values.3.key");
        assert_eq!(c.model_file, Path::new("/m/model.onnx"));
        let s = &c.search;
        assert!(s.do_sample);
        assert_eq!((s.top_k, s.top_p, s.temperature), (40, 0.9, 0.7));
        assert!((s.repetition_penalty - 1.1).abs() < 1e-6);
    }

    #[test]
    fn a_single_eos_id_is_a_list_of_one() {
        let mut d = genai_doc();
        d["model"]["eos_token_id"] = json!(5);
        assert_eq!(parse(&d).unwrap().eos_token_ids, vec![5]);
    }

    #[test]
    fn missing_and_mistyped_fields_are_named() {
        for (path, value, field) in [
            ("head_size", None, "model.decoder.head_size"),
            ("filename", None, "model.decoder.filename"),
            (
                "num_hidden_layers",
                Some(json!("two")),
                "model.decoder.num_hidden_layers",
            ),
            (
                "num_key_value_heads",
                Some(json!(3)),
                "model.decoder.num_key_value_heads",
            ),
        ] {
            let mut d = genai_doc();
            let dec = d["model"]["decoder"].as_object_mut().unwrap();
            match value {
                None => {
                    dec.remove(path);
                }
                Some(v) => {
                    dec.insert(path.into(), v);
                }
            }
            let e = parse(&d).unwrap_err().to_string();
            assert!(e.contains(field), "{path}: {e}");
        }
        let mut d = genai_doc();
        d["model"]["decoder"]["inputs"]
            .as_object_mut()
            .unwrap()
            .remove("past_key_names");
        let e = parse(&d).unwrap_err().to_string();
        assert!(e.contains("model.decoder.inputs.past_key_names"), "{e}");
        let mut d = genai_doc();
        d["model"].as_object_mut().unwrap().remove("eos_token_id");
        assert!(parse(&d)
            .unwrap_err()
            .to_string()
            .contains("model.eos_token_id"));
        let mut d = genai_doc();
        d["model"]["decoder"]["outputs"]["present_key_names"] = json!("present.key");
        assert!(parse(&d).unwrap_err().to_string().contains("%d"));
        let mut d = genai_doc();
        d["search"].as_object_mut().unwrap().remove("max_length");
        d["model"].as_object_mut().unwrap().remove("context_length");
        let e = parse(&d).unwrap_err().to_string();
        assert!(e.contains("search.max_length"), "{e}");
    }

    #[test]
    fn optimum_config_is_read_with_gpt2_names_and_generation_config() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("decoder_model_merged.onnx"), b"").unwrap();
        let hf = json!({"model_type": "gpt2", "n_layer": 12, "n_head": 12, "n_embd": 768,
                        "n_positions": 1024, "eos_token_id": 50256, "vocab_size": 50257});
        let gen = json!({"do_sample": true, "top_p": 0.95, "eos_token_id": [50256, 50257]});
        let c = ModelConfig::from_optimum_json(
            dir.path(),
            &dir.path().join("config.json"),
            &hf,
            Some((Path::new("generation_config.json"), &gen)),
        )
        .unwrap();
        assert_eq!(c.format, Format::Optimum);
        assert_eq!((c.num_layers, c.num_heads, c.num_kv_heads), (12, 12, 12));
        assert_eq!((c.head_size, c.hidden_size), (64, 768));
        assert_eq!(c.context_length, Some(1024));
        assert_eq!(c.eos_token_ids, vec![50256, 50257]);
        assert!(c.search.do_sample && (c.search.top_p - 0.95).abs() < 1e-6);
        assert!(c.model_file.ends_with("decoder_model_merged.onnx"));
        assert!(!c.past_present_share_buffer);
    }

    #[test]
    fn optimum_folder_without_model_file_is_an_error() {
        let dir = tempfile::tempdir().unwrap();
        let hf = json!({"num_hidden_layers": 2, "num_attention_heads": 4, "hidden_size": 64});
        let e = ModelConfig::from_optimum_json(dir.path(), Path::new("config.json"), &hf, None)
            .unwrap_err()
            .to_string();
        assert!(e.contains("decoder_model_merged.onnx"), "{e}");
        let hf = json!({"num_attention_heads": 4, "hidden_size": 64});
        let e = ModelConfig::from_optimum_json(dir.path(), Path::new("config.json"), &hf, None)
            .unwrap_err()
            .to_string();
        assert!(e.contains("num_hidden_layers"), "{e}");
    }

    #[test]
    fn folder_without_config_is_an_error() {
        let dir = tempfile::tempdir().unwrap();
        let e = ModelConfig::from_dir(dir.path()).unwrap_err().to_string();
        assert!(
            e.contains("genai_config.json") && e.contains("config.json"),
            "{e}"
        );
        std::fs::write(dir.path().join("genai_config.json"), "{ not json").unwrap();
        let e = ModelConfig::from_dir(dir.path()).unwrap_err().to_string();
        assert!(e.contains("not valid JSON"), "{e}");
    }
}
