//! The enums of qsp.h: [`DType`], [`Backend`], [`RopeStyle`].

use crate::{cstr, sys};

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

    pub(crate) fn from_raw(v: i32) -> Backend {
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
