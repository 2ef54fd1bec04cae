#!/usr/bin/env bash
# The Debian symbols file (packaging/libqsp1.symbols) matches the built library:
#   check_debian_symbols.sh LIB SYMBOLS_FILE VERSION_SCRIPT PROJECT_VERSION
# - its header names the library's SONAME and the package libqsp<major>;
# - it lists exactly the exported symbols, each with its version node: a
#   removed or re-versioned symbol fails (an ABI break), and so does a new one
#   until it is added with the version that introduced it
#   (packaging/update-symbols; docs/ABI.md, "The symbols file");
# - no symbol is dated before its node exists (a QSP_1.1 symbol >= 1.1.0).
set -euo pipefail
export LC_ALL=C
lib=$1 symbols=$2 map=$3 version=$4
fail=0
soname=$(readelf -d "$lib" | sed -n 's/.*SONAME.*\[\(.*\)\]/\1/p')
major=${soname##*.so.}
want_head="$soname libqsp$major #MINVER#"
head=$(head -1 "$symbols")
[ "$head" = "$want_head" ] || { echo "symbols file header is '$head', expected '$want_head'"; fail=1; }

have=$(nm -D --defined-only --with-symbol-versions "$lib" | awk '{print $3}' | sed 's/@@*/@/' \
  | awk '/@/ {print; next} {print $0 "@" $0}' | sort -u)
listed=$(sed -n 's/^ \([^ ]*\) .*/\1/p' "$symbols" | sort)
if [ "$have" != "$listed" ]; then
  echo "the symbols file and the library differ (< only in the file: removed or re-versioned;"
  echo "> only in the library: new, run packaging/update-symbols BUILD_DIR):"
  diff <(echo "$listed") <(echo "$have") | grep '^[<>]' || true
  fail=1
fi
[ -z "$(sed -n 's/^ \([^ ]*\) .*/\1/p' "$symbols" | sort | uniq -d)" ] || { echo "duplicate entries"; fail=1; }

nodes=$(sed -n 's/^[[:space:]]*\(QSP_[0-9][0-9.]*\)[[:space:]]*{.*/\1/p' "$map")
while read -r sym ver; do
  node=${sym#*@}
  grep -qxF "$node" <<<"$nodes" || { echo "$sym: node $node is not in $(basename "$map")"; fail=1; continue; }
  [[ $ver =~ ^[0-9]+\.[0-9]+\.[0-9]+$ ]] || { echo "$sym: version '$ver' is not X.Y.Z"; fail=1; continue; }
  first=${node#QSP_}.0
  if [ "$(printf '%s\n%s\n' "$ver" "$first" | sort -V | head -1)" != "$first" ]; then
    echo "$sym: version $ver is older than its node $node ($first)"; fail=1
  fi
  if [ "$(printf '%s\n%s\n' "$ver" "$version" | sort -V | tail -1)" != "$version" ]; then
    echo "note: $sym is dated $ver, newer than the project version $version (bump it before the release)"
  fi
done < <(sed -n 's/^ \([^ ]*\) \([^ ]*\).*/\1 \2/p' "$symbols")
[ "$fail" = 0 ] || exit 1
echo "OK: $(echo "$listed" | wc -l) symbols of $soname match $(basename "$symbols")"
