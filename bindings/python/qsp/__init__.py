"""qsp — Python bindings (ctypes, no compiled extension) for libqsp's C API.

    import qsp
    with qsp.Context.from_gguf("model.gguf", backend=qsp.Backend.CPU) as ctx:   # a ready context
        ctx.prefill([1, 2, 3])
        top = ctx.logits()

    with qsp.ModelFile("model.gguf") as f:     # info, tensor list, contexts with progress
        print(f.info().architecture, len(f.tensors()))
        ctx = f.create_context(n_threads=4, progress=lambda done, total: ...)

several contexts of one model in one call (libqsp >= 1.1; new prompts and
decode steps mixed):

    qsp.prefill_batch([(ctx_a, prompt_tokens), (ctx_b, [next_token]), (ctx_c, qsp.Embeddings(hidden))])

or, building a model by hand:

    import qsp
    with qsp.Context(n_layers=2, hidden_size=64, ..., backend=qsp.Backend.CPU) as ctx:
        ctx.upload_layer(0, qsp.LayerWeights(attn_norm=qsp.Tensor(...), ...))
        ...
        ctx.prefill([1, 2, 3])
        logits = ctx.logits()        # a copy: numpy array if numpy is installed, else a list
        view = ctx.logits_view()     # no copy: valid until the next prefill/kv_clear/kv_truncate/close

The library is found through the QSP_LIBRARY environment variable (its full
path), else as ``libqsp.so.1`` on the loader's path, else through
``ctypes.util.find_library("qsp")``. Importing this package fails with an
ImportError (``qsp.LibraryError``) when the library is missing or its ABI
version is not the one this binding was written for (1).

Every failing call raises ``qsp.QspError`` with ``.status`` (a ``qsp.Status``)
and ``.message`` (the library's message). A Context is guarded by a lock, so
sharing one between threads is safe (calls are serialized); different contexts
run concurrently.
"""

import ctypes
import enum
import weakref
import os
import threading
from collections import namedtuple

from . import _ffi
from ._ffi import ABI_VERSION, LibraryError

try:  # optional
    import numpy as _np
except ImportError:  # pragma: no cover - exercised only without numpy
    _np = None

_lib = _ffi.lib

__all__ = [
    "ABI_VERSION", "LibraryError", "QspError", "Status", "DType", "Backend", "RopeStyle", "LogLevel",
    "Tensor", "LayerWeights", "Context", "ContextInfo", "CacheStats", "cache_stats", "dtype_size",
    "dtype_name", "status_string", "backend_available", "version", "version_number", "abi_version",
    "ModelFile", "GGUFInfo", "TensorDesc", "gguf_type_name", "Embeddings", "prefill_batch",
    "Tokenizer", "TokenizerInfo", "TextStream",
]


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
ContextInfo = namedtuple("ContextInfo", "backend device_index n_threads device_name kv_cache_bytes scratch_bytes")


def cache_stats(backend=Backend.CPU, device_index=0):
    """Process-wide weight-cache statistics of one device."""
    s = _ffi.qsp_cache_stats()
    _lib.qsp_cache_stats_init(ctypes.byref(s))
    _check_global(_lib.qsp_cache_stats_get(int(backend), device_index, ctypes.byref(s)))
    return CacheStats(s.n_tensors, s.n_bytes, s.n_uploads, s.n_hits)


def _buffer(data):
    """(address, n_bytes, keepalive) of a bytes-like object, without a copy
    where the object allows it."""
    if data is None:
        return None, 0, None
    if isinstance(data, bytes):
        # ctypes points straight at the bytes object's buffer.
        p = ctypes.c_char_p(data)
        return ctypes.cast(p, ctypes.c_void_p).value, len(data), (data, p)
    mv = memoryview(data)
    if not mv.contiguous:
        raise ValueError("tensor data must be a contiguous buffer")
    n = mv.nbytes
    if n == 0:
        return None, 0, None
    if _np is not None and isinstance(data, _np.ndarray):
        return data.ctypes.data, n, data
    if mv.readonly:
        buf = (ctypes.c_char * n).from_buffer_copy(mv)
    else:
        buf = (ctypes.c_char * n).from_buffer(mv.cast("B"))
    return ctypes.addressof(buf), n, (buf, mv)


