#!/bin/sh
# regen.sh: rewrites step-times.txt from cases.txt with the current podsim.
set -eu
here=$(cd "$(dirname "$0")" && pwd)
top=$(cd "$here/../.." && pwd)
out="$here/step-times.txt.tmp"
sed -n '/^#/p' "$here/step-times.txt" > "$out"
while IFS= read -r line; do
  [ -z "$line" ] && continue
  # shellcheck disable=SC2086
  t=$(cd "$top" && ./podsim run $line --no-trace --json | tr -d ' ,' | awk -F: '/"step_time_s"/ {print $2}')
  printf '%s\t%.6g\n' "$line" "$t" >> "$out"
done < "$here/cases.txt"
mv "$out" "$here/step-times.txt"
