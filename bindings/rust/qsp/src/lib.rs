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

mod gguf;
pub use gguf::{gguf_type_name, ExecOptions, GgufInfo, ModelFile, TensorInfo};
mod tokenizer;
pub use tokenizer::{TextStream, Tokenizer, TokenizerInfo, TOKENIZER_VERSION};

use std::ffi::CStr;
use std::fmt;
use std::os::raw::c_char;
use std::ptr::{self, NonNull};

pub use qsp_sys as sys;

/// The ABI major version this crate was written for (`QSP_ABI_VERSION`).
pub const ABI_VERSION: u32 = 1;

/// A library status other than `QSP_OK`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Status {
    /// `QSP_ERR_INVALID_ARGUMENT`: NULL pointer, zero size, bad enum value.
    InvalidArgument,
    /// `QSP_ERR_STRUCT_SIZE`.
    StructSize,
    /// `QSP_ERR_SHAPE`: a shape inconsistent with the model.
    Shape,
    /// `QSP_ERR_DTYPE`: dtype not allowed here, or byte size wrong for it.
    DType,
    /// `QSP_ERR_OUT_OF_RANGE`: layer index, token id, length out of range.
    OutOfRange,
    /// `QSP_ERR_NOT_READY`: weights missing, or no logits yet.
    NotReady,
    /// `QSP_ERR_CONTEXT_FULL`: prefill would pass max_seq_len.
    ContextFull,
    /// `QSP_ERR_HANDLE_CONFLICT`: handle re-registered with other metadata.
    HandleConflict,
    /// `QSP_ERR_NO_DEVICE`.
    NoDevice,
    /// `QSP_ERR_OUT_OF_MEMORY`: host allocation failed.
    OutOfMemory,
    /// `QSP_ERR_DEVICE_OUT_OF_MEMORY`.
    DeviceOutOfMemory,
    /// `QSP_ERR_DEVICE`: a CUDA runtime error.
    Device,
    /// `QSP_ERR_UNSUPPORTED` (also: the loaded library's ABI is not this crate's).
    Unsupported,
    /// `QSP_ERR_INTERNAL`: a bug in qsp.
    Internal,
    /// `QSP_ERR_IO`.
    Io,
    /// `QSP_ERR_BAD_FORMAT`.
    BadFormat,
    /// `QSP_ERR_BUFFER_TOO_SMALL` (1.2): an output buffer was too small.
    BufferTooSmall,
    /// A value this crate does not know (from a newer library).
    Unknown(i32),
}

