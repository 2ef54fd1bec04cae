"""Low-level ctypes mirror of include/qsp/qsp.h and qsp_gguf.h (ABI 1).

Everything here follows the header exactly: the structs are laid out as the C
compiler lays them out (ctypes applies the platform's C alignment rules), and
the prototypes give ctypes the exact argument and return types. The public,
safe API is the package ``qsp`` (``qsp/__init__.py`` and the modules it
re-exports); use this module only for what that one does not wrap.
"""

import ctypes
import ctypes.util
import os
import subprocess

#: The ABI major version this binding was written for (QSP_ABI_VERSION).
ABI_VERSION = 1

qsp_status = ctypes.c_int32
qsp_log_callback = ctypes.CFUNCTYPE(None, ctypes.c_int32, ctypes.c_char_p, ctypes.c_void_p)


class qsp_context(ctypes.Structure):
    """Opaque; only ever used through a pointer."""


qsp_context_p = ctypes.POINTER(qsp_context)


class qsp_context_params(ctypes.Structure):
    _fields_ = [
        ("struct_size", ctypes.c_uint32),
        ("n_layers", ctypes.c_uint32),
        ("hidden_size", ctypes.c_uint32),
        ("intermediate_size", ctypes.c_uint32),
        ("n_heads", ctypes.c_uint32),
        ("n_kv_heads", ctypes.c_uint32),
        ("head_dim", ctypes.c_uint32),
        ("vocab_size", ctypes.c_uint32),
        ("max_seq_len", ctypes.c_uint32),
        ("rms_eps", ctypes.c_float),
        ("rope_theta", ctypes.c_float),
        ("rope_style", ctypes.c_int32),
        ("qk_norm", ctypes.c_int32),
        ("backend", ctypes.c_int32),
        ("device_index", ctypes.c_int32),
        ("n_threads", ctypes.c_int32),
        ("n_devices", ctypes.c_uint32),
        ("device_mask", ctypes.c_uint32),
        ("log_callback", qsp_log_callback),
        ("log_user_data", ctypes.c_void_p),
        ("log_level", ctypes.c_int32),
        ("reserved1", ctypes.c_uint32),
    ]


class qsp_context_info(ctypes.Structure):
    _fields_ = [
        ("struct_size", ctypes.c_uint32),
        ("backend", ctypes.c_int32),
        ("device_index", ctypes.c_int32),
        ("n_threads", ctypes.c_int32),
        ("device_name", ctypes.c_char * 128),
        ("kv_cache_bytes", ctypes.c_uint64),
        ("scratch_bytes", ctypes.c_uint64),
    ]


class qsp_tensor(ctypes.Structure):
    _fields_ = [
        ("handle", ctypes.c_uint64),
        ("dtype", ctypes.c_int32),
        ("reserved", ctypes.c_uint32),
        ("n_rows", ctypes.c_uint64),
        ("n_cols", ctypes.c_uint64),
        ("data", ctypes.c_void_p),
        ("n_bytes", ctypes.c_uint64),
    ]


LAYER_SLOTS = ("attn_norm", "wq", "wk", "wv", "q_norm", "k_norm", "wo", "ffn_norm", "w_gate", "w_up", "w_down")


class qsp_layer_weights(ctypes.Structure):
    _fields_ = [("struct_size", ctypes.c_uint32), ("reserved", ctypes.c_uint32)] + [
        (name, qsp_tensor) for name in LAYER_SLOTS
    ]


class qsp_output_weights(ctypes.Structure):
    _fields_ = [
        ("struct_size", ctypes.c_uint32),
        ("reserved", ctypes.c_uint32),
        ("norm", qsp_tensor),
        ("lm_head", qsp_tensor),
    ]


class qsp_cache_stats(ctypes.Structure):
    _fields_ = [
        ("struct_size", ctypes.c_uint32),
        ("reserved", ctypes.c_uint32),
        ("n_tensors", ctypes.c_uint64),
        ("n_bytes", ctypes.c_uint64),
        ("n_uploads", ctypes.c_uint64),
        ("n_hits", ctypes.c_uint64),
    ]


class qsp_batch_seq(ctypes.Structure):
    """One piece of a qsp_prefill_batch call (since 1.1)."""
    _fields_ = [
        ("ctx", qsp_context_p),
        ("tokens", ctypes.POINTER(ctypes.c_int32)),
        ("embeddings", ctypes.POINTER(ctypes.c_float)),
        ("n_tokens", ctypes.c_uint32),
        ("flags", ctypes.c_uint32),
    ]


