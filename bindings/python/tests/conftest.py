import os
import sys

# The tests run against the installed package (run-tests.sh, from a venv that
# pip installed it into). Only tests/ itself is put on sys.path, for tiny_model.
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

# QSP_TEST_WITHOUT_NUMPY=1: run the suite as if numpy were not installed
# (ctest runs it both ways), exercising the list/memoryview paths.
if os.environ.get("QSP_TEST_WITHOUT_NUMPY") == "1":
    sys.modules["numpy"] = None  # makes "import numpy" raise ImportError


def pytest_report_header(config):
    import qsp
    return "qsp %s (ABI %d) from %s (package %s); numpy: %s" % (
        qsp.version(), qsp.abi_version(), qsp._ffi.lib._name, qsp.__file__,
        "no" if qsp._np is None else qsp._np.__version__)
