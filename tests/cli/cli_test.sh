#!/usr/bin/env bash
# Tests of the `qsp` command-line tool (registered with ctest by tools/CMakeLists.txt).
# usage: cli_test.sh MODE QSP_BINARY API_LOGITS_BINARY [TOK_GGUF_BINARY]
#   exit_codes         0 on success, 1 on runtime errors, 2 on usage errors; one-line errors
#   commands           every subcommand on a synthesized file and on the built-in model
#   logits_match       `qsp prefill --logits-out` == driving the C API directly, bit for bit
#   synth_determinism  same preset/type/seed -> same bytes, whatever the thread count
#   gguf_spec          an independent Python GGUF reader accepts what `qsp synth` writes
#   tokenizer          text in, text out: qsp tokenize, --prompt, --chat, generate's text, on
#                      files with a tokenizer written by TOK_GGUF_BINARY (tests/cli/tok_gguf.cpp)
#   devices            --devices / --shards (tensor parallelism): usage errors, the CPU shard mode
#                      equals the unsplit model, splits that do not divide, info's per-device memory
set -uo pipefail
mode=$1 qsp=$2 api=$3 tokgguf=${4:-}
here=$(cd "$(dirname "$0")" && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
failures=0

fail() { echo "FAIL: $*"; failures=$((failures + 1)); }

# expect RC CMD...: runs CMD, checks its exit code; keeps stdout/stderr in $work/out, $work/err.
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
  if [ "$want" != 0 ]; then
    # Errors: exactly one line on stderr, "qsp: error: ...".
    local lines
    lines=$(wc -l <"$work/err")
    if [ "$lines" != 1 ] || ! grep -q '^qsp: error: ' "$work/err"; then
      fail "'$*': stderr is not one 'qsp: error:' line:"
      sed 's/^/  stderr: /' "$work/err"
    fi
  fi
  return 0
}
out_has() { grep -q -- "$1" "$work/out" || { fail "stdout of the last command lacks '$1'"; sed 's/^/  /' "$work/out" | head -20; }; }
err_has() { grep -q -- "$1" "$work/err" || { fail "stderr of the last command lacks '$1'"; sed 's/^/  /' "$work/err"; }; }

