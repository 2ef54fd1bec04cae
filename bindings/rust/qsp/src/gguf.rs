//! GGUF model files (`include/qsp/qsp_gguf.h`).

use std::any::Any;
use std::ffi::{c_void, CString};
use std::fmt;
use std::panic::{self, AssertUnwindSafe};
use std::path::Path;
use std::ptr::{self, NonNull};

use crate::{check_abi, cstr, sys, Backend, Context, DType, Error, Params, Result, Status};

/// Maps a `qsp_gguf_*` status; the message is `qsp_gguf_last_error()`.
fn check_gguf(st: sys::qsp_status) -> Result<()> {
    match Status::from_code(st) {
        None => Ok(()),
        Some(s) => Err(Error::new(s, unsafe { cstr(sys::qsp_gguf_last_error()) })),
    }
}

/// How a context made from a model file runs. `Default`: the library's
/// defaults (backend `Auto`, device 0, one thread per core, the file's context
/// length capped at 8192).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ExecOptions {
    /// The backend.
    pub backend: Backend,
    /// The CUDA device ordinal.
    pub device_index: i32,
    /// CPU threads; 0 = one per core.
    pub n_threads: i32,
    /// KV-cache capacity in tokens; 0 = the file's context length, at most
    /// 8192 (a larger value is capped at the file's).
    pub context_length: u32,
    /// Shards of the model (libqsp >= 1.3; see [`Params::n_devices`]); 0 = unsplit.
    pub n_devices: u32,
    /// Their CUDA devices (see [`Params::device_mask`]); 0 = from `device_index` on.
    pub device_mask: u32,
}

impl Default for ExecOptions {
    fn default() -> ExecOptions {
        ExecOptions {
            backend: Backend::Auto,
            device_index: 0,
            n_threads: 0,
            context_length: 0,
            n_devices: 0,
            device_mask: 0,
        }
    }
}

/// What a GGUF file says about itself (`qsp_gguf_info`).
#[derive(Clone, Debug, PartialEq)]
#[allow(missing_docs)]
pub struct GgufInfo {
    pub version: u32,
    pub file_size: u64,
    pub tensor_count: u64,
    pub kv_count: u64,
    pub data_offset: u64,
    pub weight_bytes: u64,
    pub alignment: u32,
    /// "qwen3" or "llama".
    pub known_architecture: bool,
    pub architecture: String,
    pub name: String,
    pub n_layers: u32,
    pub hidden_size: u32,
    pub intermediate_size: u32,
    pub n_heads: u32,
    pub n_kv_heads: u32,
    pub head_dim: u32,
    pub vocab_size: u32,
    pub context_length: u32,
    pub rms_eps: f32,
    pub rope_theta: f32,
    /// `QSP_ROPE_*`; -1 for an unknown architecture.
    pub rope_style: i32,
    /// 1 / 0; -1 for an unknown architecture.
    pub qk_norm: i32,
    pub tied_embeddings: bool,
    /// `general.file_type`, -1 if missing.
    pub file_type: i32,
}

/// One tensor of a GGUF file (`qsp_gguf_tensor_desc`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TensorInfo {
    /// Its name, e.g. "blk.0.attn_q.weight".
    pub name: String,
    /// The GGML type id.
    pub ggml_type: i32,
    /// The type as a [`DType`], when qsp has it.
    pub dtype: Option<DType>,
    /// "q4_0", "q6_K", ...
    pub type_name: String,
    /// The dimensions as stored, contiguous one first.
    pub shape: Vec<u64>,
    /// ne\[1\] * ne\[2\] * ne\[3\].
    pub n_rows: u64,
    /// ne\[0\].
    pub n_cols: u64,
    /// Absolute file offset of the data.
    pub offset: u64,
    /// Bytes of data.
    pub n_bytes: u64,
    /// The weight-cache handle an upload uses.
    pub handle: u64,
}

fn array_str(a: &[std::os::raw::c_char]) -> String {
    let bytes: Vec<u8> = a.iter().take_while(|&&c| c != 0).map(|&c| c as u8).collect();
    String::from_utf8_lossy(&bytes).into_owned()
}

