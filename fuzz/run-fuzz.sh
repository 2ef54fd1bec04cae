#!/usr/bin/env bash
# Builds the libFuzzer targets (the GGUF reader, and the C API driven by call
# sequences) with clang++-14 (AddressSanitizer +
# UndefinedBehaviorSanitizer) and fuzzes each for SECONDS (default 60), starting
# from the committed corpora in fuzz/corpus/{gguf,api}. Installs nothing.
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
cmake --build "$build" --target fuzz_gguf fuzz_api -j"$(nproc)"
mkdir -p "$build/corpus" "$build/corpus-api" "$build/artifacts"
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=1:allocator_may_return_null=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
export QSP_LOG=
echo "run-fuzz: fuzzing the GGUF reader for ${secs}s"
"$build/fuzz_gguf" -max_total_time="$secs" -max_len=16384 -timeout=20 -rss_limit_mb=2048 \
  -dict="$root/fuzz/gguf.dict" -print_final_stats=1 -artifact_prefix="$build/artifacts/" \
  "$build/corpus" "$root/fuzz/corpus/gguf"
echo "run-fuzz: fuzzing the C API for ${secs}s"
"$build/fuzz_api" -max_total_time="$secs" -max_len=4096 -timeout=20 -rss_limit_mb=2048 \
  -print_final_stats=1 -artifact_prefix="$build/artifacts/" "$build/corpus-api" "$root/fuzz/corpus/api"