case $mode in
exit_codes)
  expect 0 "$qsp" && out_has "tokens/s" && out_has "top-5" && out_has "backend:"
  expect 0 "$qsp" --help && out_has "usage: qsp"
  expect 0 "$qsp" --version && out_has "qsp 1."
  for c in info prefill generate bench synth tokenize; do
    expect 0 "$qsp" $c --help && out_has "usage: qsp $c"
    expect 0 "$qsp" help $c && out_has "usage: qsp $c"
  done
  # Usage errors: 2.
  expect 2 "$qsp" frobnicate && err_has "unknown command"
  expect 2 "$qsp" prefill --frobnicate && err_has "unknown option --frobnicate"
  expect 2 "$qsp" prefill && err_has "--tokens"
  expect 2 "$qsp" prefill --random && err_has "needs a value"
  expect 2 "$qsp" prefill --random abc && err_has "--random expects an integer"
  expect 2 "$qsp" prefill --random 0
  expect 2 "$qsp" prefill --tokens 1,2,x
  expect 2 "$qsp" prefill --tokens 1,2 --random 3 && err_has "exclude"
  expect 2 "$qsp" prefill --tokens 1,99999 && err_has "outside the vocabulary"
  expect 2 "$qsp" prefill --random 4 --backend gpu && err_has "--backend"
  expect 2 "$qsp" prefill --random 4 --ctx 2 && err_has "--ctx"
  expect 2 "$qsp" prefill a.gguf b.gguf --random 4
  expect 2 "$qsp" generate --random 4 -n x
  expect 2 "$qsp" bench -p 16,abc
  expect 2 "$qsp" bench --batch 0 -p 8 && err_has "--batch"
  expect 2 "$qsp" bench --batch 4x && err_has "--batch"
  expect 2 "$qsp" bench --batch 4x8+x1 && err_has "--batch"
  expect 2 "$qsp" bench --batch 4@8 && err_has "--batch expects N or groups"
  expect 2 "$qsp" bench --batch 4x8 -p 16 && err_has "mixed form"
  expect 2 "$qsp" generate --tokens 1,2 --tokens 3 --parallel 3 && err_has "needs 1 or 3 prompts"
  expect 2 "$qsp" generate --tokens 1,2 --tokens 3 -n 1,2,3 && err_has "-n gives 3 lengths for 2 sequences"
  expect 2 "$qsp" generate --tokens 1 --tokens 99999 && err_has "prompt 1: token 99999 is outside the vocabulary"
  expect 2 "$qsp" generate --tokens 1 --tokens-file "$work/p.txt" && err_has "exclude"
  expect 2 "$qsp" generate --tokens 1 --prompt hello && err_has "exclude"
  expect 2 "$qsp" prefill --random 3 --prompt hello && err_has "exclude"
  expect 2 "$qsp" prefill --prompt hello --prompt-file "$work/p.txt" && err_has "exclude"
  expect 2 "$qsp" prefill --tokens 1,2 --chat && err_has "--chat needs the prompt as text"
  expect 2 "$qsp" generate --random 4 --chat && err_has "--chat needs the prompt as text"
  expect 2 "$qsp" tokenize && err_has "takes MODEL and TEXT"
  expect 2 "$qsp" tokenize "$work/m.gguf" && err_has "takes MODEL and TEXT"
  expect 2 "$qsp" generate --random 4 --parallel 0 && err_has "--parallel"
  printf '1,2\n3,x\n' >"$work/bad.txt"
  expect 2 "$qsp" generate --tokens-file "$work/bad.txt" && err_has "bad.txt:2"
  expect 2 "$qsp" synth "$work/x.gguf" && err_has "--preset"
  expect 2 "$qsp" synth --preset nope "$work/x.gguf" && err_has "unknown preset"
  expect 2 "$qsp" synth --preset tiny --type q9_9 "$work/x.gguf" && err_has "--type"
  expect 2 "$qsp" synth --preset tiny
  expect 2 "$qsp" info --tensors=yes
  # Runtime errors: 1.
  expect 1 "$qsp" info "$work/missing.gguf" && err_has "missing.gguf" && err_has "No such file"
  expect 1 "$qsp" prefill "$work/missing.gguf" --random 4
  printf 'this is not a model' >"$work/junk.gguf"
  expect 1 "$qsp" prefill "$work/junk.gguf" --random 4 && err_has "not a GGUF file"
  expect 1 "$qsp" info "$work"  # a directory
  expect 0 "$qsp" synth --preset micro "$work/m.gguf"
  head -c 3000 "$work/m.gguf" >"$work/cut.gguf"
  expect 1 "$qsp" info "$work/cut.gguf" && err_has "truncated"
  # Type ids newer than the reader (tests/data/gguf/make_files.py): unsupported, named as such.
  expect 1 "$qsp" info "$here/../data/gguf/type_id_43" && err_has "type id 43, which is newer than this reader"
  expect 1 "$qsp" info "$here/../data/gguf/zero_size_tensor_past_eof" && err_has "truncated file"
  expect 1 "$qsp" synth --preset micro "$work/m.gguf" && err_has "exists"
  expect 0 "$qsp" synth --preset micro --force "$work/m.gguf"
  expect 1 "$qsp" prefill "$work/m.gguf" --random 300 && err_has "context length"
  expect 1 "$qsp" bench "$work/m.gguf" --batch 2x200+1x1@300 && err_has "context length"
  expect 1 "$qsp" generate --tokens-file "$work/missing.txt" && err_has "cannot open"
  expect 1 "$qsp" generate --prompt-file "$work/missing.txt" && err_has "cannot open"
  # No tokenizer (synthesized models, the built-in one): named, with the way out.
  expect 1 "$qsp" prefill --prompt hello && err_has "no tokenizer" && err_has "--tokens"
  expect 1 "$qsp" generate "$work/m.gguf" --prompt hello --backend cpu && err_has "no tokenizer" && err_has "--tokens"
  expect 1 "$qsp" tokenize "$work/m.gguf" hello && err_has "no tokenizer"
  # --backend cpu: on a GPU machine the micro preset's shape is refused by the CUDA backend first.
  expect 1 "$qsp" prefill "$work/m.gguf" --random 4 --backend cpu --logits-out "$work/no/such/dir/l.bin" && err_has "cannot create"
  if ! "$qsp" prefill --random 4 --backend cpu >/dev/null 2>&1; then fail "cpu backend"; fi
  ;;

