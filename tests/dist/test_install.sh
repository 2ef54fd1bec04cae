#!/usr/bin/env bash
# Installs the build tree into a temporary prefix, then builds and runs a C
# program through `pkg-config --cflags --libs qsp` and a C++ program through
# find_package(qsp 1 CONFIG); both must run against the installed library.
#   test_install.sh BUILD_DIR SOURCE_DIR [CUDA_LIBDIR]
# CUDA_LIBDIR (CUDA builds): where libcudart_static.a is, for the static link.
set -euo pipefail
build=$1 src=$2 cudalib=${3:-}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cmake --install "$build" --prefix "$tmp/prefix" >/dev/null
pcdir=$(dirname "$(find "$tmp/prefix" -name qsp.pc | head -1)")
export PKG_CONFIG_PATH=$pcdir
cc -std=c99 -Wall -Wextra -Werror "$src/tests/dist/consumer.c" -o "$tmp/c_consumer" $(pkg-config --cflags --libs qsp)
libdir=$(pkg-config --variable=libdir qsp)
LD_LIBRARY_PATH=$libdir "$tmp/c_consumer"
# The static archive through Libs.private.
[ -z "$cudalib" ] || export LIBRARY_PATH=$cudalib${LIBRARY_PATH:+:$LIBRARY_PATH}
cc -std=c99 "$src/tests/dist/consumer.c" -o "$tmp/c_static" $(pkg-config --cflags qsp) "$libdir/libqsp.a" \
  $(pkg-config --libs-only-other --libs-only-L --static qsp | sed 's/-lqsp//') $(pkg-config --libs --static qsp | sed 's/-lqsp//')
"$tmp/c_static"
cmake -S "$src/tests/dist/cmake_consumer" -B "$tmp/cm" -G Ninja -DCMAKE_PREFIX_PATH="$tmp/prefix" >/dev/null
cmake --build "$tmp/cm" >/dev/null
LD_LIBRARY_PATH=$libdir "$tmp/cm/consumer"
# The installed lib must not be the build tree's: check the loader's choice.
# (not `ldd | grep -q`: grep quitting early SIGPIPEs ldd and pipefail fails it)
picked=$(LD_LIBRARY_PATH=$libdir ldd "$tmp/c_consumer" | grep libqsp)
case "$picked" in *"$tmp/prefix"*) ;; *) echo "wrong libqsp picked: $picked"; exit 1 ;; esac
echo "OK: installed tree works through pkg-config and find_package"