class Tensor:
    """One weight tensor: ``handle`` (the caller's name for these exact bytes,
    non-zero), ``dtype``, ``n_rows`` x ``n_cols`` and ``data``: any contiguous
    bytes-like object (bytes, bytearray, memoryview, array.array, numpy array)
    of exactly ``dtype_size(dtype, n_rows, n_cols)`` bytes. The bytes are read
    (copied into the library's weight cache) during the upload call only."""

    __slots__ = ("handle", "dtype", "n_rows", "n_cols", "data")

    def __init__(self, handle, dtype, n_rows, n_cols, data):
        self.handle = handle
        self.dtype = DType(dtype) if dtype in DType._value2member_map_ else dtype
        self.n_rows = n_rows
        self.n_cols = n_cols
        self.data = data

    def _fill(self, t, keep):
        addr, n, k = _buffer(self.data)
        keep.append(k)
        t.handle = self.handle
        t.dtype = int(self.dtype)
        t.reserved = 0
        t.n_rows = self.n_rows
        t.n_cols = self.n_cols
        t.data = addr
        t.n_bytes = n

    def __repr__(self):
        return "Tensor(handle=%#x, dtype=%s, shape=%dx%d)" % (self.handle, dtype_name(self.dtype), self.n_rows, self.n_cols)


class LayerWeights:
    """The tensors of one layer (slots as in qsp_layer_weights); q_norm and
    k_norm stay None for models without QK-norm."""

    SLOTS = _ffi.LAYER_SLOTS
    __slots__ = SLOTS

    def __init__(self, **tensors):
        for name in self.SLOTS:
            setattr(self, name, tensors.pop(name, None))
        if tensors:
            raise TypeError("unknown layer slots: %s" % ", ".join(sorted(tensors)))


_PARAM_FIELDS = [name for name, _ in _ffi.qsp_context_params._fields_ if name not in
                 ("struct_size", "reserved0", "reserved1", "reserved2", "log_callback", "log_user_data")]


def _int32s(tokens):
    """(keepalive, pointer, count) of token ids: a sequence of ints (or an
    integer numpy array), copied into a C int32 array."""
    n = len(tokens)
    arr = (ctypes.c_int32 * max(n, 1))(*tokens)
    return arr, ctypes.cast(arr, ctypes.POINTER(ctypes.c_int32)), n


def _floats(hidden):
    """(keepalive, pointer, count) of float32 values: a numpy array (no copy
    when it already is float32 and C-contiguous) or a flat sequence."""
    if _np is not None and isinstance(hidden, _np.ndarray):
        a = _np.ascontiguousarray(hidden, dtype=_np.float32)
        return a, a.ctypes.data_as(ctypes.POINTER(ctypes.c_float)), a.size
    count = len(hidden)
    a = (ctypes.c_float * max(count, 1))(*hidden)
    return a, ctypes.cast(a, ctypes.POINTER(ctypes.c_float)), count


def _rows(count, hidden_size, n_tokens):
    """The number of hidden_size-wide rows that count values give (n_tokens,
    when given, must not need more values than there are)."""
    if n_tokens is None:
        if count % hidden_size:
            raise ValueError("%d values are not a whole number of %d-wide rows" % (count, hidden_size))
        return count // hidden_size
    if n_tokens * hidden_size > count:
        raise ValueError("%d values given; %d tokens need %d" % (count, n_tokens, n_tokens * hidden_size))
    return n_tokens


