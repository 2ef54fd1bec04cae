#!/usr/bin/env bash
# Deep fuzzing: every libFuzzer target, many workers, long runs (issue 22).
#
#   fuzz/fuzz-deep.sh build DIR
#       Builds every fuzz target of fuzz/CMakeLists.txt (clang, libFuzzer,
#       AddressSanitizer + UndefinedBehaviorSanitizer) into DIR/bin. The
#       binaries are portable: the sanitizer and libFuzzer runtimes are linked
#       in statically, and so are libstdc++ and libgcc, so they run on another
#       Linux machine with the same or a newer glibc and no clang (the GPU
#       machine). QSP_FUZZ_CXX picks the compiler (default clang++-14, then clang++).
#
#   fuzz/fuzz-deep.sh run [-t SECONDS] [-j WORKERS] [-p] [-o OUT] BIN...
#       Fuzzes each BIN (e.g. DIR/bin/fuzz_gguf) for SECONDS (default 600)
#       with libFuzzer -fork=WORKERS (default: the number of cores), one target
#       after the other (-p: all at once, the workers shared out among them;
#       the merge after the run takes a few more seconds per target),
#       starting from its committed corpus fuzz/corpus/NAME
#       (NAME: the binary's name without "fuzz_"), with fuzz/NAME.dict and the
#       flags in fuzz/NAME.options when they exist. Crashes, leaks, timeouts
#       and out-of-memory inputs do not stop the run; they are kept. Then what
#       the run found is minimized against the committed corpus (-merge=1:
#       only inputs that add coverage), and OUT (default ./fuzz-out) receives
#         new-corpus.tar.gz   the new corpus files, as fuzz/corpus/NAME/<sha1>;
#                             extract at the repository root and commit
#         findings/NAME/      every crash-*, leak-*, timeout-*, oom-* input
#         findings.tar.gz     the same, when there is any
#         summary.md          one table row per target: executions, new
#                             corpus files, findings
#         logs/NAME.log       libFuzzer's output
#       Exits 1 when any target has a finding (after running all of them).
#       Must run from a copy of the repository (it reads fuzz/corpus/).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)

usage() {
  sed -n '2,/^set -euo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//'
  exit 2
}

