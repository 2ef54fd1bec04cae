#!/bin/sh
# What ctest's bindings.go runs: go test (the package's tests and its
# Example), then the README's GGUF example on the fixture's model, whose
# output must be the top-5 that bindings/gguf/gguf_ref.c wrote.
# usage: run-tests.sh GO   (from bindings/go, with the environment of bindings/CMakeLists.txt)
set -eu
go=$1
"$go" vet ./...
"$go" test -count=1 -v .
out=$("$go" run ./examples/gguf_prefill "$QSP_GGUF_MODEL")
echo "$out"
[ "$out" = "$(cat "$QSP_GGUF_REF_TOP5")" ] || { echo "run-tests.sh: gguf_prefill printed something else; expected:"; cat "$QSP_GGUF_REF_TOP5"; exit 1; }