class qsp_gguf(ctypes.Structure):
    """Opaque; only ever used through a pointer."""


qsp_gguf_p = ctypes.POINTER(qsp_gguf)
qsp_gguf_progress_callback = ctypes.CFUNCTYPE(None, ctypes.c_uint64, ctypes.c_uint64, ctypes.c_void_p)


class qsp_gguf_info(ctypes.Structure):
    _fields_ = [
        ("struct_size", ctypes.c_uint32),
        ("version", ctypes.c_uint32),
        ("file_size", ctypes.c_uint64),
        ("tensor_count", ctypes.c_uint64),
        ("kv_count", ctypes.c_uint64),
        ("data_offset", ctypes.c_uint64),
        ("weight_bytes", ctypes.c_uint64),
        ("alignment", ctypes.c_uint32),
        ("known_architecture", ctypes.c_int32),
        ("architecture", ctypes.c_char * 32),
        ("name", ctypes.c_char * 96),
        ("n_layers", ctypes.c_uint32),
        ("hidden_size", ctypes.c_uint32),
        ("intermediate_size", ctypes.c_uint32),
        ("n_heads", ctypes.c_uint32),
        ("n_kv_heads", ctypes.c_uint32),
        ("head_dim", ctypes.c_uint32),
        ("vocab_size", ctypes.c_uint32),
        ("context_length", ctypes.c_uint32),
        ("rms_eps", ctypes.c_float),
        ("rope_theta", ctypes.c_float),
        ("rope_style", ctypes.c_int32),
        ("qk_norm", ctypes.c_int32),
        ("tied_embeddings", ctypes.c_int32),
        ("file_type", ctypes.c_int32),
    ]


class qsp_gguf_tensor_desc(ctypes.Structure):
    _fields_ = [
        ("struct_size", ctypes.c_uint32),
        ("type", ctypes.c_int32),
        ("n_dims", ctypes.c_uint32),
        ("reserved", ctypes.c_uint32),
        ("name", ctypes.c_char_p),
        ("type_name", ctypes.c_char_p),
        ("ne", ctypes.c_uint64 * 4),
        ("n_rows", ctypes.c_uint64),
        ("n_cols", ctypes.c_uint64),
        ("offset", ctypes.c_uint64),
        ("n_bytes", ctypes.c_uint64),
        ("handle", ctypes.c_uint64),
        ("data", ctypes.c_void_p),
    ]


class qsp_tokenizer(ctypes.Structure):
    """Opaque; only ever used through a pointer."""


class qsp_text_stream(ctypes.Structure):
    """Opaque; only ever used through a pointer."""


qsp_tokenizer_p = ctypes.POINTER(qsp_tokenizer)
qsp_text_stream_p = ctypes.POINTER(qsp_text_stream)


class qsp_tokenizer_info(ctypes.Structure):
    _fields_ = [
        ("struct_size", ctypes.c_uint32),
        ("kind", ctypes.c_int32),
        ("n_vocab", ctypes.c_uint32),
        ("bos_id", ctypes.c_int32),
        ("eos_id", ctypes.c_int32),
        ("eot_id", ctypes.c_int32),
        ("add_bos", ctypes.c_int32),
        ("add_eos", ctypes.c_int32),
        ("max_piece_bytes", ctypes.c_uint32),
        ("model", ctypes.c_char_p),
        ("pre", ctypes.c_char_p),
        ("chat_template", ctypes.c_char_p),
        ("unicode_version", ctypes.c_char_p),
    ]


#: Every mirrored struct, by its C name (the layout test walks these).
STRUCTS = {
    cls.__name__: cls
    for cls in (qsp_context_params, qsp_context_info, qsp_tensor, qsp_layer_weights, qsp_output_weights, qsp_cache_stats,
                qsp_batch_seq, qsp_gguf_info, qsp_gguf_tensor_desc)
}

_P = ctypes.POINTER
_u32, _i32, _u64 = ctypes.c_uint32, ctypes.c_int32, ctypes.c_uint64