cmd_build() {
  [ $# -eq 1 ] || usage
  local dir=$1 cxx=${QSP_FUZZ_CXX:-}
  if [ -z "$cxx" ]; then
    for c in clang++-14 clang++; do command -v "$c" >/dev/null && { cxx=$c; break; }; done
  fi
  [ -n "$cxx" ] || { echo "fuzz-deep: no clang++ found (Debian package clang-14)" >&2; exit 1; }
  local gen=()
  command -v ninja >/dev/null && gen=(-G Ninja)
  cmake -S "$root/fuzz" -B "$dir" "${gen[@]}" -DCMAKE_CXX_COMPILER="$cxx" -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DCMAKE_EXE_LINKER_FLAGS="-static-libstdc++ -static-libgcc" >/dev/null
  cmake --build "$dir" -j"$(nproc)"
  mkdir -p "$dir/bin"
  local n=0
  for f in "$dir"/fuzz_*; do
    [ -f "$f" ] && [ -x "$f" ] || continue
    cp -f "$f" "$dir/bin/"
    n=$((n + 1))
  done
  [ "$n" -gt 0 ] || { echo "fuzz-deep: the build produced no fuzz_* target" >&2; exit 1; }
  echo "fuzz-deep: $n targets in $dir/bin:"
  for f in "$dir"/bin/fuzz_*; do
    echo "  $f ($(du -h "$f" | cut -f1); needs: $(ldd "$f" 2>/dev/null | awk '/=>/ {print $1}' | tr '\n' ' '))"
  done
}

# fuzz_one BIN SECONDS WORKERS OUT: one target's session; its summary row goes
# to OUT/rows/NAME.md. Returns 1 on a finding or a failed merge.
fuzz_one() {
  local bin=$1 secs=$2 workers=$3 out=$4
  local base name corpus work found log status=0
  base=$(basename "$bin")
  name=${base#fuzz_}
  corpus="$root/fuzz/corpus/$name"
  work="$out/work/$name"
  found="$out/findings/$name"
  log="$out/logs/$name.log"
  rm -rf "$work"
  mkdir -p "$corpus" "$work/new" "$work/merged" "$found"
  local flags=(-timeout=25 -rss_limit_mb=2560 -print_final_stats=1)
  [ -f "$root/fuzz/$name.dict" ] && flags+=(-dict="$root/fuzz/$name.dict")
  if [ -f "$root/fuzz/$name.options" ]; then
    local line
    while read -r line; do
      case $line in ''|'#'*) ;; *) flags+=("$line") ;; esac
    done <"$root/fuzz/$name.options"
  fi

  echo "fuzz-deep: $base for ${secs}s with $workers workers (corpus fuzz/corpus/$name: $(ls "$corpus" | wc -l) files)"
  # Fork mode: the parent keeps fuzzing after a crash, leak or timeout
  # (-ignore_*) and each finding is written to $found by its job.
  local rc=0
  "$bin" "${flags[@]}" -fork="$workers" -max_total_time="$secs" -ignore_crashes=1 -ignore_timeouts=1 \
    -ignore_ooms=1 -artifact_prefix="$found/" "$work/new" "$corpus" >"$log" 2>&1 || rc=$?
  # Executions: fork mode's status lines start with "#<total executions>".
  local execs
  execs=$(grep -aoE '^#[0-9]+' "$log" | tail -1 | tr -d '#' || true)
  execs=${execs:-0}

  # Minimize: what adds coverage over the committed corpus, nothing else.
  cp -a "$corpus/." "$work/merged/"
  if ! "$bin" "${flags[@]}" -merge=1 "$work/merged" "$work/new" >>"$log" 2>&1; then
    echo "fuzz-deep: $base: the merge failed (see $log)" >&2
    status=1
  fi
  local n_new=0 f
  mkdir -p "$out/staging/fuzz/corpus/$name"
  for f in "$work/merged"/*; do
    [ -e "$f" ] || continue
    if [ ! -e "$corpus/$(basename "$f")" ]; then
      cp "$f" "$out/staging/fuzz/corpus/$name/"
      n_new=$((n_new + 1))
    fi
  done

  local crashes leaks timeouts ooms
  crashes=$(find "$found" -name 'crash-*' | wc -l)
  leaks=$(find "$found" -name 'leak-*' | wc -l)
  timeouts=$(find "$found" -name 'timeout-*' | wc -l)
  ooms=$(find "$found" -name 'oom-*' | wc -l)
  echo "| $name | $secs | $workers | $execs | $n_new | $crashes | $leaks | $timeouts | $ooms |" >"$out/rows/$name.md"
  echo "fuzz-deep: $base: $execs executions, $n_new new corpus files, findings: $crashes crashes, $leaks leaks," \
    "$timeouts timeouts, $ooms ooms (libFuzzer exit $rc)"
  if [ $((crashes + leaks + timeouts + ooms)) -gt 0 ]; then
    status=1
    grep -aE 'ERROR: (AddressSanitizer|LeakSanitizer|libFuzzer)|runtime error:|SUMMARY:' "$log" | sort | uniq -c |
      head -20 || true
  fi
  return $status
}

cmd_run() {
  local secs=600 workers out=./fuzz-out parallel=0
  workers=$(nproc)
  local opt
  OPTIND=1
  while getopts "t:j:o:ph" opt; do
    case $opt in
      t) secs=$OPTARG ;;
      j) workers=$OPTARG ;;
      o) out=$OPTARG ;;
      p) parallel=1 ;;
      *) usage ;;
    esac
  done
  shift $((OPTIND - 1))
  [ $# -gt 0 ] || usage
  local bin
  for bin in "$@"; do
    [ -x "$bin" ] || { echo "fuzz-deep: $bin is not an executable" >&2; exit 2; }
  done
  mkdir -p "$out"
  out=$(cd "$out" && pwd)
  rm -rf "$out/rows" "$out/staging"
  mkdir -p "$out/logs" "$out/findings" "$out/staging" "$out/rows"
  export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:allocator_may_return_null=1:handle_abort=1}
  export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
  export QSP_LOG=

  local failed=0
  if [ "$parallel" = 1 ]; then
    # Every target at once, the workers shared out among them.
    local each=$((workers / $#)) pids=()
    [ "$each" -ge 1 ] || each=1
    for bin in "$@"; do
      fuzz_one "$bin" "$secs" "$each" "$out" &
      pids+=($!)
    done
    local pid
    for pid in "${pids[@]}"; do wait "$pid" || failed=1; done
  else
    for bin in "$@"; do fuzz_one "$bin" "$secs" "$workers" "$out" || failed=1; done
  fi

  local summary="$out/summary.md"
  {
    echo "| target | seconds | workers | executions | new corpus files | crashes | leaks | timeouts | ooms |"
    echo "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"
    for bin in "$@"; do
      local name
      name=$(basename "$bin")
      cat "$out/rows/${name#fuzz_}.md" 2>/dev/null || true
    done
  } >"$summary"
  (cd "$out/staging" && tar -czf "$out/new-corpus.tar.gz" fuzz)
  if [ -n "$(find "$out/findings" -type f)" ]; then
    (cd "$out" && tar -czf findings.tar.gz findings)
  fi
  rm -rf "$out/staging" "$out/rows"
  echo
  cat "$summary"
  echo
  echo "fuzz-deep: new corpus files: $out/new-corpus.tar.gz (tar -xzf it at the repository root, then commit)"
  if [ "$failed" -ne 0 ]; then
    echo "fuzz-deep: FAILED: findings kept in $out/findings (and findings.tar.gz); logs in $out/logs" >&2
    exit 1
  fi
}

[ $# -gt 0 ] || usage
sub=$1
shift
case $sub in
  build) cmd_build "$@" ;;
  run) cmd_run "$@" ;;
  -h|--help|help) usage ;;
  *) usage ;;
esac
