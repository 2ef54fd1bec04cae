"""Context: a model shape, its weights and a KV cache (qsp.h); Tensor and
LayerWeights, the weights it is given."""

import ctypes
import threading
from collections import namedtuple

from . import _ffi
from ._status import Backend, DType, QspError, _Handle, _check_global, _s, dtype_name

try:  # optional
    import numpy as _np
except ImportError:  # pragma: no cover - exercised only without numpy
    _np = None

_lib = _ffi.lib

ContextInfo = namedtuple("ContextInfo", "backend device_index n_threads device_name kv_cache_bytes scratch_bytes")


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
                 ("struct_size", "reserved1", "log_callback", "log_user_data")]


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


class Context(_Handle, free="qsp_context_destroy"):
    """A qsp context: a model shape, its weights and a KV cache.

    ``Context(n_layers=..., hidden_size=..., ...)`` takes every field of
    qsp_context_params by name (``rms_eps``, ``rope_theta``, ``rope_style``,
    ``qk_norm``, ``backend``, ``device_index``, ``n_threads``, ``n_devices``,
    ``device_mask``, ``log_level`` have the library's defaults). Close it
    with ``close()`` or a ``with`` block; an unreachable context is also
    freed by the garbage collector.

    Tensor parallelism (libqsp >= 1.3): ``n_devices=N`` splits the model
    into N shards (0 or 1: unsplit, the default). The CPU runs the shards
    (1, 2, 4 or 8) one after another, bit-identical to the unsplit model;
    CUDA runs them in turn on one GPU (a one-bit ``device_mask``) or a shard
    per GPU through NCCL (without NCCL: QspError, UNSUPPORTED), and a shape
    that does not divide raises QspError (SHAPE). ``device_mask`` names the CUDA
    devices, bit i = ordinal i (0: N devices from ``device_index`` on).
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
                  n_devices=0, device_mask=0, progress=None):
        """A context holding the whole model of the GGUF file at ``path``,
        ready to prefill. ``context_length``: the KV-cache capacity in tokens
        (0: the file's context length, at most 8192). ``n_devices`` /
        ``device_mask``: the shards (see Context). ``progress(done_bytes,
        total_bytes)`` is called during the upload; what it raises is raised
        here once the upload returns, and no context is left behind.
        Errors (a missing, truncated, malformed or unsupported file) raise
        QspError with the library's status and message."""
        from ._gguf import ModelFile  # here: qsp._gguf imports this module
        with ModelFile(path) as f:
            return f.create_context(backend=backend, device_index=device_index, n_threads=n_threads,
                                    context_length=context_length, n_devices=n_devices,
                                    device_mask=device_mask, progress=progress)

    # -- lifetime -----------------------------------------------------------
    def close(self):
        """Frees the context (idempotent). Logit views become invalid."""
        with self._lock:
            ptr, self._ptr = self._ptr, None
            if ptr:
                _lib.qsp_context_destroy(ptr)

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
