"""Tests of the Python binding (run by ctest as bindings.python).

Environment (set by bindings/CMakeLists.txt):
  QSP_LIBRARY          the libqsp.so.1 under test
  QSP_REF_LOGITS       logits written by bindings/common/ref_logits.c
  QSP_REF_LAYOUT       sizeof/offsetof of the public structs, from the same program
  QSP_FAKE_ABI_LIBRARY a stub libqsp.so.1 that reports ABI version 2
"""

import array
import ctypes
import gc
import os
import struct
import subprocess
import sys

import pytest

import qsp
from qsp import _ffi
from tiny_model import PARAMS, TOKENS, TinyModel

try:
    import numpy as np
except ImportError:
    np = None


def _env_file(name):
    path = os.environ.get(name)
    if not path:
        pytest.skip("%s is not set (ctest sets it)" % name)
    return path


@pytest.fixture(scope="module")
def model():
    return TinyModel()


@pytest.fixture(scope="module")
def ref_bytes():
    with open(_env_file("QSP_REF_LOGITS"), "rb") as f:
        data = f.read()
    assert len(data) == 4 * PARAMS["vocab_size"]
    return data


def _raw(logits):
    """The float32 bytes of logits: a list, a numpy array or a memoryview."""
    if isinstance(logits, list):
        return struct.pack("<%df" % len(logits), *logits)
    return bytes(memoryview(logits))


def test_versions():
    assert qsp.abi_version() == qsp.ABI_VERSION == 1
    assert qsp.version().count(".") == 2
    assert qsp.version_number() >= 10000
    assert qsp.status_string(qsp.Status.OUT_OF_RANGE) == "out of range"
    assert qsp.status_string(12345) == "unknown status"
    assert qsp.dtype_name(qsp.DType.Q4_0) == "q4_0"
    assert qsp.dtype_size(qsp.DType.Q8_0, 2, 64) == 2 * 2 * 34
    assert qsp.dtype_size(qsp.DType.Q8_0, 2, 33) == 0
    assert qsp.backend_available(qsp.Backend.CPU)


def test_struct_layout_matches_c():
    want = {}
    for env in ("QSP_REF_LAYOUT", "QSP_GGUF_REF_LAYOUT"):  # qsp.h's structs, qsp_gguf.h's
        with open(_env_file(env)) as f:
            for line in f:
                name, value = line.split()
                want[name] = int(value)
    checked = 0
    for cname, cls in _ffi.STRUCTS.items():
        assert ctypes.sizeof(cls) == want[cname], cname
        for field, _ in cls._fields_:
            assert getattr(cls, field).offset == want["%s.%s" % (cname, field)], (cname, field)
            checked += 1
    assert checked + len(_ffi.STRUCTS) == len(want), "the C program lists fields this mirror lacks"


def test_logits_bit_exact(model, ref_bytes):
    with model.context() as ctx:
        info = ctx.info()
        assert info.backend == qsp.Backend.CPU and info.n_threads == 2
        ctx.prefill(TOKENS)
        assert ctx.kv_length == len(TOKENS)
        got = ctx.logits()
        assert len(got) == PARAMS["vocab_size"]
        assert _raw(got) == ref_bytes
        assert _raw(ctx.logits_view()) == ref_bytes
        ref = struct.unpack("<%df" % PARAMS["vocab_size"], ref_bytes)
        best = max(range(len(ref)), key=lambda i: (ref[i], -i))
        assert ctx.greedy_token() == best


def test_chunked_prefill_and_kv(model, ref_bytes):
    with model.context() as ctx:
        ctx.prefill(TOKENS[:4])
        ctx.prefill(TOKENS[4:])
        assert _raw(ctx.logits_view()) == ref_bytes
        ctx.kv_truncate(4)
        assert ctx.kv_length == 4
        with pytest.raises(qsp.QspError) as e:
            ctx.logits()
        assert e.value.status == qsp.Status.NOT_READY
        ctx.prefill(TOKENS[4:])
        assert _raw(ctx.logits()) == ref_bytes
        ctx.kv_clear()
        assert ctx.kv_length == 0


