#!/bin/sh
# check-trace.sh VIEWER_DIR: podsim's traces in two real trace viewers.
#
# Writes three traces with ./podsim and opens each in catapult (the
# chrome://tracing UI) and speedscope through VIEWER_DIR/check_trace.sh
# (../shared/tools/trace-viewer from the project root; it needs Chromium,
# Node 20 and its npm packages, which this script installs when they are
# missing, with Chromium as root):
#   default.json    `podsim run default`: the default experiment, the
#                   Fashion-MNIST CNN on 8 cores, one epoch (about a minute);
#   links.json      ResNet-50 on tpu-v3-8, 2 steps, --trace-links: every
#                   chunk on every link, and the flows of every collective
#                   message from its sender's slice through the links to
#                   its receiver's;
#   pipeline.json.gz the ViT pipeline (vit-pipeline), 3 steps, --trace-links:
#                   SEND to RECV flows between stages, gzip-compressed as
#                   `podsim run` writes a large trace (the viewers inflate it).
# Passes when every viewer loads every trace with no error and no warning;
# prints what each parsed.  Output in build/check-trace/.
set -eu
viewer=${1:?usage: check-trace.sh VIEWER_DIR}
check="$viewer/check_trace.sh"
if [ ! -x "$check" ]; then
  echo "check-trace: $check not found (the trace viewer harness)" >&2
  exit 2
fi
# What the harness needs and a new machine lacks: Debian's Chromium (as
# root, as `make deps` installs packages) and the harness's npm packages.
if [ ! -x /usr/bin/chromium ]; then
  if [ "$(id -u)" = 0 ]; then
    echo "check-trace: installing chromium (apt-get)" >&2
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q chromium >&2 || exit 2
  else
    echo "check-trace: needs Debian's chromium: sudo apt-get install -y chromium" >&2
    exit 2
  fi
fi
if [ ! -d "$viewer/node_modules" ]; then
  command -v npm >/dev/null 2>&1 || {
    echo "check-trace: needs npm (Node 20) for $viewer" >&2
    exit 2
  }
  echo "check-trace: npm ci in $viewer" >&2
  (cd "$viewer" && npm ci --no-audit --no-fund >&2) || exit 2
fi
out=build/check-trace
mkdir -p "$out"
./podsim run default --quiet --trace "$out/default.json" > /dev/null
./podsim run resnet50-v3-8 --quiet --set steps=2 --set steps_per_run=2 --trace-links \
  --trace "$out/links.json" > /dev/null
./podsim run vit-pipeline --quiet --set steps=3 --trace-links --trace "$out/pipeline.json.gz" \
  > /dev/null
status=0
for f in default.json links.json pipeline.json.gz; do
  t=${f%%.*}
  "$check" "$out/$f" "$out/$t" > "$out/$t.log" 2>&1 || true
  python3 - "$out/$t/verdict.json" "$f" <<'PY' || status=1
import json, sys
path, name = sys.argv[1], sys.argv[2]
try:
    v = json.load(open(path))
except (OSError, ValueError) as e:
    print(f"check-trace: {name}: no verdict ({e})")
    sys.exit(1)
s = v.get("summary", {})
ok = v.get("loaded") and not v.get("errors") and not v.get("warnings")
print(f"check-trace: {name}: {'ok' if ok else 'FAILED'}: {s.get('slices')} slices, "
      f"{s.get('flows')} flows, {len(s.get('threads', []))} threads, "
      f"{len(v.get('warnings', []))} warnings, {len(v.get('errors', []))} errors "
      f"(screenshot {v.get('screenshot')})")
for w in (v.get("errors", []) + v.get("warnings", []))[:10]:
    print("  " + w)
sys.exit(0 if ok else 1)
PY
done
exit $status
