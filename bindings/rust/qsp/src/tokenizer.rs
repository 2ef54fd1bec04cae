//! The tokenizer a GGUF file carries (`qsp_gguf.h`, libqsp >= 1.2).

use std::fmt;
use std::os::raw::c_char;
use std::path::Path;
use std::ptr::{self, NonNull};

use crate::{check_abi, cstr, sys, Error, ModelFile, Result, Status};

/// The first libqsp version with the tokenizer (1.2.0), as
/// `qsp_version_number` gives it.
pub const TOKENIZER_VERSION: u32 = 10200;

/// First buffer sizes; a call that needs more is repeated with the length the
/// library asks for (its `QSP_ERR_BUFFER_TOO_SMALL` protocol).
const FIRST_IDS: usize = 256;
const FIRST_BYTES: usize = 1024;

fn check_tok(st: sys::qsp_status) -> Result<()> {
    match Status::from_code(st) {
        None => Ok(()),
        Some(s) => Err(Error::new(s, unsafe { cstr(sys::qsp_gguf_last_error()) })),
    }
}

/// Runs `call(buf, capacity, &mut len)` with a buffer of `first` bytes, then
/// (on `BufferTooSmall`) one of the length the library asks for.
fn sized_bytes(first: usize, mut call: impl FnMut(*mut c_char, u64, &mut u64) -> sys::qsp_status) -> Result<Vec<u8>> {
    let mut buf = vec![0u8; first.max(1)];
    loop {
        let mut n = 0u64;
        let st = call(buf.as_mut_ptr() as *mut c_char, buf.len() as u64, &mut n);
        if st == sys::QSP_ERR_BUFFER_TOO_SMALL && n > buf.len() as u64 {
            buf = vec![0u8; n as usize];
            continue;
        }
        check_tok(st)?;
        buf.truncate(n as usize);
        return Ok(buf);
    }
}

fn detok_flags(skip_special: bool) -> u32 {
    if skip_special {
        sys::QSP_DETOKENIZE_SKIP_SPECIAL as u32
    } else {
        0
    }
}

/// What a [`Tokenizer`] is (`qsp_tokenizer_info`). Ids are `None` where the
/// model has none; strings are `""` where the file has none.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TokenizerInfo {
    /// `QSP_TOKENIZER_BPE` (1, "gpt2") or `QSP_TOKENIZER_SPM` (2, "llama").
    pub kind: i32,
    /// Ids are `0..n_vocab`.
    pub n_vocab: u32,
    /// Beginning of a text.
    pub bos_id: Option<i32>,
    /// End of a text.
    pub eos_id: Option<i32>,
    /// End of a turn (`<|im_end|>`, `<|eot_id|>`).
    pub eot_id: Option<i32>,
    /// `tokenize` with `add_special` prepends BOS.
    pub add_bos: bool,
    /// `tokenize` with `add_special` appends EOS.
    pub add_eos: bool,
    /// The longest piece of any token.
    pub max_piece_bytes: u32,
    /// `tokenizer.ggml.model` ("gpt2", "llama").
    pub model: String,
    /// `tokenizer.ggml.pre` ("qwen2", "llama-bpe").
    pub pre: String,
    /// `tokenizer.chat_template`.
    pub chat_template: String,
    /// Of the Unicode data the splitting follows.
    pub unicode_version: String,
}

/// The tokenizer of a GGUF file: text to token ids and back; freed on drop.
/// It copies what it needs, so the [`ModelFile`] may be dropped afterwards.
/// `Send` and `Sync`: it is immutable.
pub struct Tokenizer {
    ptr: NonNull<sys::qsp_tokenizer>,
}

unsafe impl Send for Tokenizer {}
unsafe impl Sync for Tokenizer {}

impl fmt::Debug for Tokenizer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Tokenizer").field("ptr", &self.ptr).finish()
    }
}

impl Drop for Tokenizer {
    fn drop(&mut self) {
        unsafe { sys::qsp_tokenizer_destroy(self.ptr.as_ptr()) }
    }
}

fn opt_id(id: i32) -> Option<i32> {
    if id < 0 {
        None
    } else {
        Some(id)
    }
}

