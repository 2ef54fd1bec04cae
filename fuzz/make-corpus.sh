#!/usr/bin/env bash
# Regenerates the committed seed corpus fuzz/corpus/gguf (each file < 8 KB) with
# the `qsp` tool: tiny valid models and a few broken variants. File names have
# no .gguf suffix (.gitignore ignores *.gguf).
# usage: fuzz/make-corpus.sh PATH/TO/qsp
set -euo pipefail
qsp=$1
out=$(cd "$(dirname "$0")" && pwd)/corpus/gguf
mkdir -p "$out"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
"$qsp" synth --preset micro --type q4_0 --seed 1 "$tmp/micro.gguf" >/dev/null
"$qsp" synth --preset micro-llama --type q4_0 --seed 2 "$tmp/llama.gguf" >/dev/null
cp "$tmp/micro.gguf" "$out/valid_micro_qwen3_q4_0"
cp "$tmp/llama.gguf" "$out/valid_micro_llama_q4_0"
# GGUF v2: the same bytes with version 2 (v2 and v3 are identical little-endian).
cp "$tmp/micro.gguf" "$out/valid_micro_v2"
printf '\x02' | dd of="$out/valid_micro_v2" bs=1 seek=4 conv=notrunc status=none
# An empty, valid GGUF: no metadata, no tensors.
printf 'GGUF\x03\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00' >"$out/empty_v3"
head -c 100 "$tmp/micro.gguf" >"$out/truncated_header"
size=$(stat -c %s "$tmp/micro.gguf")
head -c $((size - 64)) "$tmp/micro.gguf" >"$out/truncated_data"
{ printf 'GGUX'; tail -c +5 "$tmp/llama.gguf"; } >"$out/bad_magic"
sed 's/qwen3/qwen9/g' "$tmp/micro.gguf" >"$out/unknown_arch"
ls -l "$out"
