#!/bin/sh
# Builds the C# binding and its test program with mcs, and runs the tests
# with mono (what ctest's bindings.csharp runs), and the README's examples.
# usage: run-tests.sh SOURCE_DIR BUILD_DIR [MCS] [MONO]
set -eu
src=$1 out=$2 mcs=${3:-mcs} mono=${4:-mono}
mkdir -p "$out"
"$mcs" -nologo -warnaserror+ -unsafe -optimize+ -target:library -out:"$out/Qsp.dll" "$src/Qsp.cs" "$src/QspNative.cs" \
  "$src/QspContext.cs" "$src/QspGguf.cs" "$src/QspTokenizer.cs"
"$mcs" -nologo -warnaserror+ -optimize+ -r:"$out/Qsp.dll" -out:"$out/QspTests.exe" "$src/tests/Tests.cs" "$src/tests/GgufTests.cs" \
  "$src/tests/BatchTests.cs" "$src/tests/TokenizerTests.cs"
"$mcs" -nologo -warnaserror+ -optimize+ -r:"$out/Qsp.dll" -out:"$out/GgufPrefill.exe" "$src/examples/GgufPrefill.cs"
"$mcs" -nologo -warnaserror+ -optimize+ -r:"$out/Qsp.dll" -out:"$out/Prefill.exe" "$src/examples/Prefill.cs"
# The README's example, checked against what the other bindings print.
got=$("$mono" "$out/Prefill.exe")
echo "$got"
expected="64 logits; greedy next token: 4
error: OutOfRange - layer 1 out of range (the model has 1 layers)"
[ "$got" = "$expected" ] || { echo "run-tests.sh: the example printed something else; expected:"; echo "$expected"; exit 1; }
# The README's GGUF example on the fixture's model: the top-5 that gguf_ref.c wrote.
got=$("$mono" "$out/GgufPrefill.exe" "$QSP_GGUF_MODEL")
echo "$got"
[ "$got" = "$(cat "$QSP_GGUF_REF_TOP5")" ] || { echo "run-tests.sh: GgufPrefill printed something else; expected:"; cat "$QSP_GGUF_REF_TOP5"; exit 1; }
exec "$mono" --debug "$out/QspTests.exe"