def test_numpy_view_has_no_copy(model):
    if np is None:
        pytest.skip("numpy is not installed")
    with model.context() as ctx:
        ctx.prefill(TOKENS)
        a = ctx.logits_view()
        b = ctx.logits_view()
        assert a.ctypes.data == b.ctypes.data  # both point at the library's buffer
        assert not a.flags.writeable and not a.flags.owndata
        c = ctx.logits()
        assert c.flags.owndata and c.ctypes.data != a.ctypes.data


def test_weights_from_other_buffers(model, ref_bytes):
    # bytearray, memoryview and array.array work as well as bytes (the cache
    # is keyed by handle, so use a fresh process-unique handle set).
    w = model.layers[0]
    flavours = [bytearray, memoryview, lambda b: array.array("B", b)]
    for i, make in enumerate(flavours):
        t = w.attn_norm
        alt = qsp.Tensor(0x7E57000000000000 + i, t.dtype, t.n_rows, t.n_cols, make(t.data))
        with model.context() as ctx:
            lw = qsp.LayerWeights(**{s: getattr(w, s) for s in qsp.LayerWeights.SLOTS})
            lw.attn_norm = alt
            ctx.upload_layer(0, lw)
            ctx.prefill(TOKENS)
            assert _raw(ctx.logits()) == ref_bytes


def test_errors_carry_status_and_message(model):
    with model.context() as ctx:
        with pytest.raises(qsp.QspError) as e:
            ctx.upload_layer(5, model.layers[0])
        assert e.value.status == qsp.Status.OUT_OF_RANGE
        assert e.value.message == "layer 5 out of range (the model has 2 layers)"
        assert e.value.message == ctx.last_error
        assert "out of range" in str(e.value) and "layer 5" in str(e.value)

        with pytest.raises(qsp.QspError) as e:
            ctx.prefill([1, 256])
        assert e.value.status == qsp.Status.OUT_OF_RANGE
        assert "256" in e.value.message
        assert ctx.kv_length == 0  # a failed call changes nothing

        with pytest.raises(qsp.QspError) as e:
            ctx.prefill([])
        assert e.value.status == qsp.Status.INVALID_ARGUMENT

        bad = qsp.Tensor(model.norm.handle, qsp.DType.F32, 1, 64, model.norm.data[:-4])
        with pytest.raises(qsp.QspError) as e:
            ctx.upload_output(bad, model.lm_head)
        assert e.value.status == qsp.Status.DTYPE
        assert "output_norm" in e.value.message

    # A failing global call: the message comes from qsp_last_error().
    with pytest.raises(qsp.QspError) as e:
        qsp.Context(**dict(PARAMS, n_layers=0))
    assert e.value.status == qsp.Status.SHAPE
    assert e.value.message == "n_layers must be > 0"
    with pytest.raises(qsp.QspError) as e:
        qsp.cache_stats(backend=qsp.Backend.AUTO)
    assert e.value.status == qsp.Status.INVALID_ARGUMENT

    c = qsp.Context(**PARAMS)
    c.close()
    c.close()  # idempotent
    with pytest.raises(ValueError):
        c.prefill(TOKENS)


# ---- tensor parallelism (n_devices / device_mask, libqsp >= 1.3) ----------------------
# tiny-v1 splits in two (2 KV heads, 128 FFN features; 32 columns of wo and 64
# of w_down per shard: whole blocks). The CPU runs the shards one after
# another: logits bit for bit the unsplit model's.

def test_split_params_default_to_unsplit():
    p = _ffi.qsp_context_params()
    _ffi.lib.qsp_context_params_init(ctypes.byref(p))
    assert (p.n_devices, p.device_mask) == (0, 0)
    with qsp.Context(**PARAMS) as ctx:
        assert (ctx.params.n_devices, ctx.params.device_mask) == (0, 0)
    with qsp.Context(**dict(PARAMS, n_devices=2, device_mask=1)) as ctx:
        assert (ctx.params.n_devices, ctx.params.device_mask) == (2, 1)


@pytest.mark.parametrize("device_mask", [0, 1])
def test_split_in_two_is_bit_identical(model, ref_bytes, device_mask):
    with model.context() as whole:
        whole.prefill(TOKENS)
        want = _raw(whole.logits())
        assert want == ref_bytes
        # device_mask 0 (devices from device_index on) and one bit (every
        # shard on that device): both reach the library, which says how many
        # shards.
        with model.context(n_devices=2, device_mask=device_mask) as ctx:
            info = ctx.info()
            assert "2 shards" in info.device_name
            assert info.kv_cache_bytes == whole.info().kv_cache_bytes
            ctx.prefill(TOKENS)
            assert _raw(ctx.logits()) == want
            assert ctx.greedy_token() == whole.greedy_token()


