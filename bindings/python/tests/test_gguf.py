"""GGUF model files (issue 20), against the references that the ctest fixture
wrote: `qsp synth --preset tiny --type q4_0` (QSP_GGUF_MODEL), its logits from
`qsp prefill` and gguf/gguf_ref.c (QSP_GGUF_REF_LOGITS, bit-identical to each
other), its qsp_gguf_info (QSP_GGUF_REF_INFO) and three bad files
(QSP_GGUF_BAD_DIR)."""

import gc
import os
import struct

import pytest

import qsp

from test_qsp import _raw, _rss_bytes


def _env(name):
    v = os.environ.get(name)
    if not v:
        pytest.skip("%s is not set (ctest sets it)" % name)
    return v


@pytest.fixture(scope="module")
def path():
    return _env("QSP_GGUF_MODEL")


@pytest.fixture(scope="module")
def tokens():
    return [int(t) for t in _env("QSP_GGUF_TOKENS").split(",")]


@pytest.fixture(scope="module")
def ref_logits():
    with open(_env("QSP_GGUF_REF_LOGITS"), "rb") as f:
        return f.read()


@pytest.fixture(scope="module")
def ref_info():
    out = {}
    with open(_env("QSP_GGUF_REF_INFO")) as f:
        for line in f:
            k, v = line.rstrip("\n").split(" ", 1)
            out[k] = v
    return out


def test_info_and_tensors(path, ref_info):
    with qsp.ModelFile(path) as f:
        info = f.info()
        for k, v in ref_info.items():
            if k.startswith("tensor0_"):
                continue
            got = getattr(info, k)
            assert str(got if got != "" else "-") == v, k
        tensors = f.tensors()
        assert len(tensors) == len(f) == int(ref_info["tensor_count"])
        t0 = tensors[0]
        assert t0.name == ref_info["tensor0_name"]
        assert t0.type == qsp.DType.Q4_0 and int(t0.type) == int(ref_info["tensor0_type"])
        assert t0.type_name == ref_info["tensor0_type_name"]
        assert (t0.n_rows, t0.n_cols, t0.n_bytes) == tuple(int(ref_info["tensor0_" + k]) for k in ("n_rows", "n_cols", "n_bytes"))
        assert t0.shape == (t0.n_cols, t0.n_rows)
        assert f.tensor(t0.name) == t0
        with pytest.raises(qsp.QspError) as e:
            f.tensor("no.such.tensor")
        assert e.value.status == qsp.Status.OUT_OF_RANGE
        assert sum(t.n_bytes for t in tensors) == info.weight_bytes
    assert f.closed
    with pytest.raises(ValueError):
        f.info()


def test_logits_identical_to_c(path, tokens, ref_logits):
    with qsp.Context.from_gguf(path, backend=qsp.Backend.CPU, n_threads=2) as ctx:
        ctx.prefill(tokens)
        assert _raw(ctx.logits()) == ref_logits
    # The same through an open file, a short context and progress reports.
    seen = []
    with qsp.ModelFile(path) as f:
        ctx = f.create_context(backend=qsp.Backend.CPU, n_threads=2, context_length=64,
                               progress=lambda done, total: seen.append((done, total)))
    with ctx:
        assert ctx.params.max_seq_len == 64
        ctx.prefill(tokens)
        assert _raw(ctx.logits_view()) == ref_logits
    assert seen, "no progress reported"
    totals = {t for _, t in seen}
    assert len(totals) == 1
    dones = [d for d, _ in seen]
    assert dones == sorted(dones) and len(set(dones)) == len(dones)
    assert dones[-1] == seen[-1][1]


def test_split_context_identical_to_c(path, tokens, ref_logits):
    """The model file split in two (n_devices / device_mask reach the
    context): the same logits bit for bit."""
    with qsp.ModelFile(path) as f:
        p = f.context_params(backend=qsp.Backend.CPU, n_threads=2)
        assert (p.n_devices, p.device_mask) == (0, 0)
        p = f.context_params(backend=qsp.Backend.CPU, n_threads=2, n_devices=2, device_mask=1)
        assert (p.n_devices, p.device_mask) == (2, 1)
        with f.create_context(backend=qsp.Backend.CPU, n_threads=2, n_devices=2, device_mask=1) as ctx:
            assert (ctx.params.n_devices, ctx.params.device_mask) == (2, 1)
            assert "2 shards" in ctx.info().device_name
            ctx.prefill(tokens)
            assert _raw(ctx.logits()) == ref_logits
    with qsp.Context.from_gguf(path, backend=qsp.Backend.CPU, n_threads=2, n_devices=2) as ctx:
        assert "2 shards" in ctx.info().device_name
        ctx.prefill(tokens)
        assert _raw(ctx.logits()) == ref_logits


def test_from_bytes(path, tokens, ref_logits):
    with open(path, "rb") as fh:
        data = bytearray(fh.read())
    with qsp.ModelFile.from_bytes(data) as f:
        assert f.info().file_size == len(data)
        with f.create_context(backend=qsp.Backend.CPU, n_threads=2) as ctx:
            ctx.prefill(tokens)
            assert _raw(ctx.logits()) == ref_logits


@pytest.mark.parametrize("name,status,words", [
    ("missing.gguf", qsp.Status.IO, "missing.gguf"),
    ("bad_truncated.gguf", qsp.Status.BAD_FORMAT, ""),
    ("bad_magic.gguf", qsp.Status.BAD_FORMAT, ""),
    ("bad_type.gguf", qsp.Status.UNSUPPORTED, "iq4_nl"),
])
def test_bad_files(name, status, words):
    p = os.path.join(_env("QSP_GGUF_BAD_DIR"), name)
    with pytest.raises(qsp.QspError) as e:
        qsp.Context.from_gguf(p, backend=qsp.Backend.CPU)
    assert e.value.status == status, e.value
    assert e.value.message and words in e.value.message, e.value.message
    assert e.value.message in str(e.value)


def test_raising_progress_is_reraised_and_leaves_nothing(path):
    base = qsp.cache_stats(qsp.Backend.CPU).n_tensors

    class Stop(Exception):
        pass

    calls = []

    def progress(done, total):
        calls.append(done)
        if len(calls) == 2:
            raise Stop("enough after %d of %d bytes" % (done, total))

    for _ in range(3):
        del calls[:]
        with pytest.raises(Stop, match="enough after"):
            qsp.Context.from_gguf(path, backend=qsp.Backend.CPU, n_threads=1, progress=progress)
        assert len(calls) == 2, "the callback ran again after raising"
        gc.collect()
        assert qsp.cache_stats(qsp.Backend.CPU).n_tensors == base


def test_files_and_contexts_leak_nothing(path, tokens):
    base = qsp.cache_stats(qsp.Backend.CPU).n_tensors

    def cycle(i):
        if i % 2:
            with qsp.ModelFile(path) as f, f.create_context(backend=qsp.Backend.CPU, n_threads=1,
                                                            context_length=16) as ctx:
                ctx.prefill(tokens[:2])
        else:
            f = qsp.ModelFile(path)  # both left to the garbage collector
            ctx = f.create_context(backend=qsp.Backend.CPU, n_threads=1, context_length=16,
                                   progress=lambda d, t: None)
            del f, ctx

    for i in range(10):
        cycle(i)
    gc.collect()
    rss0 = _rss_bytes()
    for i in range(100):
        cycle(i)
    gc.collect()
    assert qsp.cache_stats(qsp.Backend.CPU).n_tensors == base
    grown = _rss_bytes() - rss0
    assert grown < 8 << 20, "RSS grew by %d bytes over 100 files and contexts" % grown