commands)
  expect 0 "$qsp" synth --preset tiny --type q4_0 "$work/tiny.gguf" && out_has "wrote"
  expect 0 "$qsp" info "$work/tiny.gguf" && out_has "architecture: qwen3" && out_has "runnable:     yes" \
    && out_has "file type:    Q4_0 (general.file_type 2)" \
    && out_has "KV cache" && out_has "q4_0 x16"
  expect 0 "$qsp" info "$work/tiny.gguf" --tensors && out_has "blk.1.ffn_down.weight" && out_has "output.weight"
  # llama.cpp file types: the per-tensor mix of llama_tensor_get_type (docs/GGUF.md). Tiny (2 layers):
  # use_more_bits is layer 1 only, so output, blk.1.attn_v and blk.1.ffn_down are q6_K.
  expect 0 "$qsp" synth --preset tiny --type q4_k_m "$work/mix.gguf" && out_has "q4_k_m mix"
  expect 0 "$qsp" info "$work/mix.gguf" && out_has "file type:    Q4_K - Medium (general.file_type 15)" \
    && out_has "q4_K x13" && out_has "q6_K x3" && out_has "runnable:     yes"
  expect 0 "$qsp" info "$work/mix.gguf" --tensors
  grep -q "blk.1.ffn_down.weight *q6_K" "$work/out" || fail "q4_k_m: blk.1.ffn_down not q6_K"
  grep -q "blk.0.ffn_down.weight *q4_K" "$work/out" || fail "q4_k_m: blk.0.ffn_down not q4_K"
  expect 0 "$qsp" prefill "$work/mix.gguf" --random 24 --top 3 --backend cpu -t 2 && out_has "24 tokens"
  expect 0 "$qsp" synth --preset tiny --type Q3_K_M "$work/mix3.gguf"
  expect 0 "$qsp" info "$work/mix3.gguf" && out_has "Q3_K - Medium (general.file_type 12)" \
    && out_has "q3_K x9" && out_has "q4_K x4" && out_has "q5_K x2" && out_has "q6_K x1"
  # q6_K (the format's spelling) is every matrix; q6_k the file type (the same here: 256 | every column count).
  expect 0 "$qsp" synth --preset tiny --type q6_K "$work/q6f.gguf"
  expect 0 "$qsp" info "$work/q6f.gguf" && out_has "q6_K x16" && out_has "general.file_type 18"
  # micro (32 columns): llama.cpp's fallbacks, q4_K -> q5_0, q6_K -> q8_0.
  expect 0 "$qsp" synth --preset micro --type q4_k_m "$work/mixm.gguf"
  expect 0 "$qsp" info "$work/mixm.gguf" && out_has "q5_0 x5" && out_has "q8_0 x3"
  expect 1 "$qsp" synth --preset micro --type q2_k "$work/mixq2.gguf" && err_has "falls back to iq4_nl"
  expect 2 "$qsp" synth --preset tiny --type q4_k_x "$work/bad.gguf" && err_has "q4_k_m"
  expect 0 "$qsp" info && out_has "built-in tiny model"
  out_has "computable:   yes"
  # A valid file of types qsp does not compute (tests/data/gguf/make_files.py): described, and named.
  expect 0 "$qsp" info "$here/../data/gguf/types_mix" && out_has "nvfp4 x2 (144 B)" && out_has "mxfp4 x1" \
    && out_has "computable:   no, qsp does not compute iq4_nl (1 tensor), mxfp4 (1 tensor), nvfp4 (2 tensors)" \
    && out_has "runnable:     no: qsp does not compute iq4_nl"
  expect 0 "$qsp" info "$here/../data/gguf/types_mix" --tensors && out_has "c.weight" && out_has "nvfp4"
  expect 0 "$qsp" prefill "$work/tiny.gguf" --random 40 --seed 3 --chunk 7 --top 3 --backend cpu -t 2 \
    && out_has "40 tokens" && out_has "chunks of 7" && out_has "top-3"
  expect 0 "$qsp" prefill --random 16 --top 0
  grep -q "top-" "$work/out" && fail "--top 0 printed tokens"
  expect 0 "$qsp" generate "$work/tiny.gguf" --tokens 1,2,3 -n 3 --backend cpu && out_has "generated:" \
    && out_has "decode:" && out_has "prefill:"
  # The generated tokens continue the greedy chain: prefill of prompt + first two -> the third on top.
  read -r -a gen <<<"$(sed -n 's/^generated: //p' "$work/out")"
  if [ "${#gen[@]}" != 3 ]; then
    fail "generate printed ${#gen[@]} tokens, expected 3"
  else
    expect 0 "$qsp" prefill "$work/tiny.gguf" --tokens "1,2,3,${gen[0]},${gen[1]}" --top 1 --backend cpu
    grep -Eq "1\. token +${gen[2]} " "$work/out" || fail "greedy chain: expected top token ${gen[2]}"
  fi
  expect 0 "$qsp" bench "$work/tiny.gguf" -p 16,32 -r 2 --backend cpu && out_has "median ms" \
    && grep -Eq '^ +32 +2 ' "$work/out" || fail "bench table"
  expect 0 "$qsp" bench -p 8 -r 1 --warmup 0
  # Batched bench: N contexts of one model (one upload), qsp_prefill_batch against one at a time.
  expect 0 "$qsp" bench "$work/tiny.gguf" --batch 3 -p 8,16 -r 2 --backend cpu && out_has "speedup" \
    && out_has "tokens/s" && out_has "contexts: 3 of 16 tokens" && out_has "25 tensors uploaded, 50 registrations"
  grep -Eq '^3x16 +3 +48 +2 +[0-9.]+ +[0-9.]+ +[0-9.]+ +[0-9.]+ +[0-9.]+x$' "$work/out" || fail "bench --batch row"
  expect 0 "$qsp" bench --batch 2x12+5x1@12 -r 1 --warmup 0 --backend cpu && out_has "contexts: 7 of 13 tokens"
  grep -Eq '^2x12\+5x1@12 +7 +29 +1 ' "$work/out" || fail "bench --batch mixed row"

  # generate with several sequences: each equals `qsp generate` of its prompt alone (CPU: exact).
  # gen_alone ARGS...: the ids `qsp generate ARGS` prints, in $alone.
  gen_alone() { expect 0 "$qsp" generate "$work/tiny.gguf" --backend cpu "$@" && alone=$(sed -n 's/^generated: //p' "$work/out"); }
  # same_as_alone I ARGS...: sequence I of the last parallel run ($work/par) equals gen_alone ARGS.
  same_as_alone() {
    local i=$1; shift
    local got; got=$(sed -n "s/^generated\[$i\]: //p" "$work/par")
    gen_alone "$@"
    [ -n "$got" ] && [ "$got" = "$alone" ] || fail "generated[$i] '$got' != alone ($*) '$alone'"
  }
  expect 0 "$qsp" generate "$work/tiny.gguf" --backend cpu --parallel 3 --tokens 1,2,3 --tokens 4,5 \
    --tokens 6,7,8,9,10 -n 6 && out_has "3 prompts, 10 tokens in one batch" && out_has "batched steps"
  cp "$work/out" "$work/par"
  [ "$(grep -c '^generated\[' "$work/par")" = 3 ] || fail "--parallel 3 printed $(grep -c '^generated\[' "$work/par") sequences"
  same_as_alone 0 --tokens 1,2,3 -n 6
  same_as_alone 1 --tokens 4,5 -n 6
  same_as_alone 2 --tokens 6,7,8,9,10 -n 6
  # One prompt N times; --random gives sequence i the seed S+i; -n per sequence (they leave early).
  expect 0 "$qsp" generate "$work/tiny.gguf" --backend cpu --parallel 4 --tokens 9,8,7 -n 5 && cp "$work/out" "$work/par"
  [ "$(grep -c '^generated\[' "$work/par")" = 4 ] || fail "--parallel 4 of one prompt"
  for i in 0 1 2 3; do same_as_alone $i --tokens 9,8,7 -n 5; done
  expect 0 "$qsp" generate "$work/tiny.gguf" --backend cpu -P 3 --random 20 --seed 5 -n 7,1,4 && cp "$work/out" "$work/par"
  same_as_alone 0 --random 20 --seed 5 -n 7
  same_as_alone 1 --random 20 --seed 6 -n 1
  same_as_alone 2 --random 20 --seed 7 -n 4
  # --tokens-file: one prompt per line, commas or blanks; --eos ends a sequence at that id.
  printf '# prompts\n1,2,3\n\n4 5  6\n11, 12\n' >"$work/p.txt"
  gen_alone --tokens 1,2,3 -n 8
  eos=$(echo "$alone" | awk '{print $3}')
  expect 0 "$qsp" generate "$work/tiny.gguf" --backend cpu --tokens-file "$work/p.txt" -n 8 --eos "$eos" \
    && cp "$work/out" "$work/par"
  [ "$(grep -c '^generated\[' "$work/par")" = 3 ] || fail "--tokens-file: expected 3 sequences"
  same_as_alone 0 --tokens 1,2,3 -n 8 --eos "$eos"
  same_as_alone 1 --tokens 4,5,6 -n 8 --eos "$eos"
  same_as_alone 2 --tokens 11,12 -n 8 --eos "$eos"
  [ "$(sed -n 's/^generated\[0\]: //p' "$work/par" | wc -w)" -le 3 ] || fail "--eos $eos did not stop sequence 0"
  grep -q "stopped at an EOS id" "$work/par" || fail "--eos: no 'stopped at an EOS id'"
  expect 0 "$qsp" --backend cpu && out_has "tokens/s"
  # llama architecture end to end.
  expect 0 "$qsp" synth --preset tiny-llama --type q8_0 "$work/llama.gguf"
  expect 0 "$qsp" info "$work/llama.gguf" && out_has "interleaved" && out_has "runnable:     yes"
  expect 0 "$qsp" prefill "$work/llama.gguf" --random 8 --backend cpu
  ;;

