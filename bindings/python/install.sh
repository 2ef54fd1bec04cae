#!/bin/sh
# The ctest fixture bindings.python_install: installs this package with pip
# into a fresh venv, as a user would, and offline (Debian's setuptools through
# --system-site-packages; the venv also sees pytest and numpy from there). A
# copy of the sources is installed so that no build/ or *.egg-info lands in
# the source tree.
# usage: install.sh PYTHON SOURCE_DIR WORK_DIR   (the venv is WORK_DIR/venv)
set -eu
py=$1 src=$2 work=$3
rm -rf "$work/venv" "$work/src"
mkdir -p "$work/src"
cp -R "$src/pyproject.toml" "$src/README.md" "$src/qsp" "$work/src/"
"$py" -m venv --without-pip --system-site-packages "$work/venv"
PIP_DISABLE_PIP_VERSION_CHECK=1 "$work/venv/bin/python" -m pip install --no-build-isolation --no-index \
  --no-cache-dir -q "$work/src"
"$work/venv/bin/python" -c 'import importlib.util; print("installed qsp:", importlib.util.find_spec("qsp").origin)'
