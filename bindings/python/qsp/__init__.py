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

from . import _ffi
from ._ffi import ABI_VERSION, LibraryError
from ._status import (Status, DType, Backend, RopeStyle, LogLevel, QspError, version, version_number, abi_version,
                      status_string, dtype_size, dtype_name, backend_available, CacheStats, cache_stats)
from ._context import _np, Tensor, LayerWeights, Context, ContextInfo
from ._batch import Embeddings, prefill_batch
from ._gguf import ModelFile, GGUFInfo, TensorDesc, gguf_type_name
from ._tokenizer import (Tokenizer, TokenizerInfo, TextStream, TOKENIZE_ADD_SPECIAL, TOKENIZE_PARSE_SPECIAL,
                         DETOKENIZE_SKIP_SPECIAL)

_lib = _ffi.lib

__all__ = [
    "ABI_VERSION", "LibraryError", "QspError", "Status", "DType", "Backend", "RopeStyle", "LogLevel",
    "Tensor", "LayerWeights", "Context", "ContextInfo", "CacheStats", "cache_stats", "dtype_size",
    "dtype_name", "status_string", "backend_available", "version", "version_number", "abi_version",
    "ModelFile", "GGUFInfo", "TensorDesc", "gguf_type_name", "Embeddings", "prefill_batch",
    "Tokenizer", "TokenizerInfo", "TextStream",
]

# The classes are qsp.X wherever they are defined (reprs, tracebacks, pickling).
for _name in __all__:
    _obj = globals()[_name]
    if isinstance(_obj, type) and _obj.__module__ in ("qsp._status", "qsp._context", "qsp._batch", "qsp._gguf",
                                                      "qsp._tokenizer"):
        _obj.__module__ = __name__
del _name, _obj
