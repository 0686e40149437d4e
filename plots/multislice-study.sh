#!/bin/sh
# multislice-study.sh [OUT.csv [GEN.csv [FIGURE]]]: data-parallel training across
# slices of tpu-v5e-256 joined by the data-center network (DCN), and one
# generation comparison at equal chip count.  For docs/multislice-study.md.
#
# Grid: ResNet-50 (experiments/scaling-resnet50-128.json, 128 images per chip)
# and BERT-large (experiments/scaling-bert-large.json, 16 sequences of 512 per
# chip), replicate on every chip, timing only in bf16, on S = 1, 2, 4, 8, 16
# slices of tpu-v5e-256 with each host's NIC at 25, 50, 100, 200 Gb/s (one
# way; bytes/s = Gb/s * 1e9 / 8).  The batch per chip is the experiment
# file's (global_batch / strategy.replicas); the global batch grows with S:
#
#   podsim run EXP --json --no-trace --set topology=tpu-v5e-256
#       --set topology.slices=S --set strategy.replicas=256*S
#       --set global_batch=PER_CHIP*256*S --set steps=2
#       --set topology.dcn.nic_bandwidth_Bps=GBPS*1e9/8
#
# (steps=2: the first step warms up, the second is measured).  The
# collective is `auto`, which picks the hierarchical all-reduce whenever the
# group spans slices.  One slice has no DCN traffic: its row is run once
# per bandwidth all the same, so every line starts at S = 1.
#
# Generations: the same two models on 128 chips of one slice each of
# tpu-v4-256, tpu-v5e-128, tpu-v5p-256 and tpu-v6e-128 (v4 and v5p name
# TensorCores, v5e and v6e chips; see `podsim describe topology`), same
# batch per chip.
#
# Writes OUT.csv (default build/plots/multislice-study.csv):
#   model,slices,chips,nic_Gbps,global_batch,step_time_s,examples_per_s,
#   examples_per_s_per_chip,compute_s,collective_s,collective_algorithm
# and GEN.csv (default build/plots/multislice-generations.csv):
#   model,topology,generation,chips,global_batch,step_time_s,examples_per_s,
#   compute_s,collective_s,mxu_utilization
# each replaced only when every run succeeded, then draws FIGURE (default
# multislice-study.png beside OUT.csv) with multislice-study.gp (MULTISLICE_FORMAT=svg
# for .svg).  A run that fails stops the study with podsim's message and
# status.  About 6 minutes of CPU on a shared 2-core machine (the 16-slice
# BERT-large runs take most of it).  Uses sh, awk, sed and grep.
# Environment: PODSIM (default ../podsim); MULTISLICE_SLICES, MULTISLICE_GBPS
# to run a subset.
set -eu

here=$(cd "$(dirname "$0")" && pwd)
top=$(cd "$here/.." && pwd)
podsim=${PODSIM:-$top/podsim}
out=${1:-$top/build/plots/multislice-study.csv}
gen_out=${2:-$top/build/plots/multislice-generations.csv}
slices=${MULTISLICE_SLICES:-"1 2 4 8 16"}
gbps=${MULTISLICE_GBPS:-"25 50 100 200"}
fmt=${MULTISLICE_FORMAT:-png}
figure=${3:-$(dirname "$out")/multislice-study.$fmt}
mkdir -p "$(dirname "$out")" "$(dirname "$gen_out")" "$(dirname "$figure")"

tmp=$(mktemp -d "${TMPDIR:-/tmp}/multislice.XXXXXX")
trap 'rm -rf "$tmp" "$out.tmp" "$gen_out.tmp"' EXIT
trap 'exit 130' INT TERM

die() { echo "multislice-study.sh: $*" >&2; exit 1; }
[ -x "$podsim" ] || die "no podsim at $podsim (run make all)"
cp "$podsim" "$tmp/podsim"
podsim=$tmp/podsim

# get KEY < JSON: the first number after "KEY": (podsim's --json, one key a line)
get() {
  v=$(sed -n "s/^ *\"$1\": *\([-0-9.eE+]*\).*/\1/p" "$tmp/run" | head -n 1)
  [ -n "$v" ] || die "no $1 in podsim's JSON ($2)"
  echo "$v"
}
# gets ALGO: the collective algorithm's name
algo() { sed -n 's/^ *"collective_algorithm": *"\([^"]*\)".*/\1/p' "$tmp/run" | head -n 1; }

# run WHAT ARGS...: podsim run ARGS --json --no-trace into $tmp/run
run() {
  what=$1; shift
  echo "multislice-study.sh: $what" >&2
  status=0
  (cd "$top" && "$podsim" run "$@" --json --no-trace --set steps=2) >"$tmp/run" 2>"$tmp/err" ||
    status=$?
  if [ "$status" -ne 0 ]; then
    cat "$tmp/err" >&2
    echo "multislice-study.sh: $what failed (exit $status)" >&2
    exit "$status"
  fi
}

# model name, experiment, batch per chip
models="resnet50:scaling-resnet50-128:128 bert-large:scaling-bert-large:16"

echo "model,slices,chips,nic_Gbps,global_batch,step_time_s,examples_per_s,examples_per_s_per_chip,compute_s,collective_s,collective_algorithm" >"$out.tmp"
for m in $models; do
  name=${m%%:*}; rest=${m#*:}; exp=${rest%%:*}; per_chip=${rest#*:}
  for g in $gbps; do
    for s in $slices; do
      chips=$((256 * s)); gb=$((per_chip * chips))
      run "$name on $s x tpu-v5e-256, $g Gb/s NIC, global batch $gb" "$exp" \
        --set topology=tpu-v5e-256 --set "topology.slices=$s" --set "strategy.replicas=$chips" \
        --set "global_batch=$gb" --set "topology.dcn.nic_bandwidth_Bps=$(awk -v g="$g" 'BEGIN { printf "%.6g", g * 1e9 / 8 }')"
      w="$name $s slices $g Gb/s"
      eps=$(get examples_per_s "$w")
      echo "$name,$s,$chips,$g,$gb,$(get step_time_s "$w"),$eps,$(awk -v e="$eps" -v c="$chips" 'BEGIN { printf "%.6g", e / c }'),$(get compute "$w"),$(get collective "$w"),$(algo)" >>"$out.tmp"
    done
  done
done

echo "model,topology,generation,chips,global_batch,step_time_s,examples_per_s,compute_s,collective_s,mxu_utilization" >"$gen_out.tmp"
for m in $models; do
  name=${m%%:*}; rest=${m#*:}; exp=${rest%%:*}; per_chip=${rest#*:}
  for t in tpu-v4-256 tpu-v5e-128 tpu-v5p-256 tpu-v6e-128; do
    gb=$((per_chip * 128))
    run "$name on $t (128 chips), global batch $gb" "$exp" --set "topology=$t" \
      --set strategy.replicas=128 --set "global_batch=$gb"
    gen=$(echo "$t" | sed 's/^tpu-\(v[0-9][a-z]*\)-.*/\1/')
    w="$name on $t"
    echo "$name,$t,$gen,128,$gb,$(get step_time_s "$w"),$(get examples_per_s "$w"),$(get compute "$w"),$(get collective "$w"),$(get mxu_utilization "$w")" >>"$gen_out.tmp"
  done
done

mv "$out.tmp" "$out"
mv "$gen_out.tmp" "$gen_out"
echo "multislice-study.sh: wrote $out and $gen_out" >&2
(cd "$here" && gnuplot -e "fmt='$fmt'" -e "csv='$out'" -e "gen_csv='$gen_out'" \
   -e "outfile='$figure'" multislice-study.gp)
