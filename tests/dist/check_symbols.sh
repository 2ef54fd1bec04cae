#!/usr/bin/env bash
# The shared library exports exactly the documented API: every QSP_API
# function of the public headers, nothing else, each in a version node of the
# version script (QSP_1.0, QSP_1.1, ...).
set -euo pipefail
lib=$1 inc=$2 map=$3
here=$(dirname "$0")
want=$("$here/public_symbols.sh" "$inc")
have=$(nm -D --defined-only "$lib" | awk '$2 ~ /^[TDRBW]$/ {print $3}' | sed 's/@.*//' | sort -u)
if [ "$want" != "$have" ]; then
  echo "exported symbols differ from the documented API:"
  diff <(echo "$want") <(echo "$have") || true
  exit 1
fi
nodes=$(sed -n 's/^[[:space:]]*\(QSP_[0-9][0-9.]*\)[[:space:]]*{.*/\1/p' "$map" | sed 's/.*/@@&$/')
bad=$(nm -D --defined-only "$lib" | awk '$2 ~ /^[TDRBW]$/ {print $3}' | grep -v -f <(echo "$nodes") || true)
if [ -n "$bad" ]; then echo "symbols outside the version nodes of $(basename "$map"): $bad"; exit 1; fi
soname=$(readelf -d "$lib" | sed -n 's/.*SONAME.*\[\(.*\)\]/\1/p')
[ "$soname" = "libqsp.so.1" ] || { echo "SONAME is '$soname', expected libqsp.so.1"; exit 1; }
if readelf -d "$lib" | grep -q 'libcudart'; then echo "libcudart is linked dynamically"; exit 1; fi
echo "OK: $(echo "$want" | wc -l) symbols, SONAME $soname"
