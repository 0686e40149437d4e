#!/bin/sh
# sweep.sh EXPERIMENT KEY VALUE...: runs `podsim run EXPERIMENT --set KEY=VALUE`
# for each value (from the project's top level) and prints one CSV row per
# run, read from the summary JSON (one key per line).
set -eu
exp=$1 key=$2
shift 2
top=$(cd "$(dirname "$0")/.." && pwd)
echo "$key,step_time_s,compute_s,collective_s,infeed_stall_s,host_s,examples_per_s,mxu_utilization"
for v in "$@"; do
  (cd "$top" && ./podsim run "$exp" --no-trace --json --set "$key=$v") | tr -d ' ,' | awk -F: -v v="$v" '
    /"step_time_s"/ {st=$2} /"compute"/ {c=$2} /"collective"/ {co=$2} /"infeed_stall"/ {is=$2}
    /"host"/ {h=$2} /"examples_per_s"/ {e=$2} /"mxu_utilization"/ {u=$2}
    END {printf "%s,%s,%s,%s,%s,%s,%s,%s\n", v, st, c, co, is, h, e, u}'
done