logits_match)
  tokens=5,17,1999,3,42,7,7,7,1024,0,11,512,300
  for spec in "tiny q8_0 1" "tiny q4_0 9" "tiny-llama q4_0 2" "micro f16 4" "micro-llama bf16 5"; do
    read -r preset type seed <<<"$spec"
    [ "${preset#micro}" != "$preset" ] && tokens=5,17,63,3,42,7,7,7,0,11
    f="$work/$preset-$type.gguf"
    expect 0 "$qsp" synth --preset "$preset" --type "$type" --seed "$seed" "$f" || continue
    expect 0 "$api" "$preset" "$type" "$seed" "$tokens" 2 "$work/api.bin" || continue
    expect 0 "$qsp" prefill "$f" --tokens "$tokens" --backend cpu --threads 2 --logits-out "$work/cli.bin" || continue
    cmp -s "$work/api.bin" "$work/cli.bin" || fail "$spec: qsp prefill --logits-out differs from the C API"
    vocab=$("$qsp" info "$f" | sed -n 's/^vocab: *\([0-9]*\).*/\1/p')
    [ "$(stat -c %s "$work/cli.bin")" = $((vocab * 4)) ] || fail "$spec: logits file is not vocab_size float32"
    # Chunked prompts give the same logits (the CPU backend is exact).
    expect 0 "$qsp" prefill "$f" --tokens "$tokens" --backend cpu --threads 2 --chunk 4 --logits-out "$work/chunk.bin"
    cmp -s "$work/api.bin" "$work/chunk.bin" || fail "$spec: --chunk 4 changed the logits"
    # Other thread counts too.
    expect 0 "$qsp" prefill "$f" --tokens "$tokens" --backend cpu --threads 1 --logits-out "$work/t1.bin"
    cmp -s "$work/api.bin" "$work/t1.bin" || fail "$spec: --threads 1 changed the logits"
  done
  ;;

