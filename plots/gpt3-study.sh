#!/bin/sh
# gpt3-study.sh [OUT.csv [FIGURE]]: GPT-3 175B on tpu-v4-4096 over every
# tensor x fsdp x data mesh of the slice's 2048 devices that fits HBM.  For
# docs/gpt3-study.md.
#
# Grid: plots/gpt3-175b-v4-4096.json (here, not in experiments/, every file
# of which `make test` runs, since one step takes minutes; shard, bf16, Adam, global batch
# 2048 sequences of 2048 tokens, full rematerialization, two steps: the first
# warms up, the second is measured), tensor in 1, 2, 4, 8, 16 x fsdp in the
# powers of two up to 2048; data is what the two leave (2048 / (tensor x
# fsdp)), so a point with tensor x fsdp above 2048 is skipped.  A mesh whose
# memory does not fit is found by `podsim describe` (which checks HBM without
# simulating) and listed with its need; the others run through
#
#   podsim sweep plots/gpt3-175b-v4-4096.json --vary strategy.mesh.tensor=T
#       --vary strategy.mesh.fsdp=F,... --out RAW
#
# one tensor size at a time.  RAW (OUT with .csv replaced by -sweep.csv)
# holds podsim sweep's rows; sweep resumes it, so a run cut short picks up
# where it stopped when GPT3_RESUME=1 (otherwise it starts afresh).
#
# Writes OUT.csv (default build/plots/gpt3-study.csv), one row per mesh that
# fits:
#   tensor,fsdp,data,step_time_s,mfu,hfu,compute_s,collective_s,
#   exposed_data_s,exposed_fsdp_s,exposed_tensor_s,busy_data_s,busy_fsdp_s,
#   busy_tensor_s,hbm_peak_GiB,events
# and OUT with -unfit.csv for .csv: tensor,fsdp,data,need_GiB (the HBM per
# device podsim says the mesh needs; the slice has 32 GiB), then draws
# FIGURE (default gpt3-study.png beside OUT) with gpt3-study.gp
# (GPT3_FORMAT=svg for .svg).  Each fitting point simulates 2048 devices
# for two steps (119 million to 3.5 billion events): 20 s to 7 minutes a
# point, 22 minutes for the fourteen with GPT3_JOBS=2 on a shared 2-core
# machine.  Uses sh,
# awk, sed, sort.
# Environment: PODSIM (default ../podsim); GPT3_TENSOR, GPT3_FSDP to run a
# subset; GPT3_JOBS (default 1) points at once (each needs about 2.2 GB);
# GPT3_REMAT (default the experiment's "full") for strategy.rematerialize.
set -eu

here=$(cd "$(dirname "$0")" && pwd)
top=$(cd "$here/.." && pwd)
podsim=${PODSIM:-$top/podsim}
out=${1:-$top/build/plots/gpt3-study.csv}
raw=${out%.csv}-sweep.csv
unfit=${out%.csv}-unfit.csv
tensors=${GPT3_TENSOR:-"1 2 4 8 16"}
fsdps=${GPT3_FSDP:-"1 2 4 8 16 32 64 128 256 512 1024 2048"}
jobs=${GPT3_JOBS:-1}
fmt=${GPT3_FORMAT:-png}
figure=${2:-$(dirname "$out")/gpt3-study.$fmt}
exp=plots/gpt3-175b-v4-4096.json
devices=2048
mkdir -p "$(dirname "$out")" "$(dirname "$figure")"

die() { echo "gpt3-study.sh: $*" >&2; exit 1; }
[ -x "$podsim" ] || die "no podsim at $podsim (run make all)"
tmp=$(mktemp -d "${TMPDIR:-/tmp}/gpt3-study.XXXXXX")
trap 'rm -rf "$tmp" "$out.tmp" "$unfit.tmp"' EXIT
trap 'exit 130' INT TERM
cp "$podsim" "$tmp/podsim"
podsim=$tmp/podsim
remat=""
[ -n "${GPT3_REMAT:-}" ] && remat="--set strategy.rematerialize=$GPT3_REMAT"
[ "${GPT3_RESUME:-0}" = 1 ] || rm -f "$raw"

echo "tensor,fsdp,data,need_GiB" >"$unfit.tmp"
for t in $tensors; do
  fits=""
  for f in $fsdps; do
    [ $((t * f)) -le $devices ] || continue
    d=$((devices / (t * f)))
    # shellcheck disable=SC2086
    if (cd "$top" && "$podsim" describe experiment "$exp" $remat \
          --set "strategy.mesh.tensor=$t" --set "strategy.mesh.fsdp=$f") >/dev/null 2>"$tmp/err"; then
      fits="$fits${fits:+,}$f"
    else
      need=$(sed -n 's/.* needs \([0-9.]*\) GiB per device.*/\1/p' "$tmp/err")
      [ -n "$need" ] || { cat "$tmp/err" >&2; die "tensor $t x fsdp $f: not a memory error"; }
      echo "$t,$f,$d,$need" >>"$unfit.tmp"
    fi
  done
  [ -n "$fits" ] || continue
  echo "gpt3-study.sh: tensor $t, fsdp $fits" >&2
  # shellcheck disable=SC2086
  (cd "$top" && "$podsim" sweep "$exp" $remat --jobs "$jobs" --vary "strategy.mesh.tensor=$t" \
     --vary "strategy.mesh.fsdp=$fits" --out "$raw") ||
    die "the sweep of tensor $t failed (see the error column of $raw)"
done

[ -s "$raw" ] || die "no mesh fits"
# the sweep's columns by name; a row that ran has an empty error (last) column
awk -F, -v devices=$devices '
  NR == 1 { for (i = 1; i <= NF; i++) c[$i] = i; next }
  $NF != "" { next }
  { t = $c["strategy.mesh.tensor"]; f = $c["strategy.mesh.fsdp"]
    printf "%d,%d,%d,%s,%s,%s,%s,%s,%s,%s,%s,%s,%s,%s,%.2f,%s\n", t, f, devices / (t * f),
      $c["step_time_s"], $c["mfu"], $c["hfu"], $c["breakdown.compute"], $c["breakdown.collective"],
      $c["collective_axes.data.exposed_s"], $c["collective_axes.fsdp.exposed_s"],
      $c["collective_axes.tensor.exposed_s"], $c["collective_axes.data.busy_s"],
      $c["collective_axes.fsdp.busy_s"], $c["collective_axes.tensor.busy_s"],
      $c["hbm_peak_bytes"] / 1073741824, $c["events"] }' "$raw" |
  sort -t, -k1,1n -k2,2n >"$tmp/rows"
[ -s "$tmp/rows" ] || die "no mesh fits"
{
  echo "tensor,fsdp,data,step_time_s,mfu,hfu,compute_s,collective_s,exposed_data_s,exposed_fsdp_s,exposed_tensor_s,busy_data_s,busy_fsdp_s,busy_tensor_s,hbm_peak_GiB,events"
  cat "$tmp/rows"
} >"$out.tmp"
mv "$out.tmp" "$out"
mv "$unfit.tmp" "$unfit"
echo "gpt3-study.sh: wrote $out and $unfit" >&2
(cd "$here" && gnuplot -e "fmt='$fmt'" -e "csv='$out'" -e "outfile='$figure'" gpt3-study.gp)
