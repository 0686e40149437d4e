#!/bin/sh
# pipeline-timeline.sh [EXPERIMENT] [OUT.png]: one pipelined training step
# as a timeline, drawn from podsim's traces: the experiment (default
# vit-pipeline) runs 3 steps timing-only with the GPipe schedule and again
# with 1F1B, each writing a trace; `podsim timeline` takes replica 0's
# compute ops of the last step from each trace, and pipeline-timeline.gp
# draws stages as rows and micro-batches as coloured boxes (forward solid,
# backward hatched, recomputation hollow), GPipe above 1F1B, into OUT.png
# (default build/plots/pipeline-timeline.png; .svg for an OUT ending so).
# The rows go beside OUT as pipeline-timeline-gpipe.tsv and -1f1b.tsv;
# nothing in the source tree is written.  Extra podsim flags may be given
# in PODSIM_FLAGS (e.g. "--set strategy.micro_batches=4").
set -eu

here=$(cd "$(dirname "$0")" && pwd)
top=$(cd "$here/.." && pwd)
podsim=${PODSIM:-$top/podsim}
exp=${1:-vit-pipeline}
out=${2:-$top/build/plots/pipeline-timeline.png}
mkdir -p "$(dirname "$out")"
outdir=$(cd "$(dirname "$out")" && pwd)
out=$outdir/$(basename "$out")
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT INT TERM

for sched in gpipe 1f1b; do
  # shellcheck disable=SC2086
  "$podsim" run "$exp" --steps 3 --set steps_per_run=1 \
      --set numerics.enabled=false --set strategy.schedule=$sched \
      ${PODSIM_FLAGS:-} --trace "$tmp/$sched.json" > "$tmp/$sched.txt" 2> "$tmp/$sched.err" ||
    { cat "$tmp/$sched.err" >&2; exit 1; }
  # run in $tmp so the rows' header names the trace, not a temporary path
  (cd "$tmp" && "$podsim" timeline "$sched.json") > "$outdir/pipeline-timeline-$sched.tsv.tmp"
  mv "$outdir/pipeline-timeline-$sched.tsv.tmp" "$outdir/pipeline-timeline-$sched.tsv"
done
title=$(sed -n 's/^podsim [^:]*: [^:]*: \(model .*\), global batch \([0-9]*\).*/\1, global batch \2/p' \
        "$tmp/gpipe.txt" | sed 's/, gpipe)/)/')
cd "$outdir"
gnuplot -e "outfile='$out'; subtitle='$title'" -e "set loadpath '$here'" "$here/pipeline-timeline.gp"
echo "pipeline-timeline.sh: wrote $out"
