#!/bin/sh
# scaling.sh [OUT.csv]: data-parallel weak scaling study.  For each
# experiments/scaling-*.json model setting and each v3 slice (tpu-v3-8 ..
# tpu-v3-2048, a device is a TensorCore) and v4 slice (tpu-v4-8 ..
# tpu-v4-8192, a device is a megacore chip), runs
#
#   podsim run EXP --json --no-trace --set topology=T \
#       --set strategy.replicas=DEVICES --set global_batch=PER_DEVICE*DEVICES
#
# where PER_DEVICE is the experiment file's global_batch / strategy.replicas,
# and writes one CSV row per run to OUT.csv (default build/plots/scaling.csv,
# replaced only when every run succeeded):
#
#   model,generation,topology,devices,global_batch,step_time_s,examples_per_s,
#   compute_s,collective_s,<the other step-time breakdown keys>_s,mxu_utilization
#
# A run that fails stops the study: podsim's message goes to stderr and the
# script exits with podsim's status (no partial CSV).  Uses only sh, awk, sed
# and grep (no jq, no python).  Runs a copy of podsim taken at the start, so a
# rebuild during the study cannot mix two versions.  Environment: PODSIM
# (default ../podsim); SCALING_EXPERIMENTS, SCALING_V3, SCALING_V4
# (space-separated names) to run a subset.
set -eu

here=$(cd "$(dirname "$0")" && pwd)
top=$(cd "$here/.." && pwd)
podsim=${PODSIM:-$top/podsim}
out=${1:-$top/build/plots/scaling.csv}
mkdir -p "$(dirname "$out")"

experiments=${SCALING_EXPERIMENTS:-"scaling-resnet50-32 scaling-resnet50-128 scaling-bert-large scaling-transformer-big"}
v3=${SCALING_V3:-"tpu-v3-8 tpu-v3-32 tpu-v3-64 tpu-v3-128 tpu-v3-256 tpu-v3-512 tpu-v3-1024 tpu-v3-2048"}
v4=${SCALING_V4:-"tpu-v4-8 tpu-v4-16 tpu-v4-32 tpu-v4-64 tpu-v4-128 tpu-v4-256 tpu-v4-512 tpu-v4-1024 tpu-v4-2048 tpu-v4-4096 tpu-v4-8192"}

tmp=$(mktemp -d "${TMPDIR:-/tmp}/scaling.XXXXXX")
trap 'rm -rf "$tmp" "$out.tmp"' EXIT
trap 'exit 130' INT TERM

# every point from the same binary, even if podsim is rebuilt meanwhile
[ -x "$podsim" ] || { echo "scaling.sh: no podsim at $podsim (run make all)" >&2; exit 1; }
cp "$podsim" "$tmp/podsim"
podsim=$tmp/podsim

die() { echo "scaling.sh: $*" >&2; exit 1; }

# json_flat < JSON: one "key value" line per number in a podsim JSON object,
# nested keys as "parent.key" (e.g. breakdown.compute, strategy.replicas).
# Works whether the JSON is pretty-printed or on one line; string values and
# booleans are skipped.
json_flat() {
  awk '
    { s = s $0 " " }
    END {
      depth = 0; key = ""
      while (length(s) > 0) {
        if (match(s, /^[ \t\r\n:,]+/)) { s = substr(s, RLENGTH + 1); continue }
        c = substr(s, 1, 1)
        if (c == "\"") {
          # a string: a key if a colon follows, else a value to skip
          if (!match(s, /^"([^"\\]|\\.)*"/)) break
          tok = substr(s, 2, RLENGTH - 2); s = substr(s, RLENGTH + 1)
          if (match(s, /^[ \t\r\n]*:/)) key = tok
          continue
        }
        if (c == "{") { depth++; path[depth] = key; s = substr(s, 2); continue }
        if (c == "}") { depth--; s = substr(s, 2); continue }
        if (match(s, /^-?[0-9][0-9.eE+-]*/)) {
          v = substr(s, 1, RLENGTH); s = substr(s, RLENGTH + 1)
          p = ""
          for (i = 2; i <= depth; i++) p = p path[i] "."
          print p key, v
          continue
        }
        # brackets, true, false, null: skip
        if (match(s, /^[A-Za-z]+/)) { s = substr(s, RLENGTH + 1); continue }
        s = substr(s, 2)
      }
    }'
}

