//! Safe Rust bindings to libqsp, a prompt-prefill engine for quantized
//! decoder-only transformers (C API: `include/qsp/qsp.h`, raw bindings:
//! the `qsp-sys` crate).
//!
//! * [`Context`] owns a `qsp_context` and frees it on `Drop`. It is `Send`
//!   but not `Sync`: the C context must be used from one thread at a time.
//! * Every fallible call returns [`Result`]; an [`Error`] carries the
//!   library's [`Status`] and its message.
//! * [`Context::logits`] borrows the library's buffer: the slice lives as long
//!   as a shared borrow of the context, and everything that invalidates the
//!   buffer (prefill, KV clear/truncate, drop) takes `&mut self` or `self`, so
//!   the borrow checker enforces the C API's "valid until the next prefill".
//! * [`prefill_batch`] advances several contexts (of one model) in one call,
//!   prompts and decode steps mixed; it needs libqsp >= 1.1.
//! * Weights are uploaded from slices, read (copied into the library's weight
//!   cache) during the call only.
//! * The library's ABI version is checked before the first context is made
//!   (and by every free function that talks to the library): a libqsp whose
//!   ABI is not [`ABI_VERSION`] gives an [`Error`] saying so, with status
//!   [`Status::Unsupported`].
//!
//! ```no_run
//! use qsp::{Backend, Context, DType, Params, Tensor};
//! let mut params = Params::default();
//! params.n_layers = 2;
//! params.hidden_size = 64;
//! // ... the rest of the model shape ...
//! params.backend = Backend::Cpu;
//! let mut ctx = Context::new(&params)?;
//! // ctx.upload_layer(0, &layer0)?; ... ctx.upload_embedding(&embd)?; ctx.upload_output(&out)?;
//! ctx.prefill(&[1, 2, 3])?;
//! let logits: &[f32] = ctx.logits()?;
//! println!("{} logits, argmax {}", logits.len(), ctx.greedy_token()?);
//! # Ok::<(), qsp::Error>(())
//! ```
#![deny(missing_docs)]

mod status;
pub use status::{abi_version, check_abi, status_string, version, Error, Result, Status};
use status::{check_global, cstr};
mod types;
pub use types::{Backend, DType, RopeStyle};
mod context;
pub use context::{cache_stats, CacheStats, Context, ContextInfo, LayerWeights, OutputWeights, Params, Tensor};
mod batch;
pub use batch::{prefill_batch, Piece, PREFILL_BATCH_VERSION};
mod gguf;
pub use gguf::{gguf_type_name, ExecOptions, GgufInfo, ModelFile, TensorInfo};
mod tokenizer;
pub use tokenizer::{TextStream, Tokenizer, TokenizerInfo, TOKENIZER_VERSION};

pub use qsp_sys as sys;

/// The ABI major version this crate was written for (`QSP_ABI_VERSION`).
pub const ABI_VERSION: u32 = 1;