class Context:
    """A qsp context: a model shape, its weights and a KV cache.

    ``Context(n_layers=..., hidden_size=..., ...)`` takes every field of
    qsp_context_params by name (``rms_eps``, ``rope_theta``, ``rope_style``,
    ``qk_norm``, ``backend``, ``device_index``, ``n_threads``, ``log_level``
    have the library's defaults). Close it with ``close()`` or a ``with``
    block; an unreachable context is also freed by the garbage collector.
    """

    def __init__(self, **params):
        self._ptr = None
        self._lock = threading.RLock()
        p = _ffi.qsp_context_params()
        _lib.qsp_context_params_init(ctypes.byref(p))
        for k, v in params.items():
            if k not in _PARAM_FIELDS:
                raise TypeError("unknown context parameter %r" % k)
            setattr(p, k, v)
        ptr = _ffi.qsp_context_p()
        st = _lib.qsp_context_create(ctypes.byref(p), ctypes.byref(ptr))
        _check_global(st)
        self._ptr = ptr
        self.params = p  # a copy of what the context was created with

    @classmethod
    def _adopt(cls, ptr, params):
        """A Context owning ``ptr`` (made by ModelFile.create_context)."""
        self = cls.__new__(cls)
        self._lock = threading.RLock()
        self._ptr = ptr
        self.params = params
        return self

    @classmethod
    def from_gguf(cls, path, *, backend=Backend.AUTO, device_index=0, n_threads=0, context_length=0,
                  progress=None):
        """A context holding the whole model of the GGUF file at ``path``,
        ready to prefill. ``context_length``: the KV-cache capacity in tokens
        (0: the file's context length, at most 8192). ``progress(done_bytes,
        total_bytes)`` is called during the upload; what it raises is raised
        here once the upload returns, and no context is left behind.
        Errors (a missing, truncated, malformed or unsupported file) raise
        QspError with the library's status and message."""
        with ModelFile(path) as f:
            return f.create_context(backend=backend, device_index=device_index, n_threads=n_threads,
                                    context_length=context_length, progress=progress)

    # -- lifetime -----------------------------------------------------------
    def close(self):
        """Frees the context (idempotent). Logit views become invalid."""
        with self._lock:
            ptr, self._ptr = self._ptr, None
            if ptr:
                _lib.qsp_context_destroy(ptr)

    def __del__(self, _destroy=_lib.qsp_context_destroy):
        # _destroy is bound now: module globals may be gone at interpreter exit.
        ptr = getattr(self, "_ptr", None)
        if ptr:
            self._ptr = None
            _destroy(ptr)

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
            raise ValueError("qsp: operation on a closed Context")
        return self._ptr

    def _check(self, st):
        if st != 0:
            raise QspError(st, _s(_lib.qsp_context_last_error(self._ptr)))

    @property
    def last_error(self):
        """The message of the last failure on this context ("" if none)."""
        with self._lock:
            return _s(_lib.qsp_context_last_error(self._p()))

    # -- weights --------------------------------------------------------------
    def upload_layer(self, layer, weights):
        w = _ffi.qsp_layer_weights()
        _lib.qsp_layer_weights_init(ctypes.byref(w))
        keep = []
        for name in _ffi.LAYER_SLOTS:
            t = getattr(weights, name)
            if t is not None:
                t._fill(getattr(w, name), keep)
        with self._lock:
            self._check(_lib.qsp_upload_layer(self._p(), layer, ctypes.byref(w)))

    def upload_embedding(self, tensor):
        t = _ffi.qsp_tensor()
        keep = []
        tensor._fill(t, keep)
        with self._lock:
            self._check(_lib.qsp_upload_embedding(self._p(), ctypes.byref(t)))

    def upload_output(self, norm, lm_head):
        """The final RMSNorm and the LM head (pass the embedding tensor itself
        for tied embeddings: it is stored once)."""
        w = _ffi.qsp_output_weights()
        _lib.qsp_output_weights_init(ctypes.byref(w))
        keep = []
        norm._fill(w.norm, keep)
        lm_head._fill(w.lm_head, keep)
        with self._lock:
            self._check(_lib.qsp_upload_output(self._p(), ctypes.byref(w)))

    # -- prefill ----------------------------------------------------------------
    def prefill(self, tokens):
        """Appends the token ids (a sequence of ints) to the KV cache."""
        arr, ptr, n = _int32s(tokens)
        with self._lock:
            self._check(_lib.qsp_prefill(self._p(), ptr, n))

    def prefill_embeddings(self, hidden, n_tokens=None):
        """As prefill, from n_tokens x hidden_size float32 values (flat
        sequence, or a float32 C-contiguous numpy array of any shape)."""
        keep, ptr, count = _floats(hidden)
        with self._lock:
            p = self._p()
            n_tokens = _rows(count, self._hidden_size(), n_tokens)
            self._check(_lib.qsp_prefill_embeddings(p, ptr, n_tokens))

    def _hidden_size(self):
        return self.params.hidden_size

    # -- logits -------------------------------------------------------------------
    def _logits_ptr(self):
        ptr = ctypes.POINTER(ctypes.c_float)()
        n = ctypes.c_uint32()
        self._check(_lib.qsp_get_logits(self._p(), ctypes.byref(ptr), ctypes.byref(n)))
        return ptr, n.value

    def logits(self):
        """A copy of the last token's logits: a float32 numpy array when numpy
        is installed, else a list of floats."""
        with self._lock:
            ptr, n = self._logits_ptr()
            if _np is not None:
                return _np.ctypeslib.as_array(ptr, shape=(n,)).copy()
            return ptr[:n]

    def logits_view(self):
        """The last token's logits WITHOUT a copy: a read-only float32 numpy
        array (a read-only memoryview of format 'f' without numpy) over the
        library's buffer. Valid only until the next prefill, kv_clear,
        kv_truncate or close of this context: after that it shows other
        numbers or freed memory. The view keeps the Context object alive, but
        not the buffer's contents. Use logits() for a copy."""
        with self._lock:
            ptr, n = self._logits_ptr()
            buf = (ctypes.c_float * n).from_address(ctypes.addressof(ptr.contents))
            buf._qsp_owner = self  # keeps the context from being collected under the view
            if _np is not None:
                a = _np.frombuffer(buf, dtype=_np.float32, count=n)
                a.flags.writeable = False
                return a
            return memoryview(buf).toreadonly()

    def greedy_token(self):
        """The argmax of the last logits (lowest id on ties)."""
        t = ctypes.c_int32()
        with self._lock:
            self._check(_lib.qsp_greedy_token(self._p(), ctypes.byref(t)))
        return t.value

    # -- KV cache -------------------------------------------------------------------
    @property
    def kv_length(self):
        n = ctypes.c_uint32()
        with self._lock:
            self._check(_lib.qsp_kv_length(self._p(), ctypes.byref(n)))
        return n.value

    def kv_clear(self):
        with self._lock:
            self._check(_lib.qsp_kv_clear(self._p()))

    def kv_truncate(self, length):
        with self._lock:
            self._check(_lib.qsp_kv_truncate(self._p(), length))

    def info(self):
        i = _ffi.qsp_context_info()
        _lib.qsp_context_info_init(ctypes.byref(i))
        with self._lock:
            self._check(_lib.qsp_context_get_info(self._p(), ctypes.byref(i)))
        return ContextInfo(Backend(i.backend), i.device_index, i.n_threads, _s(i.device_name),
                           i.kv_cache_bytes, i.scratch_bytes)


