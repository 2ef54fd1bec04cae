//! Status codes, [`Error`] and [`Result`], and the library's global functions
//! (ABI check, version, status strings).

use std::ffi::CStr;
use std::fmt;
use std::os::raw::c_char;

use crate::{sys, ABI_VERSION};

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

pub(crate) unsafe fn cstr(p: *const c_char) -> String {
    if p.is_null() {
        String::new()
    } else {
        CStr::from_ptr(p).to_string_lossy().into_owned()
    }
}

/// Maps a global call's status; the message is the calling thread's.
pub(crate) fn check_global(st: sys::qsp_status) -> Result<()> {
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
