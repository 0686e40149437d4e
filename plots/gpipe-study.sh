#!/usr/bin/env bash
# gpipe-study.sh: podsim beside Table 2 of the GPipe paper.
#
# Source of the paper's figures: Huang, Cheng, Bapna, Firat, Chen, Chen, Lee,
# Ngiam, Le, Wu and Chen, "GPipe: Efficient Training of Giant Neural Networks
# using Pipeline Parallelism", NeurIPS 2019 (arXiv:1811.06965), section 3,
# Table 2: "Normalized training throughput using GPipe with different # of
# partitions K and different # of micro-batches M on TPUs. [...] Batch size
# was adjusted to fit memory if necessary."  Models: AmoebaNet-D (18, 256) and
# Transformer-48 (section 3).
#
# For each model (experiments/gpipe-amoebanet.json, experiments/gpipe-
# transformer.json), each K in 2 4 8 and each M in 1 4 32, runs
#
#   podsim run experiments/gpipe-MODEL.json --set strategy.stages=K \
#       --set strategy.micro_batches=M --json --no-trace
#
# and reads examples_per_s from the summary.  Nothing else changes from cell
# to cell or from model to model: topology, batch, schedule, partitioner and
# re-materialization are the experiment files'.  Prints, per model, a
# markdown table of podsim's throughput normalized to its K=2, M=1 cell
# beside the paper's value, podsim's examples/s, and the source line.  With
# GPIPE_SET, each model's heading names the what-if.
#
# A cell that fails (podsim refuses it, e.g. a stage that does not fit a
# core's HBM) is shown as "failed" with podsim's message under the table;
# the other cells still run, and the script exits 1 at the end.  If the
# K=2, M=1 cell itself fails there is nothing to normalize to: the table then
# says n/a and adds a column scaled to the first cell that ran, pinned to
# the paper's value for that cell (marked as such).
#
# Run from anywhere (it works from the repository root).  Uses bash, awk,
# sed and grep only.  Runs a copy of podsim taken at the start, so a rebuild
# during the study cannot mix two versions.
#
# Environment (all optional; the study itself uses none of them):
#   PODSIM            podsim binary (default: ./podsim at the repository root)
#   GPIPE_MODELS      subset of "amoebanet transformer"
#   GPIPE_SET         extra PATH=VALUE assignments, space-separated, passed as
#                     --set to every run alike (a what-if for the whole grid)
#   GPIPE_STAGES_KEY  key that K is written to (default strategy.stages)
#   GPIPE_MICRO_KEY   key that M is written to (default strategy.micro_batches)
set -euo pipefail

top=$(cd "$(dirname "$0")/.." && pwd)
cd "$top"

podsim_src=${PODSIM:-$top/podsim}
models=${GPIPE_MODELS:-"amoebanet transformer"}
stages_key=${GPIPE_STAGES_KEY:-strategy.stages}
micro_key=${GPIPE_MICRO_KEY:-strategy.micro_batches}
read -r -a extra_sets <<<"${GPIPE_SET:-}"

ks=(2 4 8)
ms=(1 4 32)

# GPipe Table 2 (arXiv:1811.06965, section 3), indexed by model, M and K.
paper() {
  case "$1:$2:$3" in
    amoebanet:1:2) echo 1 ;;      amoebanet:1:4) echo 1.13 ;;   amoebanet:1:8) echo 1.38 ;;
    amoebanet:4:2) echo 1.07 ;;   amoebanet:4:4) echo 1.26 ;;   amoebanet:4:8) echo 1.72 ;;
    amoebanet:32:2) echo 1.21 ;;  amoebanet:32:4) echo 1.84 ;;  amoebanet:32:8) echo 3.48 ;;
    transformer:1:2) echo 1 ;;    transformer:1:4) echo 1.07 ;; transformer:1:8) echo 1.3 ;;
    transformer:4:2) echo 1.7 ;;  transformer:4:4) echo 3.2 ;;  transformer:4:8) echo 4.8 ;;
    transformer:32:2) echo 1.8 ;; transformer:32:4) echo 3.4 ;; transformer:32:8) echo 6.3 ;;
    *) echo "?" ;;
  esac
}

title() {
  case "$1" in
    amoebanet) echo "AmoebaNet-D (18, 256)" ;;
    transformer) echo "Transformer-48" ;;
    *) echo "$1" ;;
  esac
}

die() {
  echo "gpipe-study.sh: $*" >&2
  exit 1
}