# ---- Batched prefill (qsp_prefill_batch, since 1.1) -----------------------------------

class Embeddings:
    """Marks hidden states as one piece of prefill_batch: n_tokens x
    hidden_size float32 values (a flat sequence, or a numpy array of any
    shape), as Context.prefill_embeddings takes them. A floating-point numpy
    array is taken as embeddings without this wrapper too."""

    __slots__ = ("hidden", "n_tokens")

    def __init__(self, hidden, n_tokens=None):
        self.hidden = hidden
        self.n_tokens = n_tokens


def _batch_needs():
    """None when the loaded library has qsp_prefill_batch, else why not."""
    if getattr(_lib, "qsp_prefill_batch", None) is not None and version_number() >= 10100:
        return None
    return ("prefill_batch needs libqsp >= 1.1.0 (qsp_prefill_batch); the loaded library is %s. "
            "Everything else works with it; prefill each context on its own, or install libqsp 1.1" % version())


def prefill_batch(pieces):
    """Advances several contexts in one call (qsp_prefill_batch): ``pieces``
    is a sequence of ``(context, tokens)`` pairs, where ``tokens`` is a
    sequence of token ids (an int sequence or an integer numpy array), or
    hidden states (an ``Embeddings``, or a floating-point numpy array of
    n_tokens x hidden_size). One token is a decode step, many a prompt; any
    mix. Afterwards each context has its own logits and greedy token exactly
    as after ``context.prefill(tokens)``.

    The contexts must share one model (the same weights on the same backend
    and device) and appear at most once. Everything is checked before
    anything changes: on an error (a token out of range, a full context, the
    same context twice, ...) this raises QspError whose message names the
    offending sequence ("sequence 1: ...", 0-based) and every context is as it
    was. Needs libqsp >= 1.1: with a 1.0 library this raises
    QspError(Status.UNSUPPORTED) and nothing else changes."""
    pieces = list(pieces)
    why = _batch_needs()
    if why is not None:
        raise QspError(Status.UNSUPPORTED, why)
    seqs = (_ffi.qsp_batch_seq * max(len(pieces), 1))()
    keep = []
    ctxs = {}
    for i, piece in enumerate(pieces):
        try:
            ctx, data = piece
        except (TypeError, ValueError):
            raise TypeError("sequence %d: a piece is a (Context, tokens or embeddings) pair, not %r" % (i, piece))
        if not isinstance(ctx, Context):
            raise TypeError("sequence %d: %r is not a qsp.Context" % (i, ctx))
        ctxs[id(ctx)] = ctx
        s = seqs[i]
        n_tokens = None
        if isinstance(data, Embeddings):
            data, n_tokens = data.hidden, data.n_tokens
        elif not (_np is not None and isinstance(data, _np.ndarray) and data.dtype.kind == "f"):
            arr, s.tokens, s.n_tokens = _int32s(data)
            keep.append(arr)
            continue
        arr, s.embeddings, count = _floats(data)
        keep.append(arr)
        try:
            s.n_tokens = _rows(count, ctx._hidden_size(), n_tokens)
        except ValueError as e:
            raise ValueError("sequence %d: %s" % (i, e))
    # Every context's lock, always in the same order (no deadlock between two
    # batches that share contexts); a context listed twice is locked once
    # (RLock) and refused by the library.
    locked = []
    try:
        for c in sorted(ctxs.values(), key=id):
            c._lock.acquire()
            locked.append(c)
        for i, (ctx, _) in enumerate(pieces):
            if not ctx._ptr:
                raise ValueError("qsp: sequence %d: operation on a closed Context" % i)
            seqs[i].ctx = ctx._ptr
        _check_global(_lib.qsp_prefill_batch(seqs, len(pieces), ctypes.sizeof(_ffi.qsp_batch_seq)))
    finally:
        for c in reversed(locked):
            c._lock.release()