impl Tokenizer {
    /// The tokenizer of an open file (`qsp_tokenizer_create`). Errors:
    /// `Unsupported` (no tokenizer: `tokenizer.ggml.model` absent or "none";
    /// a model qsp lacks; a libqsp older than 1.2), `BadFormat` (a malformed
    /// vocabulary).
    pub fn new(file: &ModelFile) -> Result<Tokenizer> {
        check_abi()?;
        let v = unsafe { sys::qsp_version_number() };
        if v < TOKENIZER_VERSION {
            return Err(Error::new(
                Status::Unsupported,
                format!(
                    "the tokenizer needs libqsp >= 1.2.0 (qsp_tokenizer_create); the loaded library is {}",
                    crate::version()
                ),
            ));
        }
        let mut out: *mut sys::qsp_tokenizer = ptr::null_mut();
        check_tok(unsafe { sys::qsp_tokenizer_create(file.as_ptr(), &mut out) })?;
        let ptr = NonNull::new(out)
            .ok_or_else(|| Error::new(Status::Internal, "qsp_tokenizer_create returned QSP_OK and NULL"))?;
        Ok(Tokenizer { ptr })
    }

    /// Opens the GGUF file at `path`, builds its tokenizer, closes the file.
    pub fn from_gguf(path: impl AsRef<Path>) -> Result<Tokenizer> {
        Tokenizer::new(&ModelFile::open(path)?)
    }

    /// The raw pointer, for calls this crate does not wrap. Stays owned by `self`.
    pub fn as_ptr(&self) -> *mut sys::qsp_tokenizer {
        self.ptr.as_ptr()
    }

    /// Describes the tokenizer.
    pub fn info(&self) -> Result<TokenizerInfo> {
        let mut i = sys::qsp_tokenizer_info::default();
        unsafe { sys::qsp_tokenizer_info_init(&mut i) };
        check_tok(unsafe { sys::qsp_tokenizer_get_info(self.ptr.as_ptr(), &mut i) })?;
        Ok(TokenizerInfo {
            kind: i.kind,
            n_vocab: i.n_vocab,
            bos_id: opt_id(i.bos_id),
            eos_id: opt_id(i.eos_id),
            eot_id: opt_id(i.eot_id),
            add_bos: i.add_bos != 0,
            add_eos: i.add_eos != 0,
            max_piece_bytes: i.max_piece_bytes,
            model: unsafe { cstr(i.model) },
            pre: unsafe { cstr(i.pre) },
            chat_template: unsafe { cstr(i.chat_template) },
            unicode_version: unsafe { cstr(i.unicode_version) },
        })
    }

    /// The token ids of `text`. `add_special`: add BOS / EOS as the model
    /// does; `parse_special`: text spelling a control token (`<|im_end|>`)
    /// becomes that token.
    pub fn tokenize(&self, text: &str, add_special: bool, parse_special: bool) -> Result<Vec<i32>> {
        self.tokenize_bytes(text.as_bytes(), add_special, parse_special)
    }

    /// [`tokenize`](Self::tokenize) of UTF-8 bytes (invalid sequences are
    /// tokenized as U+FFFD).
    pub fn tokenize_bytes(&self, text: &[u8], add_special: bool, parse_special: bool) -> Result<Vec<i32>> {
        let mut flags = 0u32;
        if add_special {
            flags |= sys::QSP_TOKENIZE_ADD_SPECIAL as u32;
        }
        if parse_special {
            flags |= sys::QSP_TOKENIZE_PARSE_SPECIAL as u32;
        }
        let mut ids = vec![0i32; FIRST_IDS];
        loop {
            let mut n = 0u64;
            let st = unsafe {
                sys::qsp_tokenize(
                    self.ptr.as_ptr(),
                    text.as_ptr() as *const c_char,
                    text.len() as u64,
                    flags,
                    ids.as_mut_ptr(),
                    ids.len() as u64,
                    &mut n,
                )
            };
            if st == sys::QSP_ERR_BUFFER_TOO_SMALL && n > ids.len() as u64 {
                ids = vec![0i32; n as usize];
                continue;
            }
            check_tok(st)?;
            ids.truncate(n as usize);
            return Ok(ids);
        }
    }

