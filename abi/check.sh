#!/usr/bin/env bash
# Fails when the built libqsp.so.1 breaks the ABI recorded in abi/libqsp.so.1.abi
# (libabigail's abidiff). Additions (new functions, appended struct fields
# behind struct_size) are allowed; removals and incompatible changes fail.
# On a deliberate change: scripts/update-abi BUILD_DIR (see docs/ABI.md).
set -uo pipefail
lib=$1
here=$(cd "$(dirname "$0")" && pwd)
if ! command -v abidiff >/dev/null; then
  echo "abidiff not installed (Debian package abigail-tools)"; exit 1
fi
abidiff --no-added-syms --headers-dir1 "$here/../include" --headers-dir2 "$here/../include" "$here/libqsp.so.1.abi" "$lib"
rc=$?
# abidiff: bit 0 error, bit 1 usage error, bit 2 ABI change, bit 3 incompatible change.
if (( rc & 11 )); then echo "ABI check FAILED (abidiff rc=$rc)"; exit 1; fi
(( rc & 4 )) && echo "ABI changed compatibly (additions); consider scripts/update-abi"
echo "ABI check OK"