# ---- GGUF model files (qsp_gguf.h) ------------------------------------------------------

def gguf_type_name(ggml_type):
    """The name of a GGML type id ("q4_0", "q6_K", ...); "unknown" otherwise."""
    return _s(_lib.qsp_gguf_type_name(int(ggml_type)))


def _check_gguf(st):
    if st != 0:
        raise QspError(st, _s(_lib.qsp_gguf_last_error()))


GGUFInfo = namedtuple("GGUFInfo", [name for name, _ in _ffi.qsp_gguf_info._fields_ if name != "struct_size"])
GGUFInfo.__doc__ = "What a GGUF file says about itself (the fields of qsp_gguf_info)."

TensorDesc = namedtuple("TensorDesc", "name type type_name shape n_rows n_cols offset n_bytes handle")
TensorDesc.__doc__ = """One tensor of a GGUF file: ``type`` is the GGML type id (a DType when qsp
knows it), ``shape`` the n_dims dimensions as stored (contiguous one first)."""


class ModelFile:
    """An open GGUF model file (memory-mapped, read-only), or a whole file in
    memory (``ModelFile.from_bytes``). Use it in a ``with`` block or call
    ``close()``; a forgotten one is closed when garbage-collected. Contexts
    created from it stay valid after it is closed. Safe to share between
    threads (the file is immutable) as long as none closes it meanwhile."""

    def __init__(self, path):
        self._ptr = None
        self._keep = None
        ptr = _ffi.qsp_gguf_p()
        _check_gguf(_lib.qsp_gguf_open(os.fsencode(path), ctypes.byref(ptr)))
        self._ptr = ptr
        self.path = path

    @classmethod
    def from_bytes(cls, data):
        """Opens a GGUF file held in memory (any bytes-like object; it is
        kept referenced, not copied, while the ModelFile is open)."""
        self = cls.__new__(cls)
        self._ptr = None
        self.path = None
        addr, n, self._keep = _buffer(data)
        ptr = _ffi.qsp_gguf_p()
        _check_gguf(_lib.qsp_gguf_open_memory(addr, n, ctypes.byref(ptr)))
        self._ptr = ptr
        return self

    def close(self):
        """Unmaps the file (idempotent)."""
        ptr, self._ptr = self._ptr, None
        if ptr:
            _lib.qsp_gguf_close(ptr)
        self._keep = None

    def __del__(self, _close=_lib.qsp_gguf_close):
        ptr = getattr(self, "_ptr", None)
        if ptr:
            self._ptr = None
            _close(ptr)

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
            raise ValueError("qsp: operation on a closed ModelFile")
        return self._ptr

    def info(self):
        """A GGUFInfo; strings are str."""
        i = _ffi.qsp_gguf_info()
        _lib.qsp_gguf_info_init(ctypes.byref(i))
        _check_gguf(_lib.qsp_gguf_get_info(self._p(), ctypes.byref(i)))
        values = []
        for name in GGUFInfo._fields:
            v = getattr(i, name)
            values.append(_s(v) if isinstance(v, bytes) else v)
        return GGUFInfo(*values)

    def __len__(self):
        return int(_lib.qsp_gguf_tensor_count(self._p()))

    def _tensor(self, index):
        d = _ffi.qsp_gguf_tensor_desc()
        _lib.qsp_gguf_tensor_desc_init(ctypes.byref(d))
        _check_gguf(_lib.qsp_gguf_tensor_info(self._p(), index, ctypes.byref(d)))
        t = DType(d.type) if d.type in DType._value2member_map_ else d.type
        return TensorDesc(_s(d.name), t, _s(d.type_name), tuple(d.ne[:d.n_dims]), d.n_rows, d.n_cols, d.offset,
                          d.n_bytes, d.handle)

    def tensors(self):
        """The tensor directory, in file order: a list of TensorDesc."""
        return [self._tensor(i) for i in range(len(self))]

    def tensor(self, name):
        """The TensorDesc of the tensor called ``name``; QspError
        (OUT_OF_RANGE) if there is none."""
        index = ctypes.c_uint64()
        _check_gguf(_lib.qsp_gguf_find_tensor(self._p(), name.encode(), ctypes.byref(index)))
        return self._tensor(index.value)

    def context_params(self, *, backend=Backend.AUTO, device_index=0, n_threads=0, context_length=0):
        """The qsp_context_params of this model with these execution options,
        after checking that qsp can run it (QspError UNSUPPORTED /
        BAD_FORMAT otherwise)."""
        p = _ffi.qsp_context_params()
        _lib.qsp_context_params_init(ctypes.byref(p))
        p.backend = int(backend)
        p.device_index = device_index
        p.n_threads = n_threads
        p.max_seq_len = context_length
        _check_gguf(_lib.qsp_gguf_fill_params(self._p(), ctypes.byref(p)))
        return p

    def create_context(self, *, backend=Backend.AUTO, device_index=0, n_threads=0, context_length=0,
                       progress=None):
        """A Context with this model's shape and all of its weights (see
        Context.from_gguf for the arguments)."""
        p = self.context_params(backend=backend, device_index=device_index, n_threads=n_threads,
                                context_length=context_length)
        ptr = _ffi.qsp_context_p()
        _check_global(_lib.qsp_context_create(ctypes.byref(p), ctypes.byref(ptr)))
        raised = []

        def trampoline(done, total, _user):
            # Never lets an exception unwind into C: the first one is kept and
            # raised once qsp_gguf_upload returns; later calls do nothing.
            if raised:
                return
            try:
                progress(done, total)
            except BaseException as e:  # noqa: B902 - KeyboardInterrupt too
                raised.append(e)

        cb = _ffi.qsp_gguf_progress_callback(trampoline) if progress is not None else _ffi.qsp_gguf_progress_callback()
        try:
            st = _lib.qsp_gguf_upload(self._p(), ptr, cb, None)
            if raised:
                raise raised[0]
            _check_gguf(st)
        except BaseException:
            _lib.qsp_context_destroy(ptr)
            raise
        finally:
            del raised[:]  # no cycle through the traceback
        return Context._adopt(ptr, p)


