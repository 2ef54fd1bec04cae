#!/usr/bin/env bash
# The scripts the GPU machine runs (scripts/gpu-*) run only there, where a
# syntax error costs device minutes: check here that every bash script in
# scripts/ parses (bash -n), that the Python each embeds as a quoted heredoc
# (<<'PY' ... PY) compiles, and that gpu-session prints its usage.
set -uo pipefail
dir=${1:?usage: check_scripts.sh SCRIPTS_DIR}
fail=0
for f in "$dir"/*; do
  [ -f "$f" ] && head -1 "$f" | grep -q 'bash' || continue
  bash -n "$f" || { echo "FAIL: bash -n $f"; fail=1; }
  python3 - "$f" <<'PYCHECK' || { echo "FAIL: embedded Python in $f"; fail=1; }
import sys
text = open(sys.argv[1]).read()
n = 0
while True:
    start = text.find("<<'PY'\n")
    if start < 0:
        break
    body = text[start + len("<<'PY'\n"):]
    end = body.find("\nPY\n")
    if end < 0:
        sys.exit("unterminated <<'PY' heredoc")
    compile(body[:end], f"{sys.argv[1]}:PY#{n}", "exec")
    text = body[end:]
    n += 1
PYCHECK
done
out=$("$dir/gpu-session" 2>&1)
rc=$?
if [ $rc -ne 2 ] || ! grep -q "suite" <<<"$out"; then
  echo "FAIL: gpu-session without a mode: exit $rc, usage: $out"
  fail=1
fi
[ $fail -eq 0 ] && echo "scripts: OK"
exit $fail
