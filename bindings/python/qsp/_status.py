"""The status codes and the other enums of qsp.h, QspError, and the library's
global functions (version, names and sizes, the weight cache's statistics)."""

import ctypes
import enum
from collections import namedtuple

from . import _ffi

_lib = _ffi.lib


class Status(enum.IntEnum):
    OK = 0
    INVALID_ARGUMENT = -1
    STRUCT_SIZE = -2
    SHAPE = -3
    DTYPE = -4
    OUT_OF_RANGE = -5
    NOT_READY = -6
    CONTEXT_FULL = -7
    HANDLE_CONFLICT = -8
    NO_DEVICE = -9
    OUT_OF_MEMORY = -10
    DEVICE_OUT_OF_MEMORY = -11
    DEVICE = -12
    UNSUPPORTED = -13
    INTERNAL = -14
    IO = -15
    BAD_FORMAT = -16
    BUFFER_TOO_SMALL = -17


class DType(enum.IntEnum):
    F32 = 0
    F16 = 1
    Q4_0 = 2
    Q8_0 = 8
    BF16 = 30
    Q4_1 = 3
    Q5_0 = 6
    Q5_1 = 7
    Q2_K = 10
    Q3_K = 11
    Q4_K = 12
    Q5_K = 13
    Q6_K = 14


class Backend(enum.IntEnum):
    AUTO = 0
    CPU = 1
    CUDA = 2


class RopeStyle(enum.IntEnum):
    NEOX = 0
    INTERLEAVED = 1


class LogLevel(enum.IntEnum):
    ERROR = 0
    WARN = 1
    INFO = 2
    DEBUG = 3


def _s(b):
    return b.decode("utf-8", "replace") if b is not None else ""


class _Handle:
    """What every owner of a library handle shares: a ``with`` block,
    ``closed``, ``_p()`` (the live pointer, or ValueError naming the class)
    and a finalizer that frees a forgotten one. A subclass names the library
    function that frees its handle (``class Context(_Handle,
    free="qsp_context_destroy")``) and defines ``close()``. The function is
    looked up when the subclass is defined, because module globals may be
    gone when a finalizer runs at interpreter exit; it is None where the
    loaded library lacks it (an older libqsp: no such handle was made)."""

    _ptr = None
    _free = (None,)  # (the library's free function,): a tuple, so it never binds as a method

    def __init_subclass__(cls, free=None, **kw):
        super().__init_subclass__(**kw)
        if free is not None:
            cls._free = (getattr(_lib, free, None),)

    def __del__(self):
        ptr = getattr(self, "_ptr", None)
        if ptr:
            self._ptr = None
            fn = self._free[0]
            if fn is not None:
                fn(ptr)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False

    @property
    def closed(self):
        return not self._ptr

    def _p(self):
        if not self._ptr:
            raise ValueError("qsp: operation on a closed %s" % type(self).__name__)
        return self._ptr


class QspError(Exception):
    """A failing qsp call: ``status`` (Status, or a plain int for a value this
    binding does not know) and ``message`` (the library's message)."""

    def __init__(self, status, message):
        try:
            status = Status(status)
        except ValueError:
            pass
        self.status = status
        self.message = message
        name = status.name if isinstance(status, Status) else str(int(status))
        super().__init__("%s (%s): %s" % (status_string(int(status)), name, message))


def version():
    """The loaded library's version string, e.g. "1.0.0"."""
    return _s(_lib.qsp_version_string())


def version_number():
    return int(_lib.qsp_version_number())


def abi_version():
    return int(_lib.qsp_abi_version())


def status_string(status):
    return _s(_lib.qsp_status_string(int(status)))


def dtype_size(dtype, n_rows, n_cols):
    """Bytes of an n_rows x n_cols tensor of dtype; 0 if impossible."""
    return int(_lib.qsp_dtype_size(int(dtype), n_rows, n_cols))


def dtype_name(dtype):
    return _s(_lib.qsp_dtype_name(int(dtype)))


def backend_available(backend):
    return bool(_lib.qsp_backend_available(int(backend)))


def _check_global(st):
    if st != 0:
        raise QspError(st, _s(_lib.qsp_last_error()))


CacheStats = namedtuple("CacheStats", "n_tensors n_bytes n_uploads n_hits")


def cache_stats(backend=Backend.CPU, device_index=0):
    """Process-wide weight-cache statistics of one device."""
    s = _ffi.qsp_cache_stats()
    _lib.qsp_cache_stats_init(ctypes.byref(s))
    _check_global(_lib.qsp_cache_stats_get(int(backend), device_index, ctypes.byref(s)))
    return CacheStats(s.n_tensors, s.n_bytes, s.n_uploads, s.n_hits)