# ---- The tokenizer of a GGUF file (qsp_gguf.h, libqsp >= 1.2) ---------------------------

TokenizerInfo = namedtuple("TokenizerInfo", "kind n_vocab bos_id eos_id eot_id add_bos add_eos max_piece_bytes model "
                                            "pre chat_template unicode_version")
TokenizerInfo.__doc__ = """What a Tokenizer is (the fields of qsp_tokenizer_info): ``kind`` 1 byte-level
BPE ("gpt2"), 2 SentencePiece-style ("llama"); ids of -1 where the model has
none; ``add_bos``/``add_eos`` bools; strings are str ("" where absent)."""

#: qsp_tokenize / qsp_detokenize flags.
TOKENIZE_ADD_SPECIAL = 1
TOKENIZE_PARSE_SPECIAL = 2
DETOKENIZE_SKIP_SPECIAL = 1

_FIRST_IDS = 256      # the first buffer of tokenize, in ids (grown on BUFFER_TOO_SMALL)
_FIRST_BYTES = 1024   # the first buffer of the text functions, in bytes
_BUFFER_TOO_SMALL = -17


def _tokenizer_needs():
    """None when the loaded library has the tokenizer, else why not."""
    if getattr(_lib, "qsp_tokenizer_create", None) is not None and version_number() >= 10200:
        return None
    return ("the tokenizer needs libqsp >= 1.2.0 (qsp_tokenizer_create); the loaded library is %s. "
            "Everything else works with it" % version())


