"""qsp.prefill_batch (qsp_prefill_batch, libqsp >= 1.1) against single prefills.

A batch of three contexts of tiny-v1 — a prompt, a decode step on an existing
cache and an embeddings piece — must leave each context exactly as the same
piece through Context.prefill / prefill_embeddings does (CPU: bit for bit);
an invalid batch raises QspError naming the sequence and changes nothing.
"""

import ctypes
import os
import struct
import subprocess
import sys

import pytest

import qsp
from tiny_model import TOKENS, TinyModel

HIDDEN = 64
CACHED = TOKENS[:6]   # already in the decoding context's cache
STEP = [TOKENS[6]]    # its decode step


def hidden_states(n_tokens):
    """n_tokens x 64 exact float32 values (multiples of 1/64 in [-0.78, 0.78])."""
    return [((i * 37) % 101 - 50) / 64.0 for i in range(n_tokens * HIDDEN)]


def _raw(logits):
    if isinstance(logits, list):
        return struct.pack("<%df" % len(logits), *logits)
    return bytes(memoryview(logits))


@pytest.fixture(scope="module")
def model():
    return TinyModel()


@pytest.fixture
def trio(model):
    """Three fresh contexts: empty, with CACHED in its cache, empty."""
    ctxs = [model.context() for _ in range(3)]
    ctxs[1].prefill(CACHED)
    yield ctxs
    for c in ctxs:
        c.close()


def _state(ctx):
    """(kv length, logits bytes or None, greedy token or None)."""
    try:
        return ctx.kv_length, _raw(ctx.logits()), ctx.greedy_token()
    except qsp.QspError as e:
        assert e.status == qsp.Status.NOT_READY
        return ctx.kv_length, None, None


def test_batch_equals_single_prefills(model, trio):
    embd = hidden_states(3)
    if qsp._np is not None:
        embd_piece = qsp._np.array(embd, dtype=qsp._np.float32).reshape(3, HIDDEN)  # an ndarray is embeddings
    else:
        embd_piece = qsp.Embeddings(embd)
    qsp.prefill_batch([(trio[0], TOKENS), (trio[1], STEP), (trio[2], embd_piece)])

    singles = [model.context() for _ in range(3)]
    try:
        singles[0].prefill(TOKENS)
        singles[1].prefill(CACHED)
        singles[1].prefill(STEP)
        singles[2].prefill_embeddings(embd)
        for i, (b, s) in enumerate(zip(trio, singles)):
            got, want = _state(b), _state(s)
            assert want[1] is not None
            assert got == want, "piece %d" % i  # kv length, logits bit for bit, greedy token
        assert [c.kv_length for c in trio] == [10, 7, 3]
        assert trio[0].greedy_token() == max(range(256), key=lambda t: (trio[0].logits()[t], -t))
    finally:
        for c in singles:
            c.close()


def test_batch_prompt_matches_c_reference(trio):
    path = os.environ.get("QSP_REF_LOGITS")
    if not path:
        pytest.skip("QSP_REF_LOGITS is not set (ctest sets it)")
    with open(path, "rb") as f:
        ref = f.read()
    qsp.prefill_batch([(trio[1], STEP), (trio[0], TOKENS)])
    assert _raw(trio[0].logits()) == ref


def test_invalid_batches_change_nothing(trio):
    qsp.prefill_batch([(trio[0], TOKENS[:4]), (trio[2], [5])])  # some logits to keep
    before = [_state(c) for c in trio]

    with pytest.raises(qsp.QspError) as e:  # token 256 is out of range (vocab 256) in sequence 1
        qsp.prefill_batch([(trio[0], [3]), (trio[1], [4, 256]), (trio[2], [5])])
    assert e.value.status == qsp.Status.OUT_OF_RANGE
    assert "sequence 1" in e.value.message, e.value.message
    assert [_state(c) for c in trio] == before

    with pytest.raises(qsp.QspError) as e:  # the same context twice
        qsp.prefill_batch([(trio[1], [3]), (trio[1], [4])])
    assert e.value.status == qsp.Status.INVALID_ARGUMENT
    assert "sequence 1" in e.value.message, e.value.message
    assert [_state(c) for c in trio] == before

    with pytest.raises(qsp.QspError) as e:  # no pieces
        qsp.prefill_batch([])
    assert e.value.status == qsp.Status.INVALID_ARGUMENT
    with pytest.raises(ValueError, match="sequence 1"):  # not whole rows of hidden_size
        qsp.prefill_batch([(trio[0], [1]), (trio[2], qsp.Embeddings([0.5] * 70))])
    with pytest.raises(TypeError, match="sequence 0"):
        qsp.prefill_batch([(None, [1])])
    assert [_state(c) for c in trio] == before

    # All still usable.
    qsp.prefill_batch([(c, [9]) for c in trio])
    assert [c.kv_length for c in trio] == [b[0] + 1 for b in before]


def test_closed_context_is_refused(model):
    a, b = model.context(), model.context()
    b.close()
    with pytest.raises(ValueError, match="sequence 1: operation on a closed Context"):
        qsp.prefill_batch([(a, [1]), (b, [2])])
    assert a.kv_length == 0
    a.close()


def test_old_library_is_refused_with_a_clear_error(monkeypatch):
    # A 1.0 library: everything else works; prefill_batch says what it needs.
    monkeypatch.setattr(qsp._batch, "version_number", lambda: 10000)  # what prefill_batch calls
    monkeypatch.setattr(qsp._batch, "version", lambda: "1.0.0")
    with pytest.raises(qsp.QspError) as e:
        qsp.prefill_batch([(object(), [1])])
    assert e.value.status == qsp.Status.UNSUPPORTED
    assert "needs libqsp >= 1.1.0" in e.value.message and "1.0.0" in e.value.message


def test_batch_seq_layout():
    # sizeof / offsetof against the C compiler's are checked with the other
    # structs (test_qsp.test_struct_layout_matches_c); this is the seq_size passed.
    assert ctypes.sizeof(qsp._ffi.qsp_batch_seq) == (32 if ctypes.sizeof(ctypes.c_void_p) == 8 else 20)
