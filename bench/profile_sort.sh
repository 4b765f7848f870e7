#!/usr/bin/env bash
# Radix-sort profile on the GPU host (issue 11): ours beside CUB at small and large sizes,
# nsys kernel summaries at 2^10/2^12 (launches and kernel time per call), and ncu on one
# onesweep pass (keys only and pairs, ours and CUB's) at 2^24.
# Usage (inside a gpu bundle, after run.sh built bench/cub_baseline or with nvcc on PATH):
#   bench/profile_sort.sh OUT_DIR
set -uo pipefail
out="${1:?usage: profile_sort.sh OUT_DIR}"; mkdir -p "$out"
for d in /usr/local/cuda/bin /usr/local/cuda/compute-sanitizer; do [ -d "$d" ] && PATH="$PATH:$d"; done
[ -x bench/cub_baseline ] || nvcc -O3 -std=c++17 -arch="${CUDA_ARCH:-sm_90}" -o bench/cub_baseline bench/cub_baseline.cu
sizes="${SORT_SIZES:-10,12,14,16,20,24,26,28}"
bin/detkit-bench --sort-only --sizes "$sizes" --csv "$out/sort-detkit.csv" > "$out/sort-detkit.log" 2>&1 || echo "detkit-bench failed"
bench/cub_baseline --sort-only --sizes "$sizes" > "$out/sort-cub.csv" 2> "$out/sort-cub.log" || echo "cub failed"
python3 bench/compare.py "$out/sort-detkit.csv" "$out/sort-cub.csv" --out "$out/sort-compare.md" > /dev/null 2>&1
cat "$out/sort-compare.md" 2>/dev/null | grep -i "sort\|copy\|primitive" | head -60
if [ "${SKIP_PROFILE:-0}" != 1 ] && command -v nsys >/dev/null; then
  for s in 10 12; do
    nsys profile -o "$out/nsys-detkit-$s" --force-overwrite true bin/detkit-bench --sort-only --sizes $s --reps 30 > /dev/null 2>&1
    nsys stats -q --report cuda_gpu_kern_sum --format csv "$out/nsys-detkit-$s.nsys-rep" > "$out/kern-detkit-$s.csv" 2>/dev/null
    nsys profile -o "$out/nsys-cub-$s" --force-overwrite true bench/cub_baseline --sort-only --sizes $s --reps 30 > /dev/null 2>&1
    nsys stats -q --report cuda_gpu_kern_sum --format csv "$out/nsys-cub-$s.nsys-rep" > "$out/kern-cub-$s.csv" 2>/dev/null
    rm -f "$out"/*.nsys-rep "$out"/*.sqlite
  done
fi
if [ "${SKIP_PROFILE:-0}" != 1 ] && command -v ncu >/dev/null; then
  m=launch__registers_per_thread,launch__block_size,launch__grid_size,launch__shared_mem_per_block_dynamic,launch__occupancy_limit_registers,launch__occupancy_limit_shared_mem,sm__warps_active.avg.pct_of_peak_sustained_active,gpu__time_duration.sum,dram__throughput.avg.pct_of_peak_sustained_elapsed,sm__throughput.avg.pct_of_peak_sustained_elapsed,smsp__inst_executed.sum
  ncu --clock-control none --metrics $m -k regex:onesweep --launch-count 40 --csv \
    bin/detkit-bench --sort-only --sizes 24 --reps 1 > "$out/ncu-detkit.csv" 2> "$out/ncu-detkit.err"
  ncu --clock-control none --metrics $m -k regex:Onesweep --launch-count 40 --csv \
    bench/cub_baseline --sort-only --sizes 24 --reps 1 > "$out/ncu-cub.csv" 2> "$out/ncu-cub.err"
fi
