//! The folder's tokenizer (`tokenizer.json`, read by the Hugging Face `tokenizers` crate) and
//! [`StreamDecoder`], which turns generated ids into text as they arrive.

use crate::error::{GenError, GenResult};
use std::path::Path;

/// Ids to text, as a tokenizer does it; [`StreamDecoder`] works over any implementation.
pub trait Decode {
    /// The text of `ids` (special tokens left out). Incomplete UTF-8 at the end (a
    /// multi-byte character split over tokens) comes back as U+FFFD.
    fn decode(&self, ids: &[u32]) -> GenResult<String>;
}

/// A `tokenizer.json` tokenizer.
pub struct Tokenizer {
    inner: tokenizers::Tokenizer,
}

impl std::fmt::Debug for Tokenizer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Tokenizer({} tokens)", self.vocab_size())
    }
}

/// Tokenizer files this crate cannot read, with what they are.
const OTHER_TOKENIZERS: &[(&str, &str)] = &[
    ("tokenizer.model", "a SentencePiece model"),
    ("vocab.json", "a GPT-2 style vocab.json/merges.txt pair"),
    ("vocab.txt", "a WordPiece vocab.txt"),
];

impl Tokenizer {
    /// Loads `dir/tokenizer.json`. A folder without one is an error that says which other
    /// tokenizer files it has (they are not read) and that `--prompt-ids` works without.
    pub fn from_dir(dir: &Path) -> GenResult<Tokenizer> {
        let path = dir.join("tokenizer.json");
        if !path.is_file() {
            let others: Vec<String> = OTHER_TOKENIZERS
                .iter()
                .filter(|(f, _)| dir.join(f).is_file())
                .map(|(f, what)| format!("{f} ({what})"))
                .collect();
            let found = if others.is_empty() {
                String::new()
            } else {
                format!(
                    "; the folder has {}, which is not read (convert it to tokenizer.json with transformers' save_pretrained)",
                    others.join(", ")
                )
            };
            return Err(GenError::Tokenizer(format!(
                "{} has no tokenizer.json{found}; pass the prompt as token ids (--prompt-ids)",
                dir.display()
            )));
        }
        Self::from_file(&path)
    }

    /// Loads a `tokenizer.json` file.
    pub fn from_file(path: &Path) -> GenResult<Tokenizer> {
        let inner = tokenizers::Tokenizer::from_file(path).map_err(|e| {
            GenError::Tokenizer(format!(
                "{}: cannot be read as a Hugging Face tokenizer: {e}",
                path.display()
            ))
        })?;
        Ok(Tokenizer { inner })
    }

    /// The ids of `text`, with the tokenizer's own special tokens (its post-processor's
    /// BOS, if it has one).
    pub fn encode(&self, text: &str) -> GenResult<Vec<u32>> {
        let enc = self
            .inner
            .encode(text, true)
            .map_err(|e| GenError::Tokenizer(format!("cannot encode the prompt: {e}")))?;
        Ok(enc.get_ids().to_vec())
    }

    /// The size of the vocabulary, added tokens included.
    pub fn vocab_size(&self) -> usize {
        self.inner.get_vocab_size(true)
    }

    /// The id of a token's text (e.g. `</s>`), if the vocabulary has it.
    pub fn token_to_id(&self, token: &str) -> Option<u32> {
        self.inner.token_to_id(token)
    }
}

impl Decode for Tokenizer {
    fn decode(&self, ids: &[u32]) -> GenResult<String> {
        self.inner
            .decode(ids, true)
            .map_err(|e| GenError::Tokenizer(format!("cannot decode {ids:?}: {e}")))
    }
}

/// Incremental detokenization: [`StreamDecoder::push`] takes one generated id and returns
/// the text it completes. Decoding a token alone is wrong for byte-level and SentencePiece
/// vocabularies (a leading space is dropped, a multi-byte character is split over tokens),
/// so the decoder decodes a short window of ids before and after the new one and returns
/// the difference, holding text back while it ends in an incomplete character.
#[derive(Debug, Default)]
pub struct StreamDecoder {
    ids: Vec<u32>,
    /// Start of the window decoded for context.
    prefix: usize,
    /// Ids before this one have had their text returned.
    read: usize,
}

impl StreamDecoder {
    /// A decoder whose context starts with `prompt` (so the first generated token's leading
    /// space, if any, is kept); the prompt's own text is never returned.
    pub fn new(prompt: &[u32]) -> StreamDecoder {
        // A few tokens of context are enough for every decoder's joining rules.
        let keep = prompt.len().min(4);
        let ids = prompt[prompt.len() - keep..].to_vec();
        StreamDecoder {
            prefix: 0,
            read: ids.len(),
            ids,
        }
    }