# get KEY < flat: the value of KEY, or nothing
get() { awk -v k="$1" '$1 == k { print $2; exit }'; }

# devices of a topology, from `podsim describe topology` ("... devices N ...")
devices_of() {
  (cd "$top" && "$podsim" describe topology "$1") >"$tmp/topo" 2>"$tmp/err" ||
    { cat "$tmp/err" >&2; die "podsim describe topology $1 failed"; }
  d=$(sed -n 's/.*[ ,(]devices \([0-9][0-9]*\).*/\1/p' "$tmp/topo" | head -n 1)
  [ -n "$d" ] || die "no device count in 'podsim describe topology $1'"
  echo "$d"
}

: >"$tmp/rows"
header=""
for exp in $experiments; do
  (cd "$top" && "$podsim" describe experiment "$exp") >"$tmp/desc" 2>"$tmp/err" ||
    { cat "$tmp/err" >&2; die "podsim describe experiment $exp failed"; }
  json_flat <"$tmp/desc" >"$tmp/desc.flat"
  gb0=$(get global_batch <"$tmp/desc.flat")
  r0=$(get strategy.replicas <"$tmp/desc.flat")
  [ -n "$gb0" ] && [ -n "$r0" ] || die "$exp: no global_batch or strategy.replicas in its description"
  [ $((gb0 % r0)) -eq 0 ] || die "$exp: global_batch $gb0 is not a multiple of strategy.replicas $r0"
  per_device=$((gb0 / r0))
  model=$(basename "$exp" .json)
  model=${model#scaling-}

  for t in $v3 $v4; do
    gen=$(echo "$t" | sed -n 's/^tpu-\(v[0-9][0-9a-z]*\)-.*/\1/p')
    [ -n "$gen" ] || die "cannot tell the generation of topology $t"
    d=$(devices_of "$t")
    gb=$((per_device * d))
    echo "scaling.sh: $exp on $t ($d devices, global batch $gb)" >&2
    status=0
    (cd "$top" && "$podsim" run "$exp" --json --no-trace --set "topology=$t" \
      --set "strategy.replicas=$d" --set "global_batch=$gb") >"$tmp/run" 2>"$tmp/err" ||
      status=$?
    if [ "$status" -ne 0 ]; then
      cat "$tmp/err" >&2
      echo "scaling.sh: $exp on $t ($d devices, global batch $gb) failed (exit $status)" >&2
      exit "$status"
    fi
    json_flat <"$tmp/run" >"$tmp/flat"

    # the breakdown keys, compute and collective first, then the rest in
    # podsim's order; every run must report the same ones
    keys=$(awk '
      /^breakdown\./ { k = substr($1, 11); if (k == "compute") c = 1; else if (k == "collective") co = 1; else rest = rest " " k }
      END { if (!c || !co) exit 1; print "compute collective" rest }' "$tmp/flat") ||
      die "$exp on $t: no breakdown.compute or breakdown.collective in podsim's JSON"
    h="model,generation,topology,devices,global_batch,step_time_s,examples_per_s"
    for k in $keys; do h="$h,${k}_s"; done
    h="$h,mxu_utilization"
    if [ -z "$header" ]; then
      header=$h
    elif [ "$h" != "$header" ]; then
      die "$exp on $t: breakdown keys changed between runs ($h vs $header)"
    fi

    row="$model,$gen,$t,$d,$gb"
    for k in step_time_s examples_per_s; do
      v=$(get "$k" <"$tmp/flat"); [ -n "$v" ] || die "$exp on $t: no $k in podsim's JSON"
      row="$row,$v"
    done
    for k in $keys; do
      v=$(get "breakdown.$k" <"$tmp/flat"); [ -n "$v" ] || die "$exp on $t: no breakdown.$k"
      row="$row,$v"
    done
    v=$(get mxu_utilization <"$tmp/flat"); [ -n "$v" ] || die "$exp on $t: no mxu_utilization"
    echo "$row,$v" >>"$tmp/rows"
  done
done

{ echo "$header"; cat "$tmp/rows"; } >"$out.tmp"
mv "$out.tmp" "$out"
echo "scaling.sh: wrote $(($(wc -l <"$out") - 1)) rows to $out" >&2