impl Status {
    /// Every status this crate knows (all but `Unknown`), as in qsp.h.
    pub const ALL: &'static [Status] = &[
        Status::InvalidArgument,
        Status::StructSize,
        Status::Shape,
        Status::DType,
        Status::OutOfRange,
        Status::NotReady,
        Status::ContextFull,
        Status::HandleConflict,
        Status::NoDevice,
        Status::OutOfMemory,
        Status::DeviceOutOfMemory,
        Status::Device,
        Status::Unsupported,
        Status::Internal,
        Status::Io,
        Status::BadFormat,
        Status::BufferTooSmall,
    ];

    /// The status of a C return code; `None` for `QSP_OK`.
    pub fn from_code(code: i32) -> Option<Status> {
        Some(match code {
            sys::QSP_OK => return None,
            sys::QSP_ERR_INVALID_ARGUMENT => Status::InvalidArgument,
            sys::QSP_ERR_STRUCT_SIZE => Status::StructSize,
            sys::QSP_ERR_SHAPE => Status::Shape,
            sys::QSP_ERR_DTYPE => Status::DType,
            sys::QSP_ERR_OUT_OF_RANGE => Status::OutOfRange,
            sys::QSP_ERR_NOT_READY => Status::NotReady,
            sys::QSP_ERR_CONTEXT_FULL => Status::ContextFull,
            sys::QSP_ERR_HANDLE_CONFLICT => Status::HandleConflict,
            sys::QSP_ERR_NO_DEVICE => Status::NoDevice,
            sys::QSP_ERR_OUT_OF_MEMORY => Status::OutOfMemory,
            sys::QSP_ERR_DEVICE_OUT_OF_MEMORY => Status::DeviceOutOfMemory,
            sys::QSP_ERR_DEVICE => Status::Device,
            sys::QSP_ERR_UNSUPPORTED => Status::Unsupported,
            sys::QSP_ERR_INTERNAL => Status::Internal,
            sys::QSP_ERR_IO => Status::Io,
            sys::QSP_ERR_BAD_FORMAT => Status::BadFormat,
            sys::QSP_ERR_BUFFER_TOO_SMALL => Status::BufferTooSmall,
            other => Status::Unknown(other),
        })
    }

    /// The library's description (as `qsp_status_string`), from this crate's
    /// copy: formatting an error never calls into the library (which may be of
    /// another ABI). The tests check the copy against the library.
    pub fn description(self) -> &'static str {
        match self {
            Status::InvalidArgument => "invalid argument",
            Status::StructSize => "wrong struct_size",
            Status::Shape => "shape mismatch",
            Status::DType => "wrong dtype or byte size",
            Status::OutOfRange => "out of range",
            Status::NotReady => "not ready",
            Status::ContextFull => "context full",
            Status::HandleConflict => "handle conflict",
            Status::NoDevice => "no CUDA device",
            Status::OutOfMemory => "out of host memory",
            Status::DeviceOutOfMemory => "out of device memory",
            Status::Device => "device error",
            Status::Unsupported => "unsupported",
            Status::Internal => "internal error",
            Status::Io => "I/O error",
            Status::BadFormat => "bad file format",
            Status::BufferTooSmall => "buffer too small",
            Status::Unknown(_) => "unknown status",
        }
    }

    /// The C value (`QSP_ERR_*`).
    pub fn code(self) -> i32 {
        match self {
            Status::InvalidArgument => sys::QSP_ERR_INVALID_ARGUMENT,
            Status::StructSize => sys::QSP_ERR_STRUCT_SIZE,
            Status::Shape => sys::QSP_ERR_SHAPE,
            Status::DType => sys::QSP_ERR_DTYPE,
            Status::OutOfRange => sys::QSP_ERR_OUT_OF_RANGE,
            Status::NotReady => sys::QSP_ERR_NOT_READY,
            Status::ContextFull => sys::QSP_ERR_CONTEXT_FULL,
            Status::HandleConflict => sys::QSP_ERR_HANDLE_CONFLICT,
            Status::NoDevice => sys::QSP_ERR_NO_DEVICE,
            Status::OutOfMemory => sys::QSP_ERR_OUT_OF_MEMORY,
            Status::DeviceOutOfMemory => sys::QSP_ERR_DEVICE_OUT_OF_MEMORY,
            Status::Device => sys::QSP_ERR_DEVICE,
            Status::Unsupported => sys::QSP_ERR_UNSUPPORTED,
            Status::Internal => sys::QSP_ERR_INTERNAL,
            Status::Io => sys::QSP_ERR_IO,
            Status::BadFormat => sys::QSP_ERR_BAD_FORMAT,
            Status::BufferTooSmall => sys::QSP_ERR_BUFFER_TOO_SMALL,
            Status::Unknown(c) => c,
        }
    }
}

/// A failed qsp call: the status and the library's message.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Error {
    status: Status,
    message: String,
}

impl Error {
    /// An error with this status and message.
    pub fn new(status: Status, message: impl Into<String>) -> Error {
        Error { status, message: message.into() }
    }
    /// The status.
    pub fn status(&self) -> Status {
        self.status
    }
    /// The status as the C value.
    pub fn code(&self) -> i32 {
        self.status.code()
    }
    /// The library's message (`qsp_context_last_error` / `qsp_last_error`).
    pub fn message(&self) -> &str {
        &self.message
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} ({}): {}", self.status.description(), self.code(), self.message)
    }
}

impl std::error::Error for Error {}

/// `std::result::Result` with [`Error`].
pub type Result<T> = std::result::Result<T, Error>;

unsafe fn cstr(p: *const c_char) -> String {
    if p.is_null() {
        String::new()
    } else {
        CStr::from_ptr(p).to_string_lossy().into_owned()
    }
}

