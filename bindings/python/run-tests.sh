#!/bin/sh
# Runs the Python binding's tests (what ctest's bindings.python runs) against
# the package as pip installed it into VENV (the fixture install.sh): once with
# numpy when python3-numpy is there, once as if numpy were missing (lists and
# memoryviews instead of arrays). Runs from VENV so that the source tree's qsp/
# is not on sys.path.
# usage: run-tests.sh VENV_PYTHON TESTS_DIR
set -eu
py=$1 tests=$2
cd "$(dirname "$(dirname "$py")")"
export PYTHONDONTWRITEBYTECODE=1 QSP_TEST_INSTALLED=1
"$py" -m pytest -q -p no:cacheprovider "$tests"
QSP_TEST_WITHOUT_NUMPY=1 "$py" -m pytest -q -p no:cacheprovider "$tests"
