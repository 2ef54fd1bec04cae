"""Runs the example in bindings/python/README.md as it stands."""

import contextlib
import io
import os
import re


def test_readme_example_runs():
    readme = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "README.md")
    with open(readme) as f:
        blocks = re.findall(r"```python\n(.*?)```", f.read(), re.S)
    assert len(blocks) == 1
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(blocks[0], "README.md", "exec"), {"__name__": "readme"})
    lines = out.getvalue().splitlines()
    assert re.match(r"^64 logits; greedy next token: \d+$", lines[0]), lines
    assert lines[1] == "error: OUT_OF_RANGE - layer 1 out of range (the model has 1 layers)", lines
