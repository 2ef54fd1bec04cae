#!/usr/bin/env bash
# `qsp synth --tokenizer` from the command line (ctest tokenizer.synth_cli):
# exit codes and one-line errors, vocabulary-only files, determinism, and a
# synthesized model carrying a tokenizer that runs.
#   synth_cli.sh QSP_BINARY
set -uo pipefail
qsp=$1
here=$(cd "$(dirname "$0")" && pwd)
data=$here/../data/tokenizer
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }
# expect RC CMD...: the exit code; errors are one "qsp: error:" line on stderr.
expect() {
  local want=$1; shift
  "$@" >"$work/out" 2>"$work/err"
  local rc=$?
  if [ "$rc" != "$want" ]; then
    fail "'$*' exited $rc, expected $want"
    sed 's/^/  stdout: /' "$work/out" | head -5
    sed 's/^/  stderr: /' "$work/err" | head -5
    return 1
  fi
  if [ "$want" != 0 ] && { [ "$(wc -l <"$work/err")" != 1 ] || ! grep -q '^qsp: error: ' "$work/err"; }; then
    fail "'$*': stderr is not one 'qsp: error:' line:"
    sed 's/^/  stderr: /' "$work/err"
  fi
  return 0
}
out_has() { grep -q -- "$1" "$work/out" || { fail "stdout lacks '$1'"; sed 's/^/  /' "$work/out" | head -20; }; }
err_has() { grep -q -- "$1" "$work/err" || { fail "stderr lacks '$1'"; sed 's/^/  /' "$work/err"; }; }

q=$data/qwen3-mini/tokenizer.json
l=$data/llama3-mini/tokenizer.json

# usage errors (2)
expect 2 "$qsp" synth --vocab-only "$work/a.gguf" && err_has "--vocab-only needs --tokenizer"
expect 2 "$qsp" synth --preset micro --vocab-size 100 "$work/a.gguf" && err_has "--vocab-size needs --tokenizer"
expect 2 "$qsp" synth --tokenizer "$q" && err_has "one output file"
expect 2 "$qsp" synth --tokenizer "$q" --preset nope "$work/a.gguf" && err_has "unknown preset"
expect 2 "$qsp" synth --tokenizer "$q" --vocab-size 0 "$work/a.gguf"
# runtime errors (1): the file and the problem
expect 1 "$qsp" synth --tokenizer "$work/missing/tokenizer.json" "$work/a.gguf" && err_has "cannot open"
printf '{"model": {' >"$work/bad.json"
expect 1 "$qsp" synth --tokenizer "$work/bad.json" "$work/a.gguf" && err_has "bad.json: not valid JSON"
sed 's/p{N}|/p{N}+|/' "$q" >"$work/unknown.json"
expect 1 "$qsp" synth --tokenizer "$work/unknown.json" "$work/a.gguf" && err_has "unknown pre-tokenizer"
expect 1 "$qsp" synth --tokenizer "$q" --vocab-size 20 "$work/a.gguf" && err_has "more than --vocab-size 20"
[ -e "$work/a.gguf" ] && fail "a failed synth left $work/a.gguf"

# vocabulary-only files: no tensors; qsp info reads them
expect 0 "$qsp" synth --tokenizer "$q" --vocab-only "$work/q.gguf" && out_has "26 tokens (6 added), 9 merges" &&
  out_has "vocabulary only (qwen3)"
expect 0 "$qsp" info "$work/q.gguf" && out_has "0 tensors" && out_has "vocab: *26"
expect 0 "$qsp" synth --tokenizer "$l" --vocab-only "$work/l.gguf" && out_has "pre llama-bpe" &&
  out_has "vocabulary only (llama)"
expect 1 "$qsp" synth --tokenizer "$q" --vocab-only "$work/q.gguf" && err_has "exists"
expect 0 "$qsp" synth --tokenizer "$q" --vocab-only --force "$work/q2.gguf"
cmp -s "$work/q.gguf" "$work/q2.gguf" || fail "two vocabulary-only files of the same tokenizer differ"
expect 0 "$qsp" synth --tokenizer "$q" --vocab-only --vocab-size 64 "$work/q64.gguf" && out_has "64 tokens"

# a model with the tokenizer: vocabulary 26, it runs
expect 0 "$qsp" synth --tokenizer "$q" --preset micro "$work/m.gguf" && out_has "preset micro (qwen3)"
expect 0 "$qsp" info "$work/m.gguf" && out_has "vocab: *26" && out_has "runnable: *yes"
# --backend cpu: on a GPU machine the CUDA backend refuses the micro preset (head_dim 16).
expect 0 "$qsp" prefill "$work/m.gguf" --tokens 13,18,22 --backend cpu && out_has "top-5"
expect 0 "$qsp" synth --tokenizer "$l" "$work/t.gguf" && out_has "preset tiny-llama (llama)"

if [ "$failures" != 0 ]; then
  echo "$failures failure(s)"
  exit 1
fi
echo "OK: synth --tokenizer"