def _sized_text(call, first=_FIRST_BYTES):
    """Runs ``call(buf, capacity, len_ptr)`` with the size-query protocol:
    once with ``first`` bytes, again with the needed length on
    BUFFER_TOO_SMALL. Returns the bytes written."""
    cap = first
    n = ctypes.c_uint64()
    while True:
        buf = ctypes.create_string_buffer(max(cap, 1))
        st = call(buf, cap, ctypes.byref(n))
        if st == _BUFFER_TOO_SMALL and n.value > cap:
            cap = n.value
            continue
        _check_gguf(st)
        return buf.raw[:n.value]


def _utf8(b):
    return b.decode("utf-8", "replace")


class Tokenizer:
    """The tokenizer a GGUF file carries (libqsp >= 1.2): text to token ids and
    back. Build it from a ModelFile (``model_file.tokenizer()``) or a path;
    it copies what it needs, so the file may be closed afterwards. Use it in a
    ``with`` block or call ``close()`` (closing it closes its TextStreams); a
    forgotten one is freed when garbage-collected. Immutable: safe to share
    between threads as long as none closes it meanwhile.

    Raises QspError: UNSUPPORTED for a file without a tokenizer
    (tokenizer.ggml.model absent or "none") or one qsp does not implement,
    BAD_FORMAT for a malformed vocabulary; with a library older than 1.2,
    UNSUPPORTED naming the version needed."""

    def __init__(self, source):
        self._ptr = None
        self._streams = weakref.WeakSet()
        why = _tokenizer_needs()
        if why is not None:
            raise QspError(Status.UNSUPPORTED, why)
        if isinstance(source, ModelFile):
            self._create(source)
        else:
            with ModelFile(source) as f:
                self._create(f)

    def _create(self, f):
        ptr = _ffi.qsp_tokenizer_p()
        _check_gguf(_lib.qsp_tokenizer_create(f._p(), ctypes.byref(ptr)))
        self._ptr = ptr

    def close(self):
        """Frees the tokenizer and its open streams (idempotent)."""
        for s in list(self._streams):
            s.close()
        ptr, self._ptr = self._ptr, None
        if ptr:
            _lib.qsp_tokenizer_destroy(ptr)

    def __del__(self):
        ptr = getattr(self, "_ptr", None)
        if ptr:
            self._ptr = None
            destroy = getattr(_lib, "qsp_tokenizer_destroy", None)
            if destroy is not None:
                destroy(ptr)

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
            raise ValueError("qsp: operation on a closed Tokenizer")
        return self._ptr

    def info(self):
        """A TokenizerInfo."""
        i = _ffi.qsp_tokenizer_info()
        _lib.qsp_tokenizer_info_init(ctypes.byref(i))
        _check_gguf(_lib.qsp_tokenizer_get_info(self._p(), ctypes.byref(i)))
        return TokenizerInfo(i.kind, i.n_vocab, i.bos_id, i.eos_id, i.eot_id, bool(i.add_bos), bool(i.add_eos),
                             i.max_piece_bytes, _s(i.model), _s(i.pre), _s(i.chat_template), _s(i.unicode_version))

    @property
    def n_vocab(self):
        return self.info().n_vocab

    def tokenize(self, text, add_special=True, parse_special=False):
        """Token ids (a list of int) of ``text``: a str (encoded as UTF-8) or
        bytes (UTF-8; invalid sequences are tokenized as U+FFFD).
        ``add_special``: add BOS/EOS as the model does; ``parse_special``:
        text spelling a control token ("<|im_end|>") becomes that token."""
        data = text.encode("utf-8") if isinstance(text, str) else bytes(text)
        flags = (TOKENIZE_ADD_SPECIAL if add_special else 0) | (TOKENIZE_PARSE_SPECIAL if parse_special else 0)
        p = self._p()
        cap = _FIRST_IDS
        n = ctypes.c_uint64()
        while True:
            ids = (ctypes.c_int32 * max(cap, 1))()
            st = _lib.qsp_tokenize(p, data, len(data), flags, ids, cap, ctypes.byref(n))
            if st == _BUFFER_TOO_SMALL and n.value > cap:
                cap = n.value
                continue
            _check_gguf(st)
            return ids[:n.value]

    def _ids(self, ids):
        ids = [int(i) for i in ids]
        return (ctypes.c_int32 * max(len(ids), 1))(*ids), len(ids)

    def detokenize_bytes(self, ids, skip_special=False):
        """The text of ``ids`` as raw bytes (what the ids spell, which may be
        invalid UTF-8). ``skip_special``: control tokens give no text."""
        arr, n = self._ids(ids)
        p = self._p()
        flags = DETOKENIZE_SKIP_SPECIAL if skip_special else 0
        return _sized_text(lambda buf, cap, ln: _lib.qsp_detokenize(p, arr, n, flags, buf, cap, ln))

    def detokenize(self, ids, skip_special=False):
        """The text of ``ids`` as str (invalid UTF-8 becomes U+FFFD)."""
        return _utf8(self.detokenize_bytes(ids, skip_special))

    def token_piece(self, token_id, skip_special=False):
        """The bytes of one token on its own (possibly part of a UTF-8
        sequence); QspError OUT_OF_RANGE for an id outside 0..n_vocab-1."""
        p = self._p()
        flags = DETOKENIZE_SKIP_SPECIAL if skip_special else 0
        return _sized_text(lambda buf, cap, ln: _lib.qsp_token_piece(p, int(token_id), flags, buf, cap, ln), 64)

    def stream(self, skip_special=False):
        """A TextStream for decoding generated ids one at a time."""
        return TextStream(self, skip_special)


