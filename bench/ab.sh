#!/usr/bin/env bash
# A/B timing of two GPU bundles on one machine: every benchmark binary of bundle A, then of
# bundle B, then A again (so drift shows), each writing CSV into $OUT/<label>-<bench>.csv.
# Usage: bench/ab.sh OLD_BUNDLE NEW_BUNDLE OUT [bench names...]
# (default names: detkit-bench bench-clustering bench-pet bench-seeding)
set -uo pipefail
a="$1"; b="$2"; out="$3"; shift 3
names=("$@"); [ ${#names[@]} -eq 0 ] && names=(detkit-bench bench-clustering bench-pet bench-seeding)
mkdir -p "$out"
for name in "${names[@]}"; do
  for run in "a1:$a" "b:$b" "a2:$a"; do
    label="${run%%:*}"; dir="${run#*:}"
    [ -x "$dir/bin/$name" ] || { echo "skip $dir/bin/$name"; continue; }
    echo "== $label $name"
    "$dir/bin/$name" --csv "$out/$label-$name.csv" > "$out/$label-$name.log" 2>&1
    echo "exit $? ($(wc -l < "$out/$label-$name.csv" 2>/dev/null || echo 0) csv lines)"
  done
done
