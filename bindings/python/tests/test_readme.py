"""Runs the examples in bindings/python/README.md as they stand."""

import contextlib
import io
import os
import re
import struct
import sys

import pytest


def _blocks():
    readme = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "README.md")
    with open(readme) as f:
        blocks = re.findall(r"```python\n(.*?)```", f.read(), re.S)
    assert len(blocks) == 3
    return blocks


def _run(code, argv):
    out = io.StringIO()
    old = sys.argv
    sys.argv = argv
    try:
        with contextlib.redirect_stdout(out):
            exec(compile(code, "README.md", "exec"), {"__name__": "readme"})
    finally:
        sys.argv = old
    return out.getvalue().splitlines()


def test_readme_gguf_example_prints_the_top5():
    model, ref = os.environ.get("QSP_GGUF_MODEL"), os.environ.get("QSP_GGUF_REF_LOGITS")
    if not model or not ref:
        pytest.skip("QSP_GGUF_MODEL / QSP_GGUF_REF_LOGITS are not set (ctest sets them)")
    with open(ref, "rb") as f:
        data = f.read()
    logits = struct.unpack("<%df" % (len(data) // 4), data)
    top = sorted(range(len(logits)), key=lambda t: (-logits[t], t))[:5]
    want = ["top 5 of %d logits after 10 tokens:" % len(logits)] + ["%d %.4f" % (t, logits[t]) for t in top]
    assert _run(_blocks()[0], ["example.py", model]) == want


def test_readme_hand_built_example_runs():
    lines = _run(_blocks()[2], ["example.py"])
    assert re.match(r"^64 logits; greedy next token: \d+$", lines[0]), lines
    assert lines[1] == "error: OUT_OF_RANGE - layer 1 out of range (the model has 1 layers)", lines


def test_readme_serving_loop_equals_requests_alone():
    import qsp
    model = os.environ.get("QSP_GGUF_MODEL")
    if not model:
        pytest.skip("QSP_GGUF_MODEL is not set (ctest sets it)")
    want = []
    for i, prompt in enumerate([[1, 7, 42], [100, 255, 0, 128], [64], [3, 200, 5, 9, 11]]):
        with qsp.Context.from_gguf(model, backend=qsp.Backend.CPU, n_threads=2) as ctx:
            out, piece = [], prompt
            for _ in range(4):
                ctx.prefill(piece)
                out.append(ctx.greedy_token())
                piece = out[-1:]
        want.append("request %d: %s" % (i, " ".join(map(str, out))))
    assert _run(_blocks()[1], ["serve.py", model]) == want
