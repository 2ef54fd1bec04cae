import os
import sys

# Run from the source tree without installing: bindings/python on sys.path.
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

# QSP_TEST_WITHOUT_NUMPY=1: run the suite as if numpy were not installed
# (ctest runs it both ways), exercising the list/memoryview paths.
if os.environ.get("QSP_TEST_WITHOUT_NUMPY") == "1":
    sys.modules["numpy"] = None  # makes "import numpy" raise ImportError


def pytest_report_header(config):
    import qsp
    return "qsp %s (ABI %d) from %s; numpy: %s" % (
        qsp.version(), qsp.abi_version(), qsp._ffi.lib._name, "no" if qsp._np is None else qsp._np.__version__)