    /// Adds `id` and returns the new text (empty while a character is incomplete).
    pub fn push(&mut self, dec: &dyn Decode, id: u32) -> GenResult<String> {
        self.ids.push(id);
        let before = dec.decode(&self.ids[self.prefix..self.read])?;
        let now = dec.decode(&self.ids[self.prefix..])?;
        if now.len() > before.len() && !now.ends_with('\u{FFFD}') {
            // Usually `now` extends `before`; a decoder that rewrites the join (a space
            // before punctuation, say) changes the end of `before`, and then the text from
            // where the two differ is returned.
            let text = now[common_prefix(&before, &now)..].to_string();
            self.prefix = self.read;
            self.read = self.ids.len();
            Ok(text)
        } else {
            Ok(String::new())
        }
    }

    /// Text still held back at the end (an incomplete character, returned as U+FFFD).
    pub fn finish(&mut self, dec: &dyn Decode) -> GenResult<String> {
        if self.read == self.ids.len() {
            return Ok(String::new());
        }
        let before = dec.decode(&self.ids[self.prefix..self.read])?;
        let now = dec.decode(&self.ids[self.prefix..])?;
        self.prefix = self.read;
        self.read = self.ids.len();
        let common = common_prefix(&before, &now);
        Ok(now[common..].to_string())
    }
}

/// The length in bytes of the longest common prefix of `a` and `b` on a char boundary.
fn common_prefix(a: &str, b: &str) -> usize {
    a.char_indices()
        .zip(b.chars())
        .find(|((_, x), y)| x != y)
        .map_or(a.len().min(b.len()), |((i, _), _)| i)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A byte-level toy: token i is the bytes in `pieces[i]`; incomplete UTF-8 decodes to
    /// U+FFFD, and a leading space is dropped at the start of a decode, as SentencePiece
    /// decoders do.
    struct Bytes(Vec<Vec<u8>>);

    impl Decode for Bytes {
        fn decode(&self, ids: &[u32]) -> GenResult<String> {
            let bytes: Vec<u8> = ids
                .iter()
                .flat_map(|&i| self.0[i as usize].clone())
                .collect();
            let s = String::from_utf8_lossy(&bytes).into_owned();
            Ok(s.strip_prefix(' ').map(str::to_string).unwrap_or(s))
        }
    }

    #[test]
    fn multi_byte_characters_split_over_tokens_come_out_whole() {
        let euro = "€".as_bytes(); // 3 bytes
        let toks = Bytes(vec![
            b" hello".to_vec(),
            euro[..1].to_vec(),
            euro[1..2].to_vec(),
            euro[2..].to_vec(),
            b" world".to_vec(),
            "你".as_bytes().to_vec(),
        ]);
        let mut d = StreamDecoder::new(&[0]);
        let out: Vec<String> = [1, 2, 3, 4, 5]
            .iter()
            .map(|&i| d.push(&toks, i).unwrap())
            .collect();
        assert_eq!(out, vec!["", "", "€", " world", "你"]);
        assert_eq!(d.finish(&toks).unwrap(), "");
    }

    #[test]
    fn the_leading_space_of_the_first_token_is_kept_after_a_prompt() {
        let toks = Bytes(vec![b"Hi".to_vec(), b" there".to_vec()]);
        let mut d = StreamDecoder::new(&[0]);
        assert_eq!(d.push(&toks, 1).unwrap(), " there");
        // Without a prompt the decoder's own rule (drop the leading space) applies.
        let mut d = StreamDecoder::new(&[]);
        assert_eq!(d.push(&toks, 1).unwrap(), "there");
    }

    #[test]
    fn an_incomplete_character_at_the_end_is_flushed_by_finish() {
        let toks = Bytes(vec![b"a".to_vec(), vec![0xE2, 0x82]]);
        let mut d = StreamDecoder::new(&[]);
        assert_eq!(d.push(&toks, 0).unwrap(), "a");
        assert_eq!(d.push(&toks, 1).unwrap(), "");
        assert_eq!(d.finish(&toks).unwrap(), "\u{FFFD}");
    }

    #[test]
    fn streamed_text_equals_the_whole_decode() {
        let pieces: Vec<Vec<u8>> = "naïve café 你好 ok"
            .as_bytes()
            .chunks(2)
            .map(|c| c.to_vec())
            .collect();
        let n = pieces.len() as u32;
        let toks = Bytes(pieces);
        let mut d = StreamDecoder::new(&[]);
        let mut text = String::new();
        for i in 0..n {
            text += &d.push(&toks, i).unwrap();
        }
        text += &d.finish(&toks).unwrap();
        assert_eq!(text, "naïve café 你好 ok");
    }

    #[test]
    fn common_prefix_stops_on_a_char_boundary() {
        assert_eq!(common_prefix("aé", "aè"), 1);
        assert_eq!(common_prefix("abc", "ab"), 2);
        assert_eq!(common_prefix("", "x"), 0);
    }
}
