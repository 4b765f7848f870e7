#!/usr/bin/env bash
# Cold start (issue 28): process wall time of the first `detkit cluster` on a Run-3-like event
# with the driver's JIT cache disabled (CUDA_CACHE_DISABLE=1: what a new machine, container or
# CI runner sees), for each kernel image: the default choice (a cubin on every card with one)
# and the forced sm_70 PTX fallback (DETKIT_IMAGE=ptx70: the driver compiles 2.7 MB of PTX).
# Target: <= 1 s with the default image. Run inside a gpu bundle (bin/detkit).
# Usage: bench/cold_start.sh [OUT_DIR]   (env: REPS, default 3; IMAGES, default "auto ptx70")
# Prints one line per run and a CSV (image,run,wall_s,load_ms) in OUT_DIR/cold_start.csv;
# exits 1 when the default image's slowest run exceeds 1 s.
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.." || exit 1
out="${1:-out}"
mkdir -p "$out" || exit 1
reps="${REPS:-3}"
images="${IMAGES:-auto ptx70}"
event="$out/cold_start_event.bin"
bin/detkit cluster generate --seed 1 --output "$event" -q || exit 1
csv="$out/cold_start.csv"
echo "image,run,wall_s,load_ms" > "$csv"
bin/detkit info | sed -n '/^devices/,$p'
worst_default=0
for image in $images; do
  for run in $(seq 1 "$reps"); do
    log="$out/cold_start_${image}_$run.log"
    t0=$(date +%s.%N)
    CUDA_CACHE_DISABLE=1 DETKIT_IMAGE="$image" bin/detkit cluster --backend cuda -v \
      --input "$event" --output "$out/cold_start_clusters.bin" > "$log" 2>&1
    st=$?
    t1=$(date +%s.%N)
    wall=$(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.3f", b - a }')
    # The backend line: "... kernels: cubin sm_90 loaded in 23 ms)".
    load=$(grep -o 'loaded in [0-9]* ms' "$log" | head -1 | grep -o '[0-9]*')
    kernels=$(grep -o 'kernels: [^)]*' "$log" | head -1)
    printf '%-6s run %d: %s s wall (%s) exit %d\n' "$image" "$run" "$wall" "${kernels:-?}" "$st"
    echo "$image,$run,$wall,${load:-}" >> "$csv"
    if [ "$st" -ne 0 ]; then
      echo "detkit cluster failed: see $log"; tail -5 "$log"; exit 1
    fi
    if [ "$image" = auto ] && awk -v w="$wall" -v m="$worst_default" 'BEGIN { exit !(w > m) }'; then
      worst_default=$wall
    fi
  done
done
rm -f "$out/cold_start_clusters.bin"
if [[ " $images " == *" auto "* ]]; then
  if awk -v w="$worst_default" 'BEGIN { exit !(w > 1.0) }'; then
    printf 'cold start: FAIL: slowest default run %s s > 1 s\n' "$worst_default"
    exit 1
  fi
  printf 'cold start: PASS: slowest default run %s s <= 1 s\n' "$worst_default"
fi