[[ -x "$podsim_src" ]] || die "no podsim at $podsim_src (run make first)"
tmp=$(mktemp -d "${TMPDIR:-/tmp}/gpipe-study.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
trap 'exit 130' INT TERM
cp "$podsim_src" "$tmp/podsim"
podsim=$tmp/podsim

# ratio A B: A / B to 2 decimals
ratio() {
  awk -v a="$1" -v b="$2" 'BEGIN { printf "%.2f", a / b }'
}

# grid CELL: a markdown table, M down and K across, each cell what CELL M K
# prints (CELL reads the current model's eps, base, anchor and pa)
grid() {
  local cell=$1 m k row
  echo "| M \\ K | 2 | 4 | 8 |"
  echo "|---|---|---|---|"
  for m in "${ms[@]}"; do
    row="| $m |"
    for k in "${ks[@]}"; do
      row="$row $("$cell" "$m" "$k") |"
    done
    echo "$row"
  done
}

# normalized_cell M K: podsim normalized to the K=2, M=1 cell / the paper
normalized_cell() {
  local p
  p=$(paper "$model" "$1" "$2")
  if [[ -n "${eps[$2:$1]:-}" && -n "$base" ]]; then
    echo "$(ratio "${eps[$2:$1]}" "${eps[$base]}") / $p"
  elif [[ -n "${eps[$2:$1]:-}" ]]; then
    echo "n/a / $p"
  else
    echo "failed / $p"
  fi
}

# anchored_cell M K: podsim scaled to the anchor cell, pinned to the paper's
# pa there / the paper
anchored_cell() {
  local p
  p=$(paper "$model" "$1" "$2")
  if [[ -n "${eps[$2:$1]:-}" ]]; then
    echo "$(awk -v a="${eps[$2:$1]}" -v b="${eps[$anchor]}" -v c="$pa" \
      'BEGIN { printf "%.2f", a / b * c }') / $p"
  else
    echo "failed / $p"
  fi
}

# eps_cell M K: podsim's examples/s
eps_cell() {
  if [[ -n "${eps[$2:$1]:-}" ]]; then
    awk -v a="${eps[$2:$1]}" 'BEGIN { printf "%.1f", a }'
  else
    echo "failed"
  fi
}

failed=0
first_model=1
for model in $models; do
  exp=experiments/gpipe-$model.json
  [[ -f "$exp" ]] || die "no experiment file $exp"
  declare -A eps=() err=()

  for k in "${ks[@]}"; do
    for m in "${ms[@]}"; do
      args=(run "$exp" --set "$stages_key=$k" --set "$micro_key=$m" --json --no-trace)
      for s in "${extra_sets[@]}"; do
        args+=(--set "$s")
      done
      echo "gpipe-study.sh: $model K=$k M=$m" >&2
      status=0
      "$podsim" "${args[@]}" >"$tmp/out" 2>"$tmp/err" || status=$?
      if [[ $status -ne 0 ]]; then
        # podsim's message, without its idle-device warning
        msg=$(grep -v '^podsim: warning: ' "$tmp/err" | tr '\n' ' ' | sed 's/ *$//')
        err[$k:$m]="exit $status: ${msg:-no message}"
        failed=$((failed + 1))
        echo "gpipe-study.sh: $model K=$k M=$m failed: ${err[$k:$m]}" >&2
        continue
      fi
      v=$(tr -d ' \n' <"$tmp/out" | grep -o '"examples_per_s":[-0-9.eE+]*' | sed 's/.*://' | head -n 1)
      if [[ -z "$v" ]]; then
        err[$k:$m]="no examples_per_s in podsim's JSON summary"
        failed=$((failed + 1))
        echo "gpipe-study.sh: $model K=$k M=$m: ${err[$k:$m]}" >&2
        continue
      fi
      eps[$k:$m]=$v
    done
  done

  # the cell to normalize to: K=2, M=1, else the first cell that ran
  base=""
  anchor=""
  if [[ -n "${eps[2:1]:-}" ]]; then
    base=2:1
  else
    for k in "${ks[@]}"; do
      for m in "${ms[@]}"; do
        if [[ -z "$anchor" && -n "${eps[$k:$m]:-}" ]]; then
          anchor=$k:$m
        fi
      done
    done
  fi

  [[ $first_model -eq 1 ]] || echo
  first_model=0
  if [[ ${#extra_sets[@]} -gt 0 ]]; then
    echo "### $(title "$model") ($exp), what-if: --set ${extra_sets[*]}"
  else
    echo "### $(title "$model") ($exp)"
  fi
  echo
  echo "Training throughput normalized to K=2, M=1, podsim / paper (K partitions, M micro-batches):"
  echo
  grid normalized_cell

  if [[ -n "$anchor" ]]; then
    ak=${anchor%%:*}
    am=${anchor##*:}
    pa=$(paper "$model" "$am" "$ak")
    echo
    echo "K=2, M=1 did not run, so there is no podsim normalization. Scaled instead to K=$ak, M=$am" \
      "(the first cell that ran), pinned to the paper's $pa there, podsim / paper:"
    echo
    grid anchored_cell
  fi

  echo
  echo "podsim examples/s:"
  echo
  grid eps_cell

  if [[ ${#err[@]} -gt 0 ]]; then
    echo
    echo "Cells that did not run:"
    echo
    for k in "${ks[@]}"; do
      for m in "${ms[@]}"; do
        if [[ -n "${err[$k:$m]:-}" ]]; then
          echo "- K=$k, M=$m: ${err[$k:$m]}"
        fi
      done
    done
  fi

  echo
  echo "Paper: Huang et al., \"GPipe: Efficient Training of Giant Neural Networks using Pipeline" \
    "Parallelism\", NeurIPS 2019 (arXiv:1811.06965), Table 2 ($(title "$model") column; on TPUs," \
    "batch size adjusted to fit memory where necessary)."
  if [[ ${#extra_sets[@]} -gt 0 ]]; then
    echo "Every run also had: --set ${extra_sets[*]}; the K and M keys were $stages_key and $micro_key."
  fi
  unset eps err
done

if [[ $failed -gt 0 ]]; then
  echo "gpipe-study.sh: $failed cell(s) failed" >&2
  exit 1
fi