# name: (restype, argtypes)
_PROTOTYPES = {
    "qsp_version_string": (ctypes.c_char_p, []),
    "qsp_version_number": (_u32, []),
    "qsp_abi_version": (_u32, []),
    "qsp_status_string": (ctypes.c_char_p, [qsp_status]),
    "qsp_last_error": (ctypes.c_char_p, []),
    "qsp_set_log_callback": (None, [qsp_log_callback, ctypes.c_void_p, _i32]),
    "qsp_dtype_size": (_u64, [_i32, _u64, _u64]),
    "qsp_dtype_name": (ctypes.c_char_p, [_i32]),
    "qsp_backend_available": (_i32, [_i32]),
    "qsp_context_params_init": (None, [_P(qsp_context_params)]),
    "qsp_context_create": (qsp_status, [_P(qsp_context_params), _P(qsp_context_p)]),
    "qsp_context_destroy": (None, [qsp_context_p]),
    "qsp_context_last_error": (ctypes.c_char_p, [qsp_context_p]),
    "qsp_context_info_init": (None, [_P(qsp_context_info)]),
    "qsp_context_get_info": (qsp_status, [qsp_context_p, _P(qsp_context_info)]),
    "qsp_layer_weights_init": (None, [_P(qsp_layer_weights)]),
    "qsp_upload_layer": (qsp_status, [qsp_context_p, _u32, _P(qsp_layer_weights)]),
    "qsp_upload_embedding": (qsp_status, [qsp_context_p, _P(qsp_tensor)]),
    "qsp_output_weights_init": (None, [_P(qsp_output_weights)]),
    "qsp_upload_output": (qsp_status, [qsp_context_p, _P(qsp_output_weights)]),
    "qsp_cache_stats_init": (None, [_P(qsp_cache_stats)]),
    "qsp_cache_stats_get": (qsp_status, [_i32, _i32, _P(qsp_cache_stats)]),
    "qsp_prefill": (qsp_status, [qsp_context_p, _P(ctypes.c_int32), _u32]),
    "qsp_prefill_embeddings": (qsp_status, [qsp_context_p, _P(ctypes.c_float), _u32]),
    "qsp_get_logits": (qsp_status, [qsp_context_p, _P(_P(ctypes.c_float)), _P(_u32)]),
    "qsp_copy_logits": (qsp_status, [qsp_context_p, _P(ctypes.c_float), _u64]),
    "qsp_greedy_token": (qsp_status, [qsp_context_p, _P(ctypes.c_int32)]),
    "qsp_kv_length": (qsp_status, [qsp_context_p, _P(_u32)]),
    "qsp_kv_clear": (qsp_status, [qsp_context_p]),
    "qsp_kv_truncate": (qsp_status, [qsp_context_p, _u32]),
    # qsp_gguf.h
    "qsp_gguf_last_error": (ctypes.c_char_p, []),
    "qsp_gguf_open": (qsp_status, [ctypes.c_char_p, _P(qsp_gguf_p)]),
    "qsp_gguf_open_memory": (qsp_status, [ctypes.c_void_p, _u64, _P(qsp_gguf_p)]),
    "qsp_gguf_close": (None, [qsp_gguf_p]),
    "qsp_gguf_info_init": (None, [_P(qsp_gguf_info)]),
    "qsp_gguf_get_info": (qsp_status, [qsp_gguf_p, _P(qsp_gguf_info)]),
    "qsp_gguf_tensor_count": (_u64, [qsp_gguf_p]),
    "qsp_gguf_tensor_desc_init": (None, [_P(qsp_gguf_tensor_desc)]),
    "qsp_gguf_tensor_info": (qsp_status, [qsp_gguf_p, _u64, _P(qsp_gguf_tensor_desc)]),
    "qsp_gguf_find_tensor": (qsp_status, [qsp_gguf_p, ctypes.c_char_p, _P(_u64)]),
    "qsp_gguf_type_name": (ctypes.c_char_p, [_i32]),
    "qsp_gguf_fill_params": (qsp_status, [qsp_gguf_p, _P(qsp_context_params)]),
    "qsp_gguf_upload": (qsp_status, [qsp_gguf_p, qsp_context_p, qsp_gguf_progress_callback, ctypes.c_void_p]),
    "qsp_context_create_from_gguf": (qsp_status, [ctypes.c_char_p, _P(qsp_context_params), _P(qsp_context_p)]),
}


