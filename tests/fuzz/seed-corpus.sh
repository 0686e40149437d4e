#!/bin/sh
# seed-corpus.sh OUT: builds the seed corpora of the harnesses in OUT/<harness>/
# from the shipped files (experiments, topologies, models, tests/data), plus
# override lines for fuzz_override, and a dictionary OUT/podsim.dict of the
# JSON keys and enum words the loaders know.  Run from anywhere.
set -eu
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
out=${1:-$here/seeds}
rm -rf "$out"
mkdir -p "$out/fuzz_experiment" "$out/fuzz_topology" "$out/fuzz_model" "$out/fuzz_override"

copy() { # copy DIR FILE...: under a name that keeps where it came from
  dir=$1; shift
  for f in "$@"; do
    [ -f "$f" ] || continue
    rel=${f#"$repo"/}
    cp "$f" "$out/$dir/$(echo "$rel" | tr '/' '_')"
  done
}

all_data=$(find "$repo/tests/data" -name '*.json' | sort)
copy fuzz_experiment "$repo"/experiments/*.json $all_data
copy fuzz_topology "$repo"/topologies/*.json "$repo"/tests/data/bad/topologies/*.json
copy fuzz_model "$repo"/models/*.json "$repo"/tests/data/good/models/*.json
# inputs that once crashed a harness (see regressions/)
copy fuzz_experiment "$here"/regressions/experiment/*
copy fuzz_topology "$here"/regressions/topology/*
copy fuzz_model "$here"/regressions/model/*

# fuzz_override: the first byte picks the experiment, then one override a line.
i=0
while IFS= read -r line; do
  i=$((i + 1))
  printf '%b%s' "\\0$(printf '%o' $((i % 13)))" "$line" \
    | sed 's/\\n/\n/g' > "$out/fuzz_override/set-$i"
done <<'LINES'
global_batch=128
topology=tpu-v3-32
topology=tpu-v4-8\nglobal_batch=32
model=mlp\nnumerics.enabled=false
strategy.kind=pipeline\nstrategy.stages=2\nstrategy.micro_batches=4
strategy.partition=[1,2]
strategy.partition="seed"
strategy.replicas=4\nglobal_batch=64
strategy.bucket_bytes=1MiB\nstrategy.overlap=true
strategy.weight_update_sharding=true
topology.torus.dims[0]=4
topology.torus.dims=[2,2,2]\ntopology.torus.wrap=[true,true,true]
topology.torus.twisted=true
topology.ici.bandwidth_Bps=100 GB/s
topology.ici.latency_s=1us
topology.chip.hbm_bytes=16GiB
topology.host.chips=4
topology={"extends":"tpu-v3-8","chip":{"cores":1}}
model.layers[0].units=64
model={"input":{"shape":[4],"classes":2},"layers":[{"type":"dense","units":2},{"type":"softmax_xent"}]}
input.source=synthetic\ninput.synthetic_examples=1000
input.workers=2\ninput.prefetch=1
optimizer.kind=sgd\noptimizer.momentum=0.9
optimizer.schedule=constant
numerics.precision=f32
collective.algorithm=torus\ncollective.chunk_bytes=4MiB
outside_compilation=[{"after":1,"kind":"histogram","bins":16}]
faults={"stragglers":[{"device":1,"slowdown":2}]}
faults={"links":[{"chip":0,"dim":0,"dir":1,"bandwidth_factor":0}]}
faults={"slow_hosts":[{"host":0,"slowdown":3}]}
steps=10\nsteps_per_run=5\nlog_every=1
epochs=0.5
fuse_elementwise=false
global_batch=null
LINES

# The dictionary: every quoted lower-case word of the loaders' sources.
grep -hoE '"[a-z][a-z0-9_]*"' "$repo"/sim/io/config.c "$repo"/sim/io/topology.c \
  "$repo"/sim/model/layers.c "$repo"/sim/common/json.c | sort -u > "$out/podsim.dict"
printf '%s\n' '"extends"' '"GiB"' '"GB/s"' '"us"' '"ms"' '"e12"' '"[0]"' '"="' '"."' \
  '"residual"' '"repeat"' '"body"' '"shortcut"' '"tpu-v3-8"' '"tpu-v4-8"' '"mlp"' '"cnn"' \
  >> "$out/podsim.dict"