synth_determinism)
  expect 0 "$qsp" synth --preset tiny --type q4_0 --threads 1 "$work/a.gguf"
  expect 0 "$qsp" synth --preset tiny --type q4_0 --threads 3 "$work/b.gguf"
  cmp -s "$work/a.gguf" "$work/b.gguf" || fail "synth output depends on the thread count"
  expect 0 "$qsp" synth --preset tiny --type q4_0 --seed 2 "$work/c.gguf"
  cmp -s "$work/a.gguf" "$work/c.gguf" && fail "another seed gave the same file"
  [ "$(stat -c %s "$work/a.gguf")" = "$(stat -c %s "$work/c.gguf")" ] || fail "seed changed the size"
  ls "$work"/*.partial >/dev/null 2>&1 && fail "a .partial file was left behind"
  ;;

gguf_spec)
  py=${PYTHON:-python3}
  for spec in "tiny q4_0 qwen3" "tiny-llama q8_0 llama" "micro f16 qwen3" "micro-llama bf16 llama"; do
    read -r preset type arch <<<"$spec"
    f="$work/$preset-$type.gguf"
    expect 0 "$qsp" synth --preset "$preset" --type "$type" "$f" || continue
    expect 0 "$py" "$here/gguf_check.py" "$f" --expect-arch "$arch" || continue
    # Both readers see the same directory: name, type, shape, absolute offset, bytes.
    "$py" "$here/gguf_check.py" "$f" --list >"$work/py.txt"
    "$qsp" info "$f" --tensors | grep -E '^ +[0-9]+  ' | sed -E ':a; s/(\[[^] ]*) /\1/; ta' \
      | awk '{gsub(/[][]/, "", $4); print $2, $3, $4, $6, $5}' >"$work/qsp.txt"
    [ -s "$work/qsp.txt" ] || fail "$spec: no tensor listing from qsp info --tensors"
    diff "$work/py.txt" "$work/qsp.txt" >/dev/null || { fail "$spec: readers disagree"; diff "$work/py.txt" "$work/qsp.txt" | head; }
  done
  ;;

tokenizer)
  [ -x "$tokgguf" ] || { echo "tokenizer: needs the tok_gguf helper binary"; exit 2; }
  m="$work/m.gguf"
  expect 0 "$tokgguf" "$m" || exit 1
  expect 0 "$tokgguf" "$work/vocab.gguf" --vocab-only
  expect 0 "$tokgguf" "$work/l3.gguf" --template llama3
  expect 0 "$tokgguf" "$work/unknown.gguf" --template unknown
  expect 0 "$tokgguf" "$work/none.gguf" --template none
  expect 0 "$qsp" info "$m" && out_has "tokenizer:    gpt2 (qwen2), 2048 tokens" && out_has "chat template: ChatML"
  expect 0 "$qsp" info "$work/l3.gguf" && out_has "chat template: Llama 3"
  expect 0 "$qsp" info "$work/unknown.gguf" && out_has "chat template: not one qsp recognises"
  # qsp tokenize: ids and escaped pieces; vocabulary-only files too.
  expect 0 "$qsp" tokenize "$m" "hello world" && out_has "^ *259 'hello'$" && out_has "^ *264 ' world'$"
  [ "$(wc -l <"$work/out")" = 2 ] || fail "tokenize 'hello world': expected 2 tokens"
  expect 0 "$qsp" tokenize "$work/vocab.gguf" "hello world" --ids-only && out_has "^259,264$"
  expect 0 "$qsp" tokenize "$m" $'a\tb\n\xc3\xa9\\' && out_has "'\\\\t'" && out_has "'\\\\n'" \
    && out_has "^ *195 '\\\\xc3'$" && out_has "^ *169 '\\\\xa9'$" && out_has "'\\\\\\\\'"
  expect 0 "$qsp" tokenize "$m" "hi<|im_end|>" --ids-only && out_has "^104,105,60,124,"
  expect 0 "$qsp" tokenize "$m" "hi<|im_end|>" --parse-special && out_has "^ *269 '<|im_end|>'$"
  # BOS: added by default where the model adds one (llama3 variant), not with --no-special.
  expect 0 "$qsp" tokenize "$work/l3.gguf" "hello" --ids-only && out_has "^267,259$"
  expect 0 "$qsp" tokenize "$work/l3.gguf" "hello" --ids-only --no-special && out_has "^259$"
  printf 'hello world' >"$work/prompt.txt"
  expect 0 "$qsp" tokenize "$work/vocab.gguf" --prompt-file "$work/prompt.txt" --ids-only && out_has "^259,264$"
  # --prompt on prefill == --tokens with the same ids (bit for bit on the CPU); --prompt-file too.
  expect 0 "$qsp" prefill "$m" --tokens 259,264 --backend cpu --logits-out "$work/ids.bin"
  expect 0 "$qsp" prefill "$m" --prompt "hello world" --backend cpu --logits-out "$work/text.bin" \
    && out_has "prefill: 2 tokens" && out_has "  'tok"
  cmp -s "$work/ids.bin" "$work/text.bin" || fail "prefill --prompt differs from --tokens of the same ids"
  expect 0 "$qsp" prefill "$m" --prompt-file "$work/prompt.txt" --backend cpu --logits-out "$work/file.bin"
  cmp -s "$work/ids.bin" "$work/file.bin" || fail "prefill --prompt-file differs from --tokens of the same ids"
  # generate prints the text as it comes; with -v the ids too. Every id of this
  # vocabulary from 276 on is the plain token "tokN".
  expect 0 "$qsp" generate "$m" --prompt "hello world" -n 6 --backend cpu
  grep -q '^generated:' "$work/out" && fail "generate printed ids without -v"
  expect 0 "$qsp" generate "$m" --prompt "hello world" -n 6 --backend cpu -v && out_has "^prompt: 259 264$"
  read -r -a gen <<<"$(sed -n 's/^generated: //p' "$work/out")"
  [ "${#gen[@]}" = 6 ] || fail "generate -n 6 printed ${#gen[@]} ids"
  want=""
  plain=1
  for id in "${gen[@]}"; do
    [ "$id" -ge 276 ] || plain=0
    want+="tok$id"
  done
  if [ "$plain" = 1 ]; then
    out_has "^$want$"
  else
    echo "note: generated ids ${gen[*]} are not all plain tokens; text not compared"
  fi
  # The same ids as --tokens gives.
  expect 0 "$qsp" generate "$m" --tokens 259,264 -n 6 --backend cpu -v
  [ "$(sed -n 's/^generated: //p' "$work/out")" = "${gen[*]}" ] || fail "generate --prompt != --tokens of the same ids"
  # Stops at the tokenizer's EOS: a file whose EOS is the third generated id.
  expect 0 "$tokgguf" "$work/eos.gguf" --eos "${gen[2]}"
  expect 0 "$qsp" generate "$work/eos.gguf" --prompt "hello world" -n 6 --backend cpu -v \
    && out_has "^generated: ${gen[0]} ${gen[1]} ${gen[2]}$" && out_has "stopped at an EOS id"
  # --chat: ChatML around the prompt, the special tokens parsed.
  expect 0 "$qsp" tokenize "$m" $'<|im_start|>user\nhello world<|im_end|>\n<|im_start|>assistant\n' \
    --parse-special --ids-only
  chat_ids=$(tr ',' ' ' <"$work/out")
  expect 0 "$qsp" generate "$m" --prompt "hello world" --chat -n 2 --backend cpu -v && out_has "^prompt: $chat_ids$"
  case "$chat_ids" in 268\ *269*268*) ;; *) fail "ChatML ids '$chat_ids' lack <|im_start|> / <|im_end|>" ;; esac
  # Llama 3 headers, the BOS added once by the tokenizer.
  expect 0 "$qsp" tokenize "$work/l3.gguf" \
    $'<|start_header_id|>user<|end_header_id|>\n\nhello<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n' \
    --parse-special --ids-only
  l3_ids=$(tr ',' ' ' <"$work/out")
  case "$l3_ids" in 267\ 271\ *) ;; *) fail "Llama 3 ids '$l3_ids' do not start with BOS, <|start_header_id|>" ;; esac
  expect 0 "$qsp" prefill "$work/l3.gguf" --prompt hello --chat --backend cpu --top 0 -v
  expect 0 "$qsp" generate "$work/l3.gguf" --prompt hello --chat -n 1 --backend cpu -v && out_has "^prompt: $l3_ids$"
  # Errors: no or unknown chat template; a vocabulary-only file cannot run.
  expect 1 "$qsp" generate "$work/unknown.gguf" --prompt hi --chat --backend cpu && err_has "does not recognise the chat template"
  expect 1 "$qsp" prefill "$work/none.gguf" --prompt hi --chat --backend cpu && err_has "has no chat template"
  expect 1 "$qsp" prefill "$work/vocab.gguf" --prompt hi --backend cpu && err_has "vocab.gguf"
  expect 2 "$qsp" prefill "$m" --prompt "" --backend cpu && err_has "empty"
  ;;

devices)
  m="$work/tiny.gguf"
  expect 0 "$qsp" synth --preset tiny --type q4_0 "$m" || exit 1
  for c in info prefill generate bench; do
    expect 0 "$qsp" $c --help && out_has "--devices LIST" && out_has "--shards N"
  done
  # Usage errors (exit 2, one line naming the problem), on every command that takes the options.
  for c in prefill generate bench info; do
    args=()
    [ "$c" = prefill ] || [ "$c" = generate ] && args=(--random 4)
    expect 2 "$qsp" $c "$m" "${args[@]}" --devices 0,0 && err_has "names device 0 twice"
    expect 2 "$qsp" $c "$m" "${args[@]}" --devices x && err_has "--devices expects comma-separated CUDA device ordinals"
    expect 2 "$qsp" $c "$m" "${args[@]}" --devices=-1 && err_has "ordinals are not negative"
    expect 2 "$qsp" $c "$m" "${args[@]}" --devices 0,32 && err_has "32 is past 31"
    expect 2 "$qsp" $c "$m" "${args[@]}" --devices 0,,1 && err_has "--devices expects"
    expect 2 "$qsp" $c "$m" "${args[@]}" --devices "" && err_has "--devices expects"
    expect 2 "$qsp" $c "$m" "${args[@]}" --shards 0 && err_has "--shards expects an integer in \[1, 32\]"
    expect 2 "$qsp" $c "$m" "${args[@]}" --shards 33 && err_has "--shards"
    expect 2 "$qsp" $c "$m" "${args[@]}" --devices 0,1 --shards 4 && err_has "as many devices as shards"
  done
  expect 2 "$qsp" prefill "$m" --random 4 --device 1 --devices 0,1 && err_has "--device and --devices exclude each other"
  expect 2 "$qsp" prefill "$m" --random 4 --device 40 --shards 2 && err_has "0 to 31"

  # The CPU shard mode is the unsplit model, bit for bit: the same top-5 lines and logits.
  topk() { grep -E '^ +[0-9]+\. token ' "$work/out"; }
  expect 0 "$qsp" prefill "$m" --random 40 --seed 3 --backend cpu -t 2 --logits-out "$work/whole.bin" || exit 1
  topk >"$work/whole.top"
  [ -s "$work/whole.top" ] || fail "prefill printed no top-K lines"
  grep -q '^split:' "$work/out" && fail "an unsplit prefill printed a split line"
  for split in "--shards 2" "--devices 0,1" "--devices 3 --shards 2" "--shards 2 --chunk 7" "--shards 1"; do
    # shellcheck disable=SC2086
    expect 0 "$qsp" prefill "$m" --random 40 --seed 3 --backend cpu -t 2 $split --logits-out "$work/split.bin" || continue
    topk | diff -q "$work/whole.top" - >/dev/null || { fail "prefill $split: top-K differs from the unsplit model"; topk; }
    cmp -s "$work/whole.bin" "$work/split.bin" || fail "prefill $split: logits differ from the unsplit model"
    case "$split" in
    *"--shards 1"*) ;;
    *) out_has "2 shards" && out_has "^split: 2 shards, one after another on the CPU" ;;
    esac
  done
  # generate: the same greedy ids, one sequence and several (qsp_prefill_batch).
  expect 0 "$qsp" generate "$m" --tokens 1,2,3 --tokens 4,5 -n 6 --backend cpu && grep '^generated' "$work/out" >"$work/g1"
  expect 0 "$qsp" generate "$m" --tokens 1,2,3 --tokens 4,5 -n 6 --backend cpu --shards 2 \
    && grep '^generated' "$work/out" >"$work/g2"
  [ -s "$work/g1" ] && diff -q "$work/g1" "$work/g2" >/dev/null || fail "generate --shards 2 differs from the unsplit model"
  expect 0 "$qsp" generate "$m" --tokens 1,2,3 -n 5 --backend cpu && grep '^generated' "$work/out" >"$work/g1"
  expect 0 "$qsp" generate "$m" --tokens 1,2,3 -n 5 --backend cpu --devices 0,1 && grep '^generated' "$work/out" >"$work/g2"
  [ -s "$work/g1" ] && diff -q "$work/g1" "$work/g2" >/dev/null || fail "generate --devices 0,1 differs from the unsplit model"
  expect 0 "$qsp" bench "$m" -p 16 -r 1 --warmup 0 --backend cpu --shards 2 && out_has "2 shards" && out_has "median ms"
  expect 0 "$qsp" bench "$m" --batch 2 -p 8 -r 1 --warmup 0 --backend cpu --devices 0,1 && out_has "speedup"

  # Splits the model does not divide: a clean runtime error (exit 1, one line) naming what.
  expect 1 "$qsp" prefill "$m" --random 4 --backend cpu --shards 3 && err_has "n_kv_heads 2 does not divide" \
    && err_has "3 shards"
  expect 1 "$qsp" generate "$m" --tokens 1,2 --backend cpu --devices 0,1,2,3 && err_has "n_kv_heads 2 does not divide"
  expect 1 "$qsp" bench "$m" -p 8 -r 1 --backend cpu --shards 8 && err_has "n_kv_heads 2 does not divide"
  expect 0 "$qsp" synth --preset micro "$work/micro.gguf"
  expect 1 "$qsp" prefill "$work/micro.gguf" --random 4 --backend cpu --shards 2 && err_has "n_kv_heads 1 does not divide"
  # A K-quant wo / w_down needs whole 256-element blocks per shard: tiny's 256 columns of wo over 2 do not.
  expect 0 "$qsp" synth --preset tiny --type q4_k_m "$work/mix.gguf"
  expect 1 "$qsp" prefill "$work/mix.gguf" --random 4 --backend cpu --shards 2 && err_has "whole 256-element blocks"
  # CUDA with several devices: not yet (QSP_ERR_UNSUPPORTED), or no device here: a clean error (once
  # multi-GPU runs, a host with two GPUs succeeds); never a crash.
  "$qsp" prefill "$m" --random 4 --backend cuda --devices 0,1 >"$work/out" 2>"$work/err"
  rc=$?
  if [ "$rc" = 1 ]; then
    [ "$(wc -l <"$work/err")" = 1 ] && grep -q '^qsp: error: .*CUDA' "$work/err" \
      || { fail "--backend cuda --devices 0,1: not one clean error line"; cat "$work/err"; }
  elif [ "$rc" != 0 ]; then
    fail "--backend cuda --devices 0,1 exited $rc"
    cat "$work/err"
  fi

  # qsp info: per device, its shard's weights and its KV cache per 1024 tokens.
  # bytes_of PATTERN: the sum of the bytes column of `info --tensors` ($work/tensors) over names matching PATTERN.
  expect 0 "$qsp" info "$m" --tensors && cp "$work/out" "$work/tensors"
  bytes_of() { grep -E '^ +[0-9]+  ' "$work/tensors" | awk -v p="$1" '$2 ~ p {s += $(NF-1)} END {printf "%d\n", s}'; }
  total=$(bytes_of '.')
  replicated=$(bytes_of '^(token_embd|output_norm)\.weight$|_norm\.weight$')
  [ "$total" -gt 0 ] && [ "$replicated" -gt 0 ] || fail "no tensor bytes from info --tensors"
  # dev_lines: "LABEL WEIGHT_BYTES KV_BYTES" of each device / shard line of the last info.
  dev_lines() { sed -nE 's/^((device|shard) [0-9]+): +weights [^(]*\(([0-9]+) B\), KV cache [^(]*\(([0-9]+) B\) per 1024 tokens$/\1 \3 \4/p' "$work/out"; }
  sum_col() { awk -v c="$1" '{s += $c} END {printf "%d\n", s}'; }
  expect 0 "$qsp" info "$m" && out_has "^split: *unsplit on device 0" && out_has "fp16"
  dev_lines >"$work/d1"
  [ "$(wc -l <"$work/d1")" = 1 ] || fail "info: expected one device line"
  read -r _ _ w1 kv1 <"$work/d1"
  [ "$w1" = "$total" ] || fail "info: the one device holds $w1 B of weights, the file $total"
  # tiny: 2 layers x 2 KV heads x 64 x 1024 tokens x K and V x fp16.
  [ "$kv1" = $((2 * 2 * 64 * 1024 * 2 * 2)) ] || fail "info: KV cache $kv1 B per 1024 tokens"
  for split in "--shards 2" "--devices 0,3"; do
    # shellcheck disable=SC2086
    expect 0 "$qsp" info "$m" $split || continue
    dev_lines >"$work/d2"
    [ "$(wc -l <"$work/d2")" = 2 ] || { fail "info $split: expected 2 device lines"; cat "$work/d2"; continue; }
    s_split=$(sed -nE 's/^ +split: .*\(([0-9]+) B\) over the shards.*/\1/p' "$work/out")
    s_repl=$(sed -nE 's/^ +replicated: .*\(([0-9]+) B\) on each.*/\1/p' "$work/out")
    [ "$s_repl" = "$replicated" ] || fail "info $split: replicated $s_repl B, token_embd + the norms are $replicated B"
    [ "$((s_split + s_repl))" = "$total" ] || fail "info $split: split $s_split + replicated $s_repl != $total B"
    sum=$(sum_col 3 <"$work/d2")
    [ "$sum" = "$((s_split + 2 * s_repl))" ] || fail "info $split: devices hold $sum B, expected split + 2 x replicated"
    [ "$(awk '{print $3}' "$work/d2" | sort -u | wc -l)" = 1 ] || fail "info $split: the shards' weights differ"
    [ "$(sum_col 4 <"$work/d2")" = "$kv1" ] || fail "info $split: the shards' KV caches do not add up to the unsplit one"
  done
  expect 0 "$qsp" info "$m" --shards 2 && out_has "^shard 0: " && out_has "^shard 1: " && out_has "in turn on device 0"
  expect 0 "$qsp" info "$m" --devices 0,3 && out_has "^device 0: " && out_has "^device 3: " \
    && out_has "one per CUDA device (0, 3)"
  expect 0 "$qsp" info "$m" --devices 2 && out_has "^split: *unsplit on device 2" && out_has "^device 2: "
  expect 0 "$qsp" info "$m" --device 5 --shards 2 && out_has "2 shards in turn on device 5" && out_has "^shard 1: "
  expect 1 "$qsp" info "$m" --shards 3 && err_has "n_kv_heads 2 does not divide"
  expect 1 "$qsp" info "$work/mix.gguf" --shards 2 && err_has "not whole q4_K blocks"
  ;;

*)
  echo "unknown mode $mode"; exit 2 ;;
esac

if [ "$failures" != 0 ]; then
  echo "$mode: $failures failure(s)"
  exit 1
fi
echo "$mode: OK"
