#!/usr/bin/env bash
# Builds and tests the Rust bindings offline, against Debian's crates
# (librust-*-dev in /usr/share/cargo/registry). What ctest's bindings.rust runs.
#
# usage: run-tests.sh SOURCE_DIR BUILD_DIR CARGO RUSTC REGISTRY
#
# Everything cargo writes (CARGO_HOME with the source replacement, a copy of
# the crates, Cargo.lock, target/) lives in BUILD_DIR: the source tree stays
# clean, and the lockfile is resolved against the registry that is installed.
set -euo pipefail
src=$1 build=$2 cargo=$3 rustc=$4 registry=$5

export CARGO_HOME=$build/cargo-home
mkdir -p "$CARGO_HOME" "$build/crates"
cat >"$CARGO_HOME/config.toml" <<CFG
[source.crates-io]
replace-with = "debian-packages"

[source.debian-packages]
directory = "$registry"

[net]
offline = true
CFG

# A copy (mtimes kept, so cargo rebuilds only what changed) of the workspace.
rm -rf "$build/crates/qsp" "$build/crates/qsp-sys"
cp -p "$src/Cargo.toml" "$build/crates/"
cp -pR "$src/qsp" "$src/qsp-sys" "$build/crates/"

export CARGO_TARGET_DIR=$build/target
export RUSTC=$rustc
rustdoc=$(dirname "$rustc")/rustdoc
[ -x "$rustdoc" ] && export RUSTDOC=$rustdoc
export CARGO_TERM_COLOR=never
unset RUSTFLAGS CARGO_BUILD_TARGET
jobs=${QSP_CARGO_JOBS:-2}

cd "$build/crates"
echo "run-tests.sh: $("$cargo" --version), $("$rustc" --version), registry $registry"
# One test thread: the leak test reads the process-wide weight cache.
"$cargo" test --offline -j"$jobs" --workspace -- --test-threads=1
# The README's example, checked against what the other bindings print.
out=$("$cargo" run --offline -q -j"$jobs" -p qsp --example prefill)
echo "$out"
expected="64 logits; greedy next token: 4
error: OutOfRange - layer 1 out of range (the model has 1 layers)"
[ "$out" = "$expected" ] || { echo "run-tests.sh: the example printed something else; expected:"; echo "$expected"; exit 1; }
# The README's GGUF example on the fixture's model: the top-5 that gguf_ref.c wrote.
out=$("$cargo" run --offline -q -j"$jobs" -p qsp --example gguf_prefill -- "$QSP_GGUF_MODEL")
echo "$out"
[ "$out" = "$(cat "$QSP_GGUF_REF_TOP5")" ] || { echo "run-tests.sh: gguf_prefill printed something else; expected:"; cat "$QSP_GGUF_REF_TOP5"; exit 1; }
