#!/usr/bin/env bash
# Prints the function names the public headers declare with QSP_API, sorted.
set -euo pipefail
inc=$1
cat "$inc"/qsp/*.h | tr '\n' ' ' | sed 's/;/;\n/g' | grep 'QSP_API' \
  | sed -E 's/.*[^A-Za-z0-9_](qsp_[A-Za-z0-9_]+)[[:space:]]*\(.*/\1/' | sort -u