def test_split_that_does_not_divide_is_refused():
    # 2 KV heads over 3 shards.
    with pytest.raises(qsp.QspError) as e:
        qsp.Context(**dict(PARAMS, n_devices=3))
    assert e.value.status == qsp.Status.SHAPE
    assert "n_kv_heads 2 does not divide over n_devices = 3" in e.value.message
    # A device_mask naming 3 devices for 2 shards.
    with pytest.raises(qsp.QspError) as e:
        qsp.Context(**dict(PARAMS, n_devices=2, device_mask=0b111))
    assert e.value.status == qsp.Status.INVALID_ARGUMENT
    assert "device_mask 0x7" in e.value.message


def _rss_bytes():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def test_contexts_leak_nothing(model):
    base = qsp.cache_stats(qsp.Backend.CPU).n_tensors

    def cycle(i):
        if i % 2:
            with model.context() as ctx:  # closed explicitly
                ctx.prefill(TOKENS[:3])
                ctx.logits()
        else:
            ctx = model.context()  # freed by the garbage collector / refcount
            ctx.prefill(TOKENS[:3])
            ctx.logits_view()
            assert qsp.cache_stats().n_tensors == base + model.n_tensors
            del ctx

    for i in range(20):  # warm-up: allocator pools, lazily created state
        cycle(i)
    gc.collect()
    rss0 = _rss_bytes()
    for i in range(200):
        cycle(i)
    gc.collect()
    grown = _rss_bytes() - rss0
    assert qsp.cache_stats(qsp.Backend.CPU).n_tensors == base
    assert grown < 8 << 20, "RSS grew by %d bytes over 200 contexts" % grown


def test_abi_mismatch_fails_at_import():
    fake = _env_file("QSP_FAKE_ABI_LIBRARY")
    env = dict(os.environ, QSP_LIBRARY=fake)
    pkg = os.path.dirname(os.path.dirname(os.path.abspath(qsp.__file__)))  # the installed package
    r = subprocess.run([sys.executable, "-c", "import sys; sys.path.insert(0, %r); import qsp" % pkg],
                       env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, universal_newlines=True)
    assert r.returncode != 0
    assert "LibraryError" in r.stderr
    assert "ABI mismatch" in r.stderr and "ABI version 2" in r.stderr and "ABI version 1" in r.stderr

    env["QSP_LIBRARY"] = "/nonexistent/libqsp.so.1"
    r = subprocess.run([sys.executable, "-c", "import sys; sys.path.insert(0, %r); import qsp" % pkg],
                       env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, universal_newlines=True)
    assert r.returncode != 0 and "cannot find libqsp" in r.stderr and "QSP_LIBRARY" in r.stderr


def _import_in_child(env):
    pkg = os.path.dirname(os.path.dirname(os.path.abspath(qsp.__file__)))
    code = "import sys; sys.path.insert(0, %r); import qsp; print(qsp._ffi.lib._name)" % pkg
    return subprocess.run([sys.executable, "-c", code], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                          universal_newlines=True)


def test_library_found_through_pkg_config():
    if not os.environ.get("PKG_CONFIG_PATH"):
        pytest.skip("PKG_CONFIG_PATH is not set (ctest sets it)")
    env = {k: v for k, v in os.environ.items() if k not in ("QSP_LIBRARY", "LD_LIBRARY_PATH")}
    r = _import_in_child(env)
    assert r.returncode == 0, r.stderr
    pc = subprocess.run(["pkg-config", "--variable=libdir", "qsp"], env=env, stdout=subprocess.PIPE,
                        universal_newlines=True).stdout.strip()
    # libqsp.so.1 through the loader only if one is installed system-wide.
    assert r.stdout.strip() in (os.path.join(pc, "libqsp.so.1"), "libqsp.so.1"), r.stdout

    env.pop("PKG_CONFIG_PATH")
    r = _import_in_child(env)
    if r.returncode == 0:
        pytest.skip("a libqsp.so.1 is installed system-wide: %s" % r.stdout)
    assert "cannot find libqsp" in r.stderr and "QSP_LIBRARY" in r.stderr and "pkg-config" in r.stderr, r.stderr
