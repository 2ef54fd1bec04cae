#!/usr/bin/env bash
# Builds every libFuzzer target (the GGUF reader, the C API driven by call
# sequences, the weight-format decoders and quantizers, the batched prefill,
# the tokenizer) with clang++-14 (AddressSanitizer + UndefinedBehaviorSanitizer) and fuzzes
# them one after the other for SECONDS in all (default 60, shared out equally,
# at least 5 s each: CI's step stays one minute), starting from the committed
# corpora in fuzz/corpus/NAME with fuzz/NAME.dict and fuzz/NAME.options when
# they exist. Installs nothing.
# New inputs go to the build directory, never into the repository; a crash
# leaves its input in BUILD/artifacts/ and makes the script fail.
#
# usage: fuzz/run-fuzz.sh [SECONDS]     (QSP_FUZZ_BUILD_DIR overrides ./build-fuzz)
set -euo pipefail
secs=${1:-60}
root=$(cd "$(dirname "$0")/.." && pwd)
build=${QSP_FUZZ_BUILD_DIR:-$root/build-fuzz}
cxx=${QSP_FUZZ_CXX:-clang++-14}
command -v "$cxx" >/dev/null || { echo "run-fuzz: $cxx not found (Debian package clang-14)"; exit 1; }
gen=()
command -v ninja >/dev/null && gen=(-G Ninja)
cmake -S "$root/fuzz" -B "$build" "${gen[@]}" -DCMAKE_CXX_COMPILER="$cxx" -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
targets=(gguf api formats batch tokenizer)
cmake --build "$build" --target "${targets[@]/#/fuzz_}" -j"$(nproc)"
mkdir -p "$build/artifacts"
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=1:allocator_may_return_null=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
export QSP_LOG=
each=$((secs / ${#targets[@]}))
[ "$each" -ge 5 ] || each=5
for name in "${targets[@]}"; do
  flags=(-max_total_time="$each" -timeout=20 -rss_limit_mb=2048 -print_final_stats=1 -artifact_prefix="$build/artifacts/")
  [ -f "$root/fuzz/$name.dict" ] && flags+=(-dict="$root/fuzz/$name.dict")
  [ -f "$root/fuzz/$name.options" ] && while read -r f; do
    case "$f" in -*) flags+=("$f") ;; esac
  done <"$root/fuzz/$name.options"
  mkdir -p "$build/corpus-$name" "$root/fuzz/corpus/$name"
  echo "run-fuzz: fuzzing fuzz_$name for ${each}s"
  "$build/fuzz_$name" "${flags[@]}" "$build/corpus-$name" "$root/fuzz/corpus/$name"
done
