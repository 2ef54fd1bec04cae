"""GGUF model files (qsp_gguf.h): ModelFile, its info and tensor directory,
and contexts made from it."""

import ctypes
import os
from collections import namedtuple

from . import _ffi
from ._context import Context, _buffer
from ._status import Backend, DType, QspError, _Handle, _check_global, _s

_lib = _ffi.lib


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


class ModelFile(_Handle, free="qsp_gguf_close"):
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

    def context_params(self, *, backend=Backend.AUTO, device_index=0, n_threads=0, context_length=0,
                       n_devices=0, device_mask=0):
        """The qsp_context_params of this model with these execution options,
        after checking that qsp can run it (QspError UNSUPPORTED /
        BAD_FORMAT otherwise)."""
        p = _ffi.qsp_context_params()
        _lib.qsp_context_params_init(ctypes.byref(p))
        p.backend = int(backend)
        p.device_index = device_index
        p.n_threads = n_threads
        p.max_seq_len = context_length
        p.n_devices = n_devices
        p.device_mask = device_mask
        _check_gguf(_lib.qsp_gguf_fill_params(self._p(), ctypes.byref(p)))
        return p

    def create_context(self, *, backend=Backend.AUTO, device_index=0, n_threads=0, context_length=0,
                       n_devices=0, device_mask=0, progress=None):
        """A Context with this model's shape and all of its weights (see
        Context.from_gguf for the arguments)."""
        p = self.context_params(backend=backend, device_index=device_index, n_threads=n_threads,
                                context_length=context_length, n_devices=n_devices, device_mask=device_mask)
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