    /// The text of `ids` as the bytes they spell (possibly invalid UTF-8).
    /// `skip_special`: control tokens give no text.
    pub fn detokenize_bytes(&self, ids: &[i32], skip_special: bool) -> Result<Vec<u8>> {
        let flags = detok_flags(skip_special);
        sized_bytes(FIRST_BYTES, |buf, cap, n| unsafe {
            sys::qsp_detokenize(self.ptr.as_ptr(), ids.as_ptr(), ids.len() as u64, flags, buf, cap, n)
        })
    }

    /// The text of `ids` (invalid UTF-8 becomes U+FFFD).
    pub fn detokenize(&self, ids: &[i32], skip_special: bool) -> Result<String> {
        Ok(String::from_utf8_lossy(&self.detokenize_bytes(ids, skip_special)?).into_owned())
    }

    /// The bytes of one token on its own (possibly part of a UTF-8 sequence).
    /// `OutOfRange` for an id outside `0..n_vocab`.
    pub fn token_piece(&self, id: i32, skip_special: bool) -> Result<Vec<u8>> {
        let flags = detok_flags(skip_special);
        sized_bytes(64, |buf, cap, n| unsafe { sys::qsp_token_piece(self.ptr.as_ptr(), id, flags, buf, cap, n) })
    }

    /// A [`TextStream`] for decoding generated ids one at a time; it borrows
    /// the tokenizer.
    pub fn stream(&self, skip_special: bool) -> Result<TextStream<'_>> {
        let first = self.info()?.max_piece_bytes as usize + 4;
        let mut out: *mut sys::qsp_text_stream = ptr::null_mut();
        check_tok(unsafe { sys::qsp_text_stream_create(self.ptr.as_ptr(), detok_flags(skip_special), &mut out) })?;
        let ptr = NonNull::new(out)
            .ok_or_else(|| Error::new(Status::Internal, "qsp_text_stream_create returned QSP_OK and NULL"))?;
        Ok(TextStream { ptr, first, _tok: self })
    }
}

/// Streaming detokenization (`qsp_text_stream`): [`push`](Self::push)
/// returns the text that became complete, holding back the bytes of an
/// unfinished UTF-8 character until a later token completes it;
/// [`flush`](Self::flush) returns what is held back and starts over. All
/// pushes plus the flush equal `detokenize` of the same ids. Freed on drop.
pub struct TextStream<'t> {
    ptr: NonNull<sys::qsp_text_stream>,
    first: usize,
    _tok: &'t Tokenizer,
}

unsafe impl Send for TextStream<'_> {}

impl fmt::Debug for TextStream<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TextStream").field("ptr", &self.ptr).finish()
    }
}

impl Drop for TextStream<'_> {
    fn drop(&mut self) {
        unsafe { sys::qsp_text_stream_destroy(self.ptr.as_ptr()) }
    }
}

impl TextStream<'_> {
    /// Adds one id; returns the bytes that became complete.
    pub fn push_bytes(&mut self, id: i32) -> Result<Vec<u8>> {
        let p = self.ptr.as_ptr();
        sized_bytes(self.first, |buf, cap, n| unsafe { sys::qsp_text_stream_push(p, id, buf, cap, n) })
    }

    /// What is held back (an unfinished character as its raw bytes); the
    /// stream starts over.
    pub fn flush_bytes(&mut self) -> Result<Vec<u8>> {
        let p = self.ptr.as_ptr();
        sized_bytes(self.first, |buf, cap, n| unsafe { sys::qsp_text_stream_flush(p, buf, cap, n) })
    }

    /// Adds one id; returns the text that became complete (always whole
    /// characters, unless the ids spell invalid UTF-8: U+FFFD then).
    pub fn push(&mut self, id: i32) -> Result<String> {
        Ok(String::from_utf8_lossy(&self.push_bytes(id)?).into_owned())
    }

    /// [`flush_bytes`](Self::flush_bytes) as a string (U+FFFD for an
    /// unfinished character).
    pub fn flush(&mut self) -> Result<String> {
        Ok(String::from_utf8_lossy(&self.flush_bytes()?).into_owned())
    }
}

impl ModelFile {
    /// The file's [`Tokenizer`] (see [`Tokenizer::new`]).
    pub fn tokenizer(&self) -> Result<Tokenizer> {
        Tokenizer::new(self)
    }
}
