#!/bin/sh
# Runs the Python binding's tests (what ctest's bindings.python runs): once
# as installed (with numpy when python3-numpy is there), once as if numpy were
# missing (lists and memoryviews instead of arrays).
# usage: run-tests.sh [PYTHON]   (from bindings/python)
set -eu
py=${1:-python3}
cd "$(dirname "$0")"
export PYTHONDONTWRITEBYTECODE=1
"$py" -m pytest -q -p no:cacheprovider tests
QSP_TEST_WITHOUT_NUMPY=1 "$py" -m pytest -q -p no:cacheprovider tests