#: Functions added after 1.0: (restype, argtypes, the version that added them).
#: A library without one still loads (every 1.0 feature works); calling the
#: binding's wrapper raises QspError(UNSUPPORTED) naming the version needed.
_PROTOTYPES_SINCE = {
    "qsp_prefill_batch": (qsp_status, [_P(qsp_batch_seq), _u32, _u32], 10100),
    # the tokenizer of qsp_gguf.h (1.2)
    "qsp_tokenizer_create": (qsp_status, [qsp_gguf_p, _P(qsp_tokenizer_p)], 10200),
    "qsp_tokenizer_destroy": (None, [qsp_tokenizer_p], 10200),
    "qsp_tokenizer_info_init": (None, [_P(qsp_tokenizer_info)], 10200),
    "qsp_tokenizer_get_info": (qsp_status, [qsp_tokenizer_p, _P(qsp_tokenizer_info)], 10200),
    "qsp_tokenize": (qsp_status, [qsp_tokenizer_p, ctypes.c_char_p, _u64, _u32, _P(ctypes.c_int32), _u64, _P(_u64)],
                     10200),
    "qsp_token_piece": (qsp_status, [qsp_tokenizer_p, _i32, _u32, ctypes.c_void_p, _u64, _P(_u64)], 10200),
    "qsp_detokenize": (qsp_status, [qsp_tokenizer_p, _P(ctypes.c_int32), _u64, _u32, ctypes.c_void_p, _u64,
                                    _P(_u64)], 10200),
    "qsp_text_stream_create": (qsp_status, [qsp_tokenizer_p, _u32, _P(qsp_text_stream_p)], 10200),
    "qsp_text_stream_destroy": (None, [qsp_text_stream_p], 10200),
    "qsp_text_stream_push": (qsp_status, [qsp_text_stream_p, _i32, ctypes.c_void_p, _u64, _P(_u64)], 10200),
    "qsp_text_stream_flush": (qsp_status, [qsp_text_stream_p, ctypes.c_void_p, _u64, _P(_u64)], 10200),
}


class LibraryError(ImportError):
    """libqsp could not be found, or is not the ABI this binding speaks."""


def _pkg_config_library():
    """libqsp.so.N in the libdir that pkg-config's qsp.pc names, or None."""
    try:
        out = subprocess.run(["pkg-config", "--variable=libdir", "qsp"], stdout=subprocess.PIPE,
                             stderr=subprocess.DEVNULL, timeout=10, check=True).stdout.decode().strip()
    except (OSError, subprocess.SubprocessError):
        return None
    path = os.path.join(out, "libqsp.so.%d" % ABI_VERSION) if out else None
    return path if path and os.path.exists(path) else None


def _candidates():
    """Where to look, in order; pkg-config runs only if the loader found nothing."""
    env = os.environ.get("QSP_LIBRARY")
    if env:
        # An explicit choice is never second-guessed by a fallback.
        yield env
        return
    names = ["libqsp.so.%d" % ABI_VERSION]
    yield names[0]
    found = ctypes.util.find_library("qsp")
    if found and found not in names:
        names.append(found)
        yield found
    pc = _pkg_config_library()
    if pc and pc not in names:
        yield pc


def load_library():
    """Loads libqsp and checks its ABI version; raises LibraryError."""
    errors = []
    lib = None
    for name in _candidates():
        try:
            lib = ctypes.CDLL(name)
            break
        except OSError as e:
            errors.append("%s: %s" % (name, e))
    if lib is None:
        raise LibraryError(
            "qsp: cannot find libqsp: set QSP_LIBRARY to the full path of libqsp.so.%d, put it on the "
            "loader's path (LD_LIBRARY_PATH, ldconfig) or install qsp.pc for pkg-config; tried: %s"
            % (ABI_VERSION, "; ".join(errors))
        )
    path = getattr(lib, "_name", "?")
    try:
        abi_fn = lib.qsp_abi_version
    except AttributeError:
        raise LibraryError("qsp: %s has no qsp_abi_version(): not libqsp, or far too old" % path)
    abi_fn.restype = ctypes.c_uint32
    abi_fn.argtypes = []
    abi = abi_fn()
    if abi != ABI_VERSION:
        raise LibraryError(
            "qsp: ABI mismatch: %s has ABI version %d, but this Python binding was written for ABI "
            "version %d; install a matching libqsp.so.%d or a binding for ABI %d" % (path, abi, ABI_VERSION, ABI_VERSION, abi)
        )
    for name, (restype, argtypes) in _PROTOTYPES.items():
        try:
            fn = getattr(lib, name)
        except AttributeError:
            raise LibraryError("qsp: %s lacks %s(), which ABI %d has" % (path, name, ABI_VERSION))
        fn.restype = restype
        fn.argtypes = argtypes
    for name, (restype, argtypes, _since) in _PROTOTYPES_SINCE.items():
        fn = getattr(lib, name, None)
        if fn is not None:
            fn.restype = restype
            fn.argtypes = argtypes
    return lib


lib = load_library()
