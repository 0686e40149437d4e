#!/bin/sh
# test_install.sh: `make install` into a temporary prefix gives a podsim that
# runs from any directory and a libpodsim that links through pkg-config.
#
# Installs the build being tested (under `make test` the make variables of
# the calling make reach this one through MAKEFLAGS: check-asan installs
# build-asan), then, from a directory outside the tree and without
# $PODSIM_DATA_DIR: lists and runs experiments with the installed binary,
# moves the prefix and lists again (the data directory is found at run time),
# builds docs/install.md's embedding example with `pkg-config --cflags --libs
# podsim` (dynamic; and against libpodsim.a with --static), runs it, checks
# the soname and that only public headers went in, and uninstalls.
# Speaks TAP for prove; arguments (prove's --tap) are ignored.
#
# Invariant: nothing is installed outside a fresh mktemp directory, which
# is removed at exit (`make install` builds first if the build is stale).
set -u
root=$(cd "$(dirname "$0")/.." && pwd)
tmp=$(mktemp -d "${TMPDIR:-/tmp}/podsim-install.XXXXXX") || exit 1
trap 'rm -rf "$tmp"' EXIT
prefix=$tmp/prefix
log=$tmp/log
# the sanitizer build's flags (check-asan), for the programs built here
cflags=${PODSIM_TEST_LDFLAGS:-}
unset PODSIM_DATA_DIR DESTDIR
export PKG_CONFIG_PATH="$prefix/lib/pkgconfig${PKG_CONFIG_PATH:+:$PKG_CONFIG_PATH}"

echo "1..13"
n=0
failed=0
ok() { n=$((n + 1)); echo "ok $n - $1"; }
not_ok() {
  n=$((n + 1)); failed=$((failed + 1)); echo "not ok $n - $1"
  sed 's/^/# /' "$log" | tail -n 30
}
check() { # check DESCRIPTION COMMAND...: ok if COMMAND succeeds
  desc=$1; shift
  if "$@" >"$log" 2>&1; then ok "$desc"; else not_ok "$desc"; fi
}
has() { # has PATTERN: the last command's output holds a line matching it
  grep -q -- "$1" "$log"
}

check "make install PREFIX=$prefix" make -C "$root" install PREFIX="$prefix" DESTDIR=

mkdir -p "$tmp/elsewhere" && cd "$tmp/elsewhere" || exit 1

"$prefix/bin/podsim" list experiments >"$log" 2>&1
if grep -qx default "$log"; then ok "podsim list experiments lists default from another directory"
else not_ok "podsim list experiments lists default from another directory"; fi

if "$prefix/bin/podsim" run default --no-trace --steps 2 --set numerics.enabled=false \
     >"$log" 2>&1 && has '^step time'; then ok "podsim run default from another directory"
else not_ok "podsim run default from another directory"; fi

"$prefix/bin/podsim" --help >"$log" 2>&1
if has 'PODSIM_DATA_DIR' && has 'share/podsim'; then ok "podsim --help documents the data directory"
else not_ok "podsim --help documents the data directory"; fi

# the example is docs/install.md's first C block after "## Embedding"
awk '/^## Embedding/ { in_section = 1 }
     in_section && /^```c$/ { in_block = 1; next }
     in_block && /^```$/ { exit }
     in_block { print }' "$root/docs/install.md" >ex.c
if [ -s ex.c ] && grep -q 'ps_run' ex.c; then ok "docs/install.md has the embedding example"
else echo "(no C block after '## Embedding' in docs/install.md)" >"$log"
  not_ok "docs/install.md has the embedding example"; fi

# shellcheck disable=SC2046,SC2086 # word splitting of the flags is wanted
check "cc ex.c \$(pkg-config --cflags --libs podsim)" \
  cc -std=c11 -Wall -Wextra -Werror $cflags -o ex ex.c $(pkg-config --cflags --libs podsim)

if LD_LIBRARY_PATH="$prefix/lib" ./ex >"$log" 2>&1 && has 'step time [0-9.]* us'; then ok "the example runs and prints a step time"
else not_ok "the example runs and prints a step time"; fi

LD_LIBRARY_PATH="$prefix/lib" ldd ./ex >"$log" 2>&1
if has "libpodsim.so.0 => $prefix/lib/libpodsim.so.0"; then ok "the example links libpodsim.so.0 dynamically"
else not_ok "the example links libpodsim.so.0 dynamically"; fi

readelf -d "$prefix/lib/libpodsim.so" >"$log" 2>&1
if has 'SONAME.*\[libpodsim\.so\.0\]'; then ok "libpodsim.so has the soname libpodsim.so.0"
else not_ok "libpodsim.so has the soname libpodsim.so.0"; fi

# static: libpodsim.a and the private requirements (pkg-config --static);
# linked into a program outside PREFIX/bin, it needs $PODSIM_DATA_DIR
static_libs=$(pkg-config --static --libs podsim | sed "s|-lpodsim|$prefix/lib/libpodsim.a|")
# shellcheck disable=SC2046,SC2086
if cc -std=c11 $cflags -o ex-static ex.c $(pkg-config --cflags podsim) $static_libs \
     >"$log" 2>&1 && PODSIM_DATA_DIR="$prefix/share/podsim" ./ex-static >>"$log" 2>&1 &&
   ! ldd ./ex-static | grep -q libpodsim && has 'step time'; then
  ok "the example links libpodsim.a with pkg-config --static"
else not_ok "the example links libpodsim.a with pkg-config --static"; fi

(cd "$prefix/include/podsim" && find . -path '*cli*' -o -name '*-private.h') >"$log" 2>&1
if [ ! -s "$log" ] && [ -f "$prefix/include/podsim/podsim.h" ]; then
  ok "only public headers are installed, with podsim/podsim.h"
else not_ok "only public headers are installed, with podsim/podsim.h"; fi

# the prefix can move: the data directory is found from the binary's path
mv "$prefix" "$tmp/moved" && "$tmp/moved/bin/podsim" list experiments >"$log" 2>&1
mv_status=$?
mv "$tmp/moved" "$prefix"
if [ $mv_status -eq 0 ] && grep -qx default "$log"; then ok "a moved prefix still finds its data"
else not_ok "a moved prefix still finds its data"; fi

make -C "$root" uninstall PREFIX="$prefix" DESTDIR= >"$log" 2>&1
find "$prefix" -type f -o -type l >>"$log"
if [ "$(find "$prefix" -type f -o -type l | wc -l)" -eq 0 ]; then ok "make uninstall removes every file"
else not_ok "make uninstall removes every file"; fi

[ "$failed" -eq 0 ]
