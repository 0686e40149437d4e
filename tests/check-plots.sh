#!/bin/sh
# check-plots.sh: `make plots` writes its figures and CSV into build/plots/
# and touches no tracked file (no docs/*.png, no plots/*.tsv rewritten, no
# new file outside build/): `git status --porcelain` reads the same before
# and after.  Run from the project root (`make check-plots`; CI runs it).
# About 10 minutes on 2 cores (the multislice and scaling studies most of
# it); the twenty-minute GPT-3 study is `make plots-slow`, not checked here.
set -eu
command -v git >/dev/null 2>&1 && git rev-parse --git-dir >/dev/null 2>&1 || {
  echo "check-plots: not a git checkout: nothing to compare" >&2
  exit 2
}
before=$(git status --porcelain --untracked-files=all)
make plots
after=$(git status --porcelain --untracked-files=all)
if [ "$before" != "$after" ]; then
  echo "check-plots: make plots changed the working tree; git status before:" >&2
  printf '%s\n' "$before" >&2
  echo "and after:" >&2
  printf '%s\n' "$after" >&2
  exit 1
fi
n=0
for f in batch-sweep workers-sweep scaling breakdown links-heatmap topology-whatif \
         multislice-study pipeline-timeline long-context validation; do
  [ -s "build/plots/$f.png" ] || { echo "check-plots: build/plots/$f.png missing" >&2; exit 1; }
  n=$((n + 1))
done
if grep -l '/tmp' build/plots/*.tsv 2>/dev/null; then
  echo "check-plots: a temporary path in the timeline's rows" >&2
  exit 1
fi
echo "check-plots: ok: $n figures in build/plots/, no tracked file touched"
