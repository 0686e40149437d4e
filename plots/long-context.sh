#!/bin/sh
# long-context.sh [OUT.csv [FIGURE]]: LLaMA-2 7B at one sequence per chip
# on tpu-v5p-64 (experiments/shard-llama2-7b.json: fsdp 32, bf16, Adam,
# timing only) for sequences of 2048 to 32768 tokens, with the attention
# scores kept whole (unfused) or flash attention, and each rematerialization
# policy (none, minimal, full).  For docs/long-context-study.md.
#
#   podsim run shard-llama2-7b --json --no-trace --set global_batch=32
#       --set 'model.input.shape=[S]' --set attention_kernel=K
#       --set strategy.rematerialize=R --set steps=2
#
# A layout that does not fit HBM is a row too: podsim refuses it (exit 2)
# with the bytes it needs per device, which the row keeps (fits=0, the
# timing columns empty).  Any other failure stops the study with podsim's
# message and status.
#
# Writes OUT.csv (default build/plots/long-context.csv), a layout's rows
# together, by sequence length:
#   seq,attention,remat,fits,hbm_gib,step_time_s,tokens_per_s_per_chip,mfu,hfu
# (hbm_gib: the peak per device, or what a refused layout needs), replaced
# only when every run ended, then draws FIGURE (default long-context.png
# beside OUT.csv) with long-context.gp (LONG_CONTEXT_FORMAT=svg for .svg).
# About 10 seconds.  Uses sh, awk and sed.  Environment: PODSIM (default
# ../podsim); LONG_CONTEXT_SEQS to run a subset.
set -eu

here=$(cd "$(dirname "$0")" && pwd)
top=$(cd "$here/.." && pwd)
podsim=${PODSIM:-$top/podsim}
out=${1:-$top/build/plots/long-context.csv}
seqs=${LONG_CONTEXT_SEQS:-"2048 4096 8192 16384 32768"}
fmt=${LONG_CONTEXT_FORMAT:-png}
figure=${2:-$(dirname "$out")/long-context.$fmt}
mkdir -p "$(dirname "$out")" "$(dirname "$figure")"

tmp=$(mktemp -d "${TMPDIR:-/tmp}/long-context.XXXXXX")
trap 'rm -rf "$tmp" "$out.tmp"' EXIT
trap 'exit 130' INT TERM

die() { echo "long-context.sh: $*" >&2; exit 1; }
[ -x "$podsim" ] || die "no podsim at $podsim (run make all)"

# get KEY: the first number after "KEY": in podsim's --json
get() {
  v=$(sed -n "s/^ *\"$1\": *\([-0-9.eE+]*\).*/\1/p" "$tmp/run" | head -n 1)
  [ -n "$v" ] || die "no $1 in podsim's JSON"
  echo "$v"
}

chips=32
echo "seq,attention,remat,fits,hbm_gib,step_time_s,tokens_per_s_per_chip,mfu,hfu" >"$out.tmp"
for k in unfused flash; do
  for r in none minimal full; do
    for s in $seqs; do
      echo "long-context.sh: $s tokens, $k attention, rematerialize $r" >&2
      status=0
      (cd "$top" && "$podsim" run shard-llama2-7b --json --no-trace --set global_batch=$chips \
         --set "model.input.shape=[$s]" --set "attention_kernel=$k" \
         --set "strategy.rematerialize=$r" --set steps=2) >"$tmp/run" 2>"$tmp/err" || status=$?
      if [ "$status" -eq 2 ] && grep -q "needs .* GiB per device" "$tmp/err"; then
        need=$(sed -n 's/.*needs \([0-9.]*\) GiB per device.*/\1/p' "$tmp/err" | head -n 1)
        echo "$s,$k,$r,0,$need,,,," >>"$out.tmp"
        continue
      fi
      if [ "$status" -ne 0 ]; then
        cat "$tmp/err" >&2
        die "$s tokens, $k, $r failed (exit $status)"
      fi
      tps=$(get tokens_per_s)
      echo "$s,$k,$r,1,$(awk -v b="$(get hbm_peak_bytes)" 'BEGIN { printf "%.1f", b / 2^30 }'),$(get step_time_s),$(awk -v t="$tps" -v c=$chips 'BEGIN { printf "%.1f", t / c }'),$(get mfu),$(get hfu)" >>"$out.tmp"
    done
  done
done
mv "$out.tmp" "$out"
echo "long-context.sh: wrote $out" >&2
(cd "$here" && gnuplot -e "fmt='$fmt'" -e "csv='$out'" -e "outfile='$figure'" long-context.gp)
