#!/bin/sh
# test_python.sh: the podsim Python package (python/podsim over
# build/libpodsim.so through ctypes) under Debian's python3 and pytest:
# python/tests/test_podsim.py, which compares it with the podsim command
# line ($PODSIM).  Speaks TAP for prove, one line per pytest test;
# arguments (prove's --tap) are ignored.
#
# Invariant: the package is the tree's, not an installed one, and loads
# the library of the build being tested ($PODSIM_TEST_LIB, which make test
# sets; else build/libpodsim.so beside the package); under the sanitizers (check-asan,
# whose libpodsim cannot be loaded into an uninstrumented python3) the
# test is skipped, saying so.
set -u
root=$(cd "$(dirname "$0")/.." && pwd)
case "${PODSIM_TEST_LDFLAGS:-}" in
  *sanitize*) echo "1..0 # SKIP the sanitizers' libpodsim does not load into python3"; exit 0 ;;
esac
if ! /usr/bin/python3 -c 'import pytest' 2>/dev/null; then
  echo "1..1"
  echo "not ok 1 - python3-pytest is missing (make deps installs it)"
  exit 1
fi
if [ -n "${PODSIM_TEST_LIB:-}" ]; then
  export PODSIM_LIB="$PODSIM_TEST_LIB"
else
  unset PODSIM_LIB
fi
out=$(cd "$root" && PYTHONDONTWRITEBYTECODE=1 \
  /usr/bin/python3 -m pytest -p no:cacheprovider -rA -q python/tests 2>&1)
status=$?
tests=$(printf '%s\n' "$out" | grep -E '^(PASSED|FAILED|ERROR|SKIPPED) ')
n=$(printf '%s\n' "$tests" | grep -c .)
echo "1..$n"
i=0
printf '%s\n' "$tests" | while read -r verdict name rest; do
  i=$((i + 1))
  case $verdict in
    PASSED) echo "ok $i - $name" ;;
    SKIPPED) echo "ok $i - $name # SKIP $rest" ;;
    *) echo "not ok $i - $name $rest" ;;
  esac
done
if [ $status -ne 0 ]; then
  printf '%s\n' "$out" | sed 's/^/# /'
fi
exit $status
