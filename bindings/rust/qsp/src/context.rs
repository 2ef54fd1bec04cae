//! [`Context`]: a model's shape ([`Params`]), its weights ([`Tensor`],
//! [`LayerWeights`], [`OutputWeights`]) and a KV cache; the weight cache's
//! statistics.

use std::fmt;
use std::ptr::{self, NonNull};

use crate::{check_abi, check_global, cstr, sys, Backend, DType, Error, Result, RopeStyle, Status};

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
    /// Tensor parallelism (libqsp >= 1.3): the model split into this many
    /// shards; 0 or 1 = unsplit. The CPU runs the shards (1, 2, 4 or 8) one
    /// after another, bit-identical to the unsplit model; CUDA runs them in
    /// turn on one GPU (a one-bit `device_mask`) or a shard per GPU through
    /// NCCL (without NCCL: `Unsupported`). A shape that does not divide is
    /// `Shape`.
    pub n_devices: u32,
    /// The shards' CUDA devices, bit i = ordinal i: `n_devices` bits (a shard
    /// per device), one bit (every shard on that device) or 0 (`n_devices`
    /// devices from `device_index` on). Checked, not used, on the CPU.
    pub device_mask: u32,
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
    pub(crate) fn from_raw(p: &sys::qsp_context_params) -> Params {
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
            n_devices: p.n_devices,
            device_mask: p.device_mask,
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
    pub(crate) hidden_size: u32,
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
        p.n_devices = params.n_devices;
        p.device_mask = params.device_mask;
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

impl Drop for Context {
    fn drop(&mut self) {
        unsafe { sys::qsp_context_destroy(self.ptr.as_ptr()) }
    }
}