class TextStream:
    """Streaming detokenization (qsp_text_stream): ``push(id)`` returns the
    text that became complete (a str; the bytes of an unfinished UTF-8
    character are held back until a later token completes it), ``flush()``
    what is held back and starts over; all pushes plus the flush equal
    ``detokenize`` of the same ids. ``push_bytes``/``flush_bytes`` give raw
    bytes. Use it in a ``with`` block or call ``close()``; it is closed with
    its Tokenizer. One thread at a time."""

    def __init__(self, tokenizer, skip_special=False):
        self._ptr = None
        ptr = _ffi.qsp_text_stream_p()
        _check_gguf(_lib.qsp_text_stream_create(tokenizer._p(), DETOKENIZE_SKIP_SPECIAL if skip_special else 0,
                                                ctypes.byref(ptr)))
        self._ptr = ptr
        self._tokenizer = tokenizer  # must outlive the stream
        tokenizer._streams.add(self)
        self._first = tokenizer.info().max_piece_bytes + 4

    def close(self):
        ptr, self._ptr = self._ptr, None
        if ptr:
            _lib.qsp_text_stream_destroy(ptr)
        self._tokenizer = None

    def __del__(self):
        ptr = getattr(self, "_ptr", None)
        if ptr:
            self._ptr = None
            destroy = getattr(_lib, "qsp_text_stream_destroy", None)
            if destroy is not None:
                destroy(ptr)

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
            raise ValueError("qsp: operation on a closed TextStream")
        return self._ptr

    def push_bytes(self, token_id):
        p = self._p()
        return _sized_text(lambda buf, cap, ln: _lib.qsp_text_stream_push(p, int(token_id), buf, cap, ln), self._first)

    def flush_bytes(self):
        p = self._p()
        return _sized_text(lambda buf, cap, ln: _lib.qsp_text_stream_flush(p, buf, cap, ln), self._first)

    def push(self, token_id):
        return _utf8(self.push_bytes(token_id))

    def flush(self):
        return _utf8(self.flush_bytes())


def _model_file_tokenizer(self):
    """The Tokenizer of this file (see Tokenizer)."""
    return Tokenizer(self)


ModelFile.tokenizer = _model_file_tokenizer
