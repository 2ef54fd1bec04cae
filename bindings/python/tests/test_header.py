"""The binding's constants against include/qsp/qsp.h (issue 14): every
QSP_DTYPE_*, status (QSP_OK / QSP_ERR_*), QSP_BACKEND_*, QSP_ROPE_* and
QSP_LOG_* the header defines is mirrored with the same value, and nothing
else; and the loaded library names and sizes every dtype."""

import os
import re

import pytest

import qsp

# prefix in the header -> the enum that mirrors it
FAMILIES = {
    "QSP_DTYPE_": qsp.DType,
    "QSP_ERR_": qsp.Status,
    "QSP_BACKEND_": qsp.Backend,
    "QSP_ROPE_": qsp.RopeStyle,
    "QSP_LOG_": qsp.LogLevel,
}


def header_constants():
    d = os.environ.get("QSP_HEADER_DIR")
    if not d:
        pytest.skip("QSP_HEADER_DIR is not set (ctest sets it)")
    found = {prefix: {} for prefix in FAMILIES}
    with open(os.path.join(d, "qsp.h")) as f:
        for m in re.finditer(r"^#define\s+(QSP_\w+)\s+\(?\s*(-?\d+)\s*\)?", f.read(), re.M):
            name, value = m.group(1), int(m.group(2))
            if name == "QSP_OK":
                found["QSP_ERR_"]["OK"] = value
                continue
            for prefix in FAMILIES:
                if name.startswith(prefix):
                    found[prefix][name[len(prefix):]] = value
    return found


@pytest.mark.parametrize("prefix", sorted(FAMILIES))
def test_enum_matches_header(prefix):
    want = header_constants()[prefix]
    assert want, "no %s* constants in qsp.h" % prefix
    have = {m.name: int(m.value) for m in FAMILIES[prefix]}
    assert have == want, "%s: binding %r, header %r" % (FAMILIES[prefix].__name__, have, want)


def test_library_names_and_sizes_every_dtype():
    for d in qsp.DType:
        name = qsp.dtype_name(d)
        assert name.lower() == d.name.lower(), (d, name)
        assert qsp.gguf_type_name(d) == name, d
        assert qsp.dtype_size(d, 1, 256) > 0, d  # 256: a multiple of every block size


def test_status_strings():
    for s in qsp.Status:
        assert qsp.status_string(s) != "unknown status", s


def test_runs_against_the_installed_package():
    if os.environ.get("QSP_TEST_INSTALLED") != "1":
        pytest.skip("not run by run-tests.sh")
    assert os.sep + "site-packages" + os.sep in qsp.__file__, qsp.__file__