/// Maps a global call's status; the message is the calling thread's.
fn check_global(st: sys::qsp_status) -> Result<()> {
    match Status::from_code(st) {
        None => Ok(()),
        Some(s) => Err(Error::new(s, unsafe { cstr(sys::qsp_last_error()) })),
    }
}

/// Checks that the loaded libqsp speaks [`ABI_VERSION`].
pub fn check_abi() -> Result<()> {
    let abi = unsafe { sys::qsp_abi_version() };
    if abi == ABI_VERSION {
        Ok(())
    } else {
        Err(Error::new(
            Status::Unsupported,
            format!(
                "ABI mismatch: the loaded libqsp has ABI version {}, but the qsp crate was written for ABI version {}; \
                 use libqsp.so.{} or a qsp crate for ABI {}",
                abi, ABI_VERSION, ABI_VERSION, abi
            ),
        ))
    }
}

/// The loaded library's version, e.g. "1.0.0".
pub fn version() -> String {
    unsafe { cstr(sys::qsp_version_string()) }
}

/// The loaded library's ABI major version.
pub fn abi_version() -> u32 {
    unsafe { sys::qsp_abi_version() }
}

/// The library's English description of a status code.
pub fn status_string(code: i32) -> String {
    unsafe { cstr(sys::qsp_status_string(code)) }
}

