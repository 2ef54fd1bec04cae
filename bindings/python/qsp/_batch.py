"""Batched prefill (qsp_prefill_batch, since 1.1): several contexts of one
model advanced in one call."""

import ctypes

from . import _ffi
from ._context import Context, _floats, _int32s, _np, _rows
from ._status import QspError, Status, _check_global, version, version_number

_lib = _ffi.lib


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