/// An open GGUF model file, memory-mapped read-only; unmapped on drop.
/// Contexts created from it do not borrow it. `Send` and `Sync`: the file is
/// immutable once open.
pub struct ModelFile {
    ptr: NonNull<sys::qsp_gguf>,
}

unsafe impl Send for ModelFile {}
unsafe impl Sync for ModelFile {}

impl fmt::Debug for ModelFile {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ModelFile").field("ptr", &self.ptr).finish()
    }
}

impl Drop for ModelFile {
    fn drop(&mut self) {
        unsafe { sys::qsp_gguf_close(self.ptr.as_ptr()) }
    }
}

/// The state of a progress closure seen from C: the closure, and the panic
/// it raised (after which it is not called again).
struct Progress<'a> {
    f: &'a mut dyn FnMut(u64, u64),
    panic: Option<Box<dyn Any + Send + 'static>>,
}

extern "C" fn progress_trampoline(done: u64, total: u64, user: *mut c_void) {
    // A panic must not unwind into C: catch it, keep it, re-raise it after
    // qsp_gguf_upload returns.
    let p = unsafe { &mut *(user as *mut Progress<'_>) };
    if p.panic.is_some() {
        return;
    }
    let f = &mut p.f;
    if let Err(payload) = panic::catch_unwind(AssertUnwindSafe(|| f(done, total))) {
        p.panic = Some(payload);
    }
}

impl ModelFile {
    /// Opens and validates the GGUF file at `path` (`qsp_gguf_open`).
    /// Errors: `Io` (missing, unreadable), `BadFormat` (not GGUF, truncated,
    /// malformed), `Unsupported`, with the library's message.
    pub fn open(path: impl AsRef<Path>) -> Result<ModelFile> {
        check_abi()?;
        let path = path.as_ref();
        let c = {
            use std::os::unix::ffi::OsStrExt;
            CString::new(path.as_os_str().as_bytes())
                .map_err(|_| Error::new(Status::InvalidArgument, format!("{}: a NUL byte in the path", path.display())))?
        };
        let mut out: *mut sys::qsp_gguf = ptr::null_mut();
        check_gguf(unsafe { sys::qsp_gguf_open(c.as_ptr(), &mut out) })?;
        let ptr = NonNull::new(out).ok_or_else(|| Error::new(Status::Internal, "qsp_gguf_open returned QSP_OK and NULL"))?;
        Ok(ModelFile { ptr })
    }

    /// The raw pointer, for calls this crate does not wrap. Stays owned by `self`.
    pub fn as_ptr(&self) -> *mut sys::qsp_gguf {
        self.ptr.as_ptr()
    }

    /// What the file says about itself.
    pub fn info(&self) -> Result<GgufInfo> {
        let mut i = sys::qsp_gguf_info::default();
        unsafe { sys::qsp_gguf_info_init(&mut i) };
        check_gguf(unsafe { sys::qsp_gguf_get_info(self.ptr.as_ptr(), &mut i) })?;
        Ok(GgufInfo {
            version: i.version,
            file_size: i.file_size,
            tensor_count: i.tensor_count,
            kv_count: i.kv_count,
            data_offset: i.data_offset,
            weight_bytes: i.weight_bytes,
            alignment: i.alignment,
            known_architecture: i.known_architecture != 0,
            architecture: array_str(&i.architecture),
            name: array_str(&i.name),
            n_layers: i.n_layers,
            hidden_size: i.hidden_size,
            intermediate_size: i.intermediate_size,
            n_heads: i.n_heads,
            n_kv_heads: i.n_kv_heads,
            head_dim: i.head_dim,
            vocab_size: i.vocab_size,
            context_length: i.context_length,
            rms_eps: i.rms_eps,
            rope_theta: i.rope_theta,
            rope_style: i.rope_style,
            qk_norm: i.qk_norm,
            tied_embeddings: i.tied_embeddings != 0,
            file_type: i.file_type,
        })
    }

    /// The number of tensors.
    pub fn tensor_count(&self) -> u64 {
        unsafe { sys::qsp_gguf_tensor_count(self.ptr.as_ptr()) }
    }

    fn tensor_at(&self, index: u64) -> Result<TensorInfo> {
        let mut d = sys::qsp_gguf_tensor_desc::default();
        unsafe { sys::qsp_gguf_tensor_desc_init(&mut d) };
        check_gguf(unsafe { sys::qsp_gguf_tensor_info(self.ptr.as_ptr(), index, &mut d) })?;
        Ok(TensorInfo {
            name: unsafe { cstr(d.name) },
            ggml_type: d.type_,
            dtype: DType::from_raw(d.type_),
            type_name: unsafe { cstr(d.type_name) },
            shape: d.ne[..(d.n_dims as usize).min(4)].to_vec(),
            n_rows: d.n_rows,
            n_cols: d.n_cols,
            offset: d.offset,
            n_bytes: d.n_bytes,
            handle: d.handle,
        })
    }

    /// The tensor directory, in file order.
    pub fn tensors(&self) -> Result<Vec<TensorInfo>> {
        (0..self.tensor_count()).map(|i| self.tensor_at(i)).collect()
    }

    /// The tensor called `name`; `OutOfRange` if there is none.
    pub fn tensor(&self, name: &str) -> Result<TensorInfo> {
        let c = CString::new(name).map_err(|_| Error::new(Status::InvalidArgument, "a NUL byte in the tensor name"))?;
        let mut index = 0u64;
        check_gguf(unsafe { sys::qsp_gguf_find_tensor(self.ptr.as_ptr(), c.as_ptr(), &mut index) })?;
        self.tensor_at(index)
    }

    /// The context parameters of this model with `opts`, after checking that
    /// qsp can run it (`Unsupported` / `BadFormat` otherwise).
    pub fn params(&self, opts: &ExecOptions) -> Result<Params> {
        let mut p = sys::qsp_context_params::default();
        unsafe { sys::qsp_context_params_init(&mut p) };
        p.backend = opts.backend as i32;
        p.device_index = opts.device_index;
        p.n_threads = opts.n_threads;
        p.max_seq_len = opts.context_length;
        p.n_devices = opts.n_devices;
        p.device_mask = opts.device_mask;
        check_gguf(unsafe { sys::qsp_gguf_fill_params(self.ptr.as_ptr(), &mut p) })?;
        Ok(Params::from_raw(&p))
    }

    /// A context holding this whole model, ready to prefill.
    pub fn create_context(&self, opts: &ExecOptions) -> Result<Context> {
        self.create_context_with_progress(opts, |_, _| {})
    }

    /// As [`ModelFile::create_context`], calling `progress(done_bytes,
    /// total_bytes)` during the upload. If `progress` panics, it is not called
    /// again, the half-made context is destroyed and the panic resumes in the
    /// caller once the upload has returned (it never unwinds through C).
    pub fn create_context_with_progress<F: FnMut(u64, u64)>(&self, opts: &ExecOptions, mut progress: F) -> Result<Context> {
        let ctx = Context::new(&self.params(opts)?)?;
        let mut state = Progress { f: &mut progress, panic: None };
        let st = unsafe {
            sys::qsp_gguf_upload(
                self.ptr.as_ptr(),
                ctx.as_ptr(),
                Some(progress_trampoline),
                &mut state as *mut Progress<'_> as *mut c_void,
            )
        };
        if let Some(payload) = state.panic.take() {
            drop(ctx);
            panic::resume_unwind(payload);
        }
        check_gguf(st)?;
        Ok(ctx)
    }
}

impl Context {
    /// A context holding the whole model of the GGUF file at `path`, ready to
    /// prefill (open, check, create, upload, close).
    pub fn from_gguf(path: impl AsRef<Path>, opts: &ExecOptions) -> Result<Context> {
        ModelFile::open(path)?.create_context(opts)
    }
}

/// The name of a GGML type id ("q4_0", "q6_K", ...); "unknown" otherwise.
pub fn gguf_type_name(ggml_type: i32) -> String {
    unsafe { cstr(sys::qsp_gguf_type_name(ggml_type)) }
}