/// Declares [`DType`] and [`DType::ALL`] from one list: a new `QSP_DTYPE_*`
/// of qsp.h is one line here, `NAME = QSP_DTYPE_NAME,` (a doc comment above
/// it is optional); the tests fail until it is.
macro_rules! dtypes {
    ($($(#[$doc:meta])* $name:ident = $value:ident,)*) => {
        /// Tensor element types (GGML type ids), one per `QSP_DTYPE_*` of qsp.h.
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
        #[repr(i32)]
        #[allow(non_camel_case_types)]
        pub enum DType {
            $($(#[$doc])* #[doc = concat!("`", stringify!($value), "` of qsp.h.")] $name = sys::$value,)*
        }

        impl DType {
            /// Every dtype, in declaration order.
            pub const ALL: &'static [DType] = &[$(DType::$name,)*];
        }
    };
}

dtypes! {
    /// float32.
    F32 = QSP_DTYPE_F32,
    /// IEEE half.
    F16 = QSP_DTYPE_F16,
    /// 18-byte blocks of 32: fp16 scale d, 16 bytes of nibbles; x = d * (q - 8).
    Q4_0 = QSP_DTYPE_Q4_0,
    /// 34-byte blocks of 32: fp16 scale d, 32 int8; x = d * q.
    Q8_0 = QSP_DTYPE_Q8_0,
    /// bfloat16.
    BF16 = QSP_DTYPE_BF16,
    /// GGML q4_1 blocks (since 1.1; layout in qsp.h).
    Q4_1 = QSP_DTYPE_Q4_1,
    /// GGML q5_0 blocks (since 1.1; layout in qsp.h).
    Q5_0 = QSP_DTYPE_Q5_0,
    /// GGML q5_1 blocks (since 1.1; layout in qsp.h).
    Q5_1 = QSP_DTYPE_Q5_1,
    /// GGML q2_K blocks (since 1.1; layout in qsp.h).
    Q2_K = QSP_DTYPE_Q2_K,
    /// GGML q3_K blocks (since 1.1; layout in qsp.h).
    Q3_K = QSP_DTYPE_Q3_K,
    /// GGML q4_K blocks (since 1.1; layout in qsp.h).
    Q4_K = QSP_DTYPE_Q4_K,
    /// GGML q5_K blocks (since 1.1; layout in qsp.h).
    Q5_K = QSP_DTYPE_Q5_K,
    /// GGML q6_K blocks (since 1.1; layout in qsp.h).
    Q6_K = QSP_DTYPE_Q6_K,
}

impl DType {
    /// The dtype with this GGML type id, if this crate knows it.
    pub fn from_raw(v: i32) -> Option<DType> {
        DType::ALL.iter().copied().find(|d| *d as i32 == v)
    }
    /// Bytes of an `n_rows` x `n_cols` tensor; 0 if `n_cols` is not a whole number of blocks.
    pub fn size(self, n_rows: u64, n_cols: u64) -> u64 {
        unsafe { sys::qsp_dtype_size(self as i32, n_rows, n_cols) }
    }
    /// "f32", "q4_0", ...
    pub fn name(self) -> String {
        unsafe { cstr(sys::qsp_dtype_name(self as i32)) }
    }
}

/// Execution backends.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(i32)]
pub enum Backend {
    /// CUDA when a device is usable, else the CPU.
    Auto = sys::QSP_BACKEND_AUTO,
    /// The exact fp32 reference.
    Cpu = sys::QSP_BACKEND_CPU,
    /// The GPU.
    Cuda = sys::QSP_BACKEND_CUDA,
}

impl Backend {
    /// Every backend.
    pub const ALL: &'static [Backend] = &[Backend::Auto, Backend::Cpu, Backend::Cuda];

    fn from_raw(v: i32) -> Backend {
        match v {
            sys::QSP_BACKEND_CPU => Backend::Cpu,
            sys::QSP_BACKEND_CUDA => Backend::Cuda,
            _ => Backend::Auto,
        }
    }
    /// Is the backend usable in this process?
    pub fn available(self) -> bool {
        unsafe { sys::qsp_backend_available(self as i32) != 0 }
    }
}

/// RoPE pairing.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(i32)]
pub enum RopeStyle {
    /// Pairs (i, i + head_dim/2): Qwen3, HF Llama.
    Neox = sys::QSP_ROPE_NEOX,
    /// Pairs (2i, 2i+1): Llama weights in GGUF.
    Interleaved = sys::QSP_ROPE_INTERLEAVED,
}

impl RopeStyle {
    /// Every RoPE style.
    pub const ALL: &'static [RopeStyle] = &[RopeStyle::Neox, RopeStyle::Interleaved];
}

/// What a [`Context`] is created with (`qsp_context_params`). `Default` takes
/// the library's defaults (`qsp_context_params_init`): set the model shape.
#[derive(Clone, Debug, PartialEq)]
#[allow(missing_docs)]
pub struct Params {
    pub n_layers: u32,
    pub hidden_size: u32,
    pub intermediate_size: u32,
    pub n_heads: u32,
    pub n_kv_heads: u32,
    pub head_dim: u32,
    pub vocab_size: u32,
    pub max_seq_len: u32,
    pub rms_eps: f32,
    pub rope_theta: f32,
    pub rope_style: RopeStyle,
    pub qk_norm: bool,
    pub backend: Backend,
    pub device_index: i32,
    /// CPU threads; 0 = one per core.
    pub n_threads: i32,
    /// Most verbose level logged (to the process-wide sink), `QSP_LOG_*`.
    pub log_level: i32,
}

impl Default for Params {
    fn default() -> Params {
        let mut p = sys::qsp_context_params::default();
        unsafe { sys::qsp_context_params_init(&mut p) };
        Params::from_raw(&p)
    }
}

impl Params {
    fn from_raw(p: &sys::qsp_context_params) -> Params {
        Params {
            n_layers: p.n_layers,
            hidden_size: p.hidden_size,
            intermediate_size: p.intermediate_size,
            n_heads: p.n_heads,
            n_kv_heads: p.n_kv_heads,
            head_dim: p.head_dim,
            vocab_size: p.vocab_size,
            max_seq_len: p.max_seq_len,
            rms_eps: p.rms_eps,
            rope_theta: p.rope_theta,
            rope_style: if p.rope_style == sys::QSP_ROPE_INTERLEAVED { RopeStyle::Interleaved } else { RopeStyle::Neox },
            qk_norm: p.qk_norm != 0,
            backend: Backend::from_raw(p.backend),
            device_index: p.device_index,
            n_threads: p.n_threads,
            log_level: p.log_level,
        }
    }
}

/// One weight tensor, borrowed for the upload call.
#[derive(Clone, Copy, Debug)]
pub struct Tensor<'a> {
    /// The caller's name for these exact bytes (non-zero): the cache key.
    pub handle: u64,
    /// Element type.
    pub dtype: DType,
    /// Rows (1 for vectors).
    pub n_rows: u64,
    /// Columns (the contiguous dimension).
    pub n_cols: u64,
    /// Exactly `dtype.size(n_rows, n_cols)` bytes (the library checks).
    pub data: &'a [u8],
}

impl<'a> Tensor<'a> {
    /// A tensor over raw bytes (quantized blocks, or any dtype's bytes).
    pub fn new(handle: u64, dtype: DType, n_rows: u64, n_cols: u64, data: &'a [u8]) -> Tensor<'a> {
        Tensor { handle, dtype, n_rows, n_cols, data }
    }
    /// An F32 tensor over floats.
    pub fn from_f32(handle: u64, n_rows: u64, n_cols: u64, data: &'a [f32]) -> Tensor<'a> {
        // f32 has no padding and u8 no alignment requirement: a plain byte view.
        let bytes = unsafe { std::slice::from_raw_parts(data.as_ptr() as *const u8, data.len() * 4) };
        Tensor::new(handle, DType::F32, n_rows, n_cols, bytes)
    }
    fn raw(&self) -> sys::qsp_tensor {
        sys::qsp_tensor {
            handle: self.handle,
            dtype: self.dtype as i32,
            reserved: 0,
            n_rows: self.n_rows,
            n_cols: self.n_cols,
            data: self.data.as_ptr() as *const _,
            n_bytes: self.data.len() as u64,
        }
    }
}

fn raw_opt(t: &Option<Tensor<'_>>) -> sys::qsp_tensor {
    match t {
        Some(t) => t.raw(),
        None => sys::qsp_tensor::default(),
    }
}

/// The tensors of one transformer layer (shapes: see `qsp_layer_weights`).
#[derive(Clone, Copy, Debug)]
#[allow(missing_docs)]
pub struct LayerWeights<'a> {
    pub attn_norm: Tensor<'a>,
    pub wq: Tensor<'a>,
    pub wk: Tensor<'a>,
    pub wv: Tensor<'a>,
    /// `None` when the model has no QK-norm.
    pub q_norm: Option<Tensor<'a>>,
    /// `None` when the model has no QK-norm.
    pub k_norm: Option<Tensor<'a>>,
    pub wo: Tensor<'a>,
    pub ffn_norm: Tensor<'a>,
    pub w_gate: Tensor<'a>,
    pub w_up: Tensor<'a>,
    pub w_down: Tensor<'a>,
}

/// The final norm and the LM head (for tied embeddings, the embedding tensor).
#[derive(Clone, Copy, Debug)]
#[allow(missing_docs)]
pub struct OutputWeights<'a> {
    pub norm: Tensor<'a>,
    pub lm_head: Tensor<'a>,
}

/// Process-wide weight-cache statistics of one device.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[allow(missing_docs)]
pub struct CacheStats {
    pub n_tensors: u64,
    pub n_bytes: u64,
    pub n_uploads: u64,
    pub n_hits: u64,
}

/// The weight cache's statistics for `backend` (`Cpu` or `Cuda`).
pub fn cache_stats(backend: Backend, device_index: i32) -> Result<CacheStats> {
    check_abi()?;
    let mut s = sys::qsp_cache_stats::default();
    unsafe { sys::qsp_cache_stats_init(&mut s) };
    check_global(unsafe { sys::qsp_cache_stats_get(backend as i32, device_index, &mut s) })?;
    Ok(CacheStats { n_tensors: s.n_tensors, n_bytes: s.n_bytes, n_uploads: s.n_uploads, n_hits: s.n_hits })
}

/// What [`Context::info`] reports.
#[derive(Clone, Debug, PartialEq, Eq)]
#[allow(missing_docs)]
pub struct ContextInfo {
    pub backend: Backend,
    pub device_index: i32,
    pub n_threads: i32,
    pub device_name: String,
    pub kv_cache_bytes: u64,
    pub scratch_bytes: u64,
}

/// A qsp context: a model's shape, its weights and a KV cache. Freed on drop.
pub struct Context {
    ptr: NonNull<sys::qsp_context>,
    hidden_size: u32,
}

// The C context may move between threads, but must be used by one at a time:
// Send, not Sync.
unsafe impl Send for Context {}

impl fmt::Debug for Context {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Context").field("ptr", &self.ptr).finish()
    }
}

impl Context {
    /// Creates a context (`qsp_context_create`).
    pub fn new(params: &Params) -> Result<Context> {
        check_abi()?;
        let mut p = sys::qsp_context_params::default();
        unsafe { sys::qsp_context_params_init(&mut p) };
        p.n_layers = params.n_layers;
        p.hidden_size = params.hidden_size;
        p.intermediate_size = params.intermediate_size;
        p.n_heads = params.n_heads;
        p.n_kv_heads = params.n_kv_heads;
        p.head_dim = params.head_dim;
        p.vocab_size = params.vocab_size;
        p.max_seq_len = params.max_seq_len;
        p.rms_eps = params.rms_eps;
        p.rope_theta = params.rope_theta;
        p.rope_style = params.rope_style as i32;
        p.qk_norm = params.qk_norm as i32;
        p.backend = params.backend as i32;
        p.device_index = params.device_index;
        p.n_threads = params.n_threads;
        p.log_level = params.log_level;
        let mut out: *mut sys::qsp_context = ptr::null_mut();
        check_global(unsafe { sys::qsp_context_create(&p, &mut out) })?;
        let ptr = NonNull::new(out)
            .ok_or_else(|| Error::new(Status::Internal, "qsp_context_create returned QSP_OK and NULL"))?;
        Ok(Context { ptr, hidden_size: params.hidden_size })
    }

    /// The raw pointer, for calls this crate does not wrap. Stays owned by `self`.
    pub fn as_ptr(&self) -> *mut sys::qsp_context {
        self.ptr.as_ptr()
    }

    fn check(&self, st: sys::qsp_status) -> Result<()> {
        match Status::from_code(st) {
            None => Ok(()),
            Some(s) => Err(Error::new(s, self.last_error())),
        }
    }

    /// The message of the last failure on this context ("" if none).
    pub fn last_error(&self) -> String {
        unsafe { cstr(sys::qsp_context_last_error(self.ptr.as_ptr())) }
    }

    /// Registers layer `layer`'s weights (`qsp_upload_layer`).
    pub fn upload_layer(&mut self, layer: u32, w: &LayerWeights<'_>) -> Result<()> {
        let mut lw = sys::qsp_layer_weights::default();
        unsafe { sys::qsp_layer_weights_init(&mut lw) };
        lw.attn_norm = w.attn_norm.raw();
        lw.wq = w.wq.raw();
        lw.wk = w.wk.raw();
        lw.wv = w.wv.raw();
        lw.q_norm = raw_opt(&w.q_norm);
        lw.k_norm = raw_opt(&w.k_norm);
        lw.wo = w.wo.raw();
        lw.ffn_norm = w.ffn_norm.raw();
        lw.w_gate = w.w_gate.raw();
        lw.w_up = w.w_up.raw();
        lw.w_down = w.w_down.raw();
        self.check(unsafe { sys::qsp_upload_layer(self.ptr.as_ptr(), layer, &lw) })
    }

    /// Registers the token-embedding table (`qsp_upload_embedding`).
    pub fn upload_embedding(&mut self, t: &Tensor<'_>) -> Result<()> {
        let raw = t.raw();
        self.check(unsafe { sys::qsp_upload_embedding(self.ptr.as_ptr(), &raw) })
    }

    /// Registers the final norm and the LM head (`qsp_upload_output`).
    pub fn upload_output(&mut self, w: &OutputWeights<'_>) -> Result<()> {
        let mut ow = sys::qsp_output_weights::default();
        unsafe { sys::qsp_output_weights_init(&mut ow) };
        ow.norm = w.norm.raw();
        ow.lm_head = w.lm_head.raw();
        self.check(unsafe { sys::qsp_upload_output(self.ptr.as_ptr(), &ow) })
    }

    /// Appends `tokens` to the KV cache and computes the last token's logits.
    pub fn prefill(&mut self, tokens: &[i32]) -> Result<()> {
        let n = u32::try_from(tokens.len())
            .map_err(|_| Error::new(Status::OutOfRange, format!("{} tokens do not fit a u32", tokens.len())))?;
        self.check(unsafe { sys::qsp_prefill(self.ptr.as_ptr(), tokens.as_ptr(), n) })
    }

    /// As [`prefill`](Self::prefill), from hidden states: `hidden.len()` must
    /// be a multiple of `hidden_size` (one row per token).
    pub fn prefill_embeddings(&mut self, hidden: &[f32]) -> Result<()> {
        let h = self.hidden_size as usize;
        if h == 0 || hidden.len() % h != 0 || hidden.len() / h > u32::MAX as usize {
            return Err(Error::new(
                Status::InvalidArgument,
                format!("{} values are not a whole number of {}-wide rows", hidden.len(), h),
            ));
        }
        let n = (hidden.len() / h) as u32;
        self.check(unsafe { sys::qsp_prefill_embeddings(self.ptr.as_ptr(), hidden.as_ptr(), n) })
    }

    /// The last prefilled token's logits, borrowed from the context: valid
    /// while `self` is borrowed, i.e. until the next prefill, KV clear or
    /// truncate, or drop (all of which need `&mut self` or `self`).
    pub fn logits(&self) -> Result<&[f32]> {
        let mut p: *const f32 = ptr::null();
        let mut n: u32 = 0;
        self.check(unsafe { sys::qsp_get_logits(self.ptr.as_ptr(), &mut p, &mut n) })?;
        if p.is_null() {
            return Err(Error::new(Status::Internal, "qsp_get_logits returned QSP_OK and NULL"));
        }
        Ok(unsafe { std::slice::from_raw_parts(p, n as usize) })
    }

    /// The argmax of the last logits (lowest id on ties).
    pub fn greedy_token(&self) -> Result<i32> {
        let mut t = 0i32;
        self.check(unsafe { sys::qsp_greedy_token(self.ptr.as_ptr(), &mut t) })?;
        Ok(t)
    }

    /// Tokens held in the KV cache.
    pub fn kv_length(&self) -> Result<u32> {
        let mut n = 0u32;
        self.check(unsafe { sys::qsp_kv_length(self.ptr.as_ptr(), &mut n) })?;
        Ok(n)
    }

    /// Empties the KV cache and forgets the logits.
    pub fn kv_clear(&mut self) -> Result<()> {
        self.check(unsafe { sys::qsp_kv_clear(self.ptr.as_ptr()) })
    }

    /// Keeps the first `length` tokens and forgets the logits.
    pub fn kv_truncate(&mut self, length: u32) -> Result<()> {
        self.check(unsafe { sys::qsp_kv_truncate(self.ptr.as_ptr(), length) })
    }

    /// Describes the context (`qsp_context_get_info`).
    pub fn info(&self) -> Result<ContextInfo> {
        let mut i = sys::qsp_context_info::default();
        unsafe { sys::qsp_context_info_init(&mut i) };
        self.check(unsafe { sys::qsp_context_get_info(self.ptr.as_ptr(), &mut i) })?;
        // NUL-terminated per the header; bounded anyway.
        let bytes: Vec<u8> = i.device_name.iter().take_while(|&&c| c != 0).map(|&c| c as u8).collect();
        let name = String::from_utf8_lossy(&bytes).into_owned();
        Ok(ContextInfo {
            backend: Backend::from_raw(i.backend),
            device_index: i.device_index,
            n_threads: i.n_threads,
            device_name: name,
            kv_cache_bytes: i.kv_cache_bytes,
            scratch_bytes: i.scratch_bytes,
        })
    }
}

/// What one piece of [`prefill_batch`] gives its context: token ids, or
/// hidden states (`hidden_size` floats per token, row-major). One token is a
/// decode step, many a prompt (or a chunk of one).
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Piece<'a> {
    /// Token ids.
    Tokens(&'a [i32]),
    /// Hidden states: a whole number of `hidden_size`-wide rows.
    Embeddings(&'a [f32]),
}

/// The first libqsp version with `qsp_prefill_batch` (1.1.0), as
/// `qsp_version_number()` gives it.
pub const PREFILL_BATCH_VERSION: u32 = 10100;

/// Advances several contexts in one call (`qsp_prefill_batch`): each piece as
/// [`Context::prefill`] (or [`Context::prefill_embeddings`]) of its context
/// would; afterwards each context has its own logits and greedy token. The
/// contexts must share one model (the same weights on the same backend and
/// device).
///
/// ```
/// # fn step(a: &mut qsp::Context, b: &mut qsp::Context, next: i32) -> qsp::Result<()> {
/// qsp::prefill_batch(&mut [(&mut *a, qsp::Piece::Tokens(&[1, 7, 42])), (&mut *b, qsp::Piece::Tokens(&[next]))])
/// # }
/// ```
///
/// Each context can be in the batch only once: the pieces hold `&mut
/// Context`, so the borrow checker refuses the same context twice (and the
/// library would refuse it at run time, naming the sequence):
///
/// ```compile_fail
/// # fn step(a: &mut qsp::Context, next: i32) -> qsp::Result<()> {
/// qsp::prefill_batch(&mut [(&mut *a, qsp::Piece::Tokens(&[1, 7, 42])), (&mut *a, qsp::Piece::Tokens(&[next]))])
/// # }
/// ```
///
/// Everything is checked before anything changes: on an error (a token out
/// of range, a full context, contexts of different models, ...) the
/// [`Error`]'s message names the offending piece, 0-based (`"sequence 1:
/// ..."`), and every context is as it was.
///
/// Needs libqsp >= 1.1 (this crate links `qsp_prefill_batch`, symbol version
/// `QSP_1.1`, so a program does not even start against 1.0); checked again
/// here: an older library gives [`Status::Unsupported`].
pub fn prefill_batch(pieces: &mut [(&mut Context, Piece<'_>)]) -> Result<()> {
    check_abi()?;
    let version = unsafe { sys::qsp_version_number() };
    if version < PREFILL_BATCH_VERSION {
        return Err(Error::new(
            Status::Unsupported,
            format!("prefill_batch needs libqsp >= 1.1.0 (qsp_prefill_batch); the loaded library is {}", self::version()),
        ));
    }
    let n_seqs = u32::try_from(pieces.len())
        .map_err(|_| Error::new(Status::OutOfRange, format!("{} pieces do not fit a u32", pieces.len())))?;
    let mut seqs = Vec::with_capacity(pieces.len());
    for (i, (ctx, piece)) in pieces.iter().enumerate() {
        let mut s = sys::qsp_batch_seq { ctx: ctx.as_ptr(), ..Default::default() };
        let n = match *piece {
            Piece::Tokens(t) => {
                s.tokens = t.as_ptr();
                t.len()
            }
            Piece::Embeddings(h) => {
                let w = ctx.hidden_size as usize;
                if w == 0 || h.len() % w != 0 {
                    return Err(Error::new(
                        Status::InvalidArgument,
                        format!("sequence {}: {} values are not a whole number of {}-wide rows", i, h.len(), w),
                    ));
                }
                s.embeddings = h.as_ptr();
                h.len() / w
            }
        };
        s.n_tokens = u32::try_from(n)
            .map_err(|_| Error::new(Status::OutOfRange, format!("sequence {}: {} tokens do not fit a u32", i, n)))?;
        seqs.push(s);
    }
    let seq_size = std::mem::size_of::<sys::qsp_batch_seq>() as u32;
    // The &mut borrows of `pieces` keep every context (and, through the
    // pieces' lifetimes, every token slice) alive and unshared for the call.
    check_global(unsafe { sys::qsp_prefill_batch(seqs.as_ptr(), n_seqs, seq_size) })
}

impl Drop for Context {
    fn drop(&mut self) {
        unsafe { sys::qsp_context_destroy(self.ptr.as_ptr()) }
    }
}
