#!/bin/bash
# One device call that verifies a merged tree (session 11, call F1): correctness in parallel
# (the GPU tests on both images, racecheck and memcheck per family in one process each,
# Python on CUDA), then the benchmarks alone. Usage, from the repository root on the GPU
# host: bench/verify_all.sh CARRY_DIR [TOTAL_S]. CARRY_DIR holds bins.tgz (bin/gpu-tests,
# bin/bench-host, bin/bench-cpu, bin/detkit-bench: release builds) and whl/ (the detkit
# wheel and any third-party wheels, e.g. distributed). Results: $OUT/logs.tgz, summary.txt.
set -u
OUT=${OUT:-/tmp/verify-out}; mkdir -p "$OUT"
# The families under racecheck are those F1 needed (the others ran whole in session 11's
# `race` call); memcheck covers the families whose host code changed. Edit the job list.
C=$(cd "${1:?usage: verify_all.sh CARRY_DIR [TOTAL_S]}" && pwd); L=/tmp/L; mkdir -p $L/san; START=$(date +%s); TOTAL=${2:-580}
el() { echo $(( $(date +%s) - START )); }
for d in /usr/local/cuda/bin /usr/local/cuda/compute-sanitizer; do [ -d "$d" ] && PATH="$PATH:$d"; done; export PATH
export PYTHONUNBUFFERED=1
(cd $C && tar xzf bins.tgz && chmod +x bin/*); B=$C/bin
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site $C/whl/*.whl > $L/pip.log 2>&1
export PYTHONPATH=/tmp/site
{ nvidia-smi -L; nproc; date -u; } > $L/machine.txt
( nvcc -O3 -std=c++17 -arch=sm_90 -o /tmp/cub bench/cub_baseline.cu > $L/nvcc.log 2>&1; echo "nvcc rc=$? at $(el)" >> $L/nvcc.log ) &
( cd crates/python && DETKIT_BACKEND=cuda timeout 290 python3 -m pytest -q -p no:cacheprovider tests > $L/pytest.log 2>&1; echo "pytest rc=$? at $(el)" >> $L/pytest.log ) &
cat > $L/jobs.txt <<J
tests-auto|$B/gpu-tests --isolate
tests-ptx70|env DETKIT_IMAGE=ptx70 $B/gpu-tests --isolate
racecheck-radix_sort|compute-sanitizer --tool racecheck --error-exitcode 99 $B/gpu-tests --sanitize --family radix_sort
racecheck-pet|compute-sanitizer --tool racecheck --error-exitcode 99 $B/gpu-tests --sanitize --family pet
racecheck-clustering|compute-sanitizer --tool racecheck --error-exitcode 99 $B/gpu-tests --sanitize --family clustering
racecheck-doors|compute-sanitizer --tool racecheck --error-exitcode 99 $B/gpu-tests --sanitize --family doors
racecheck-device_views|compute-sanitizer --tool racecheck --error-exitcode 99 $B/gpu-tests --sanitize --family device_views
racecheck-seeding|compute-sanitizer --tool racecheck --error-exitcode 99 $B/gpu-tests --sanitize --family seeding
memcheck-pet|compute-sanitizer --tool memcheck --error-exitcode 99 $B/gpu-tests --sanitize --family pet
memcheck-doors|compute-sanitizer --tool memcheck --error-exitcode 99 $B/gpu-tests --sanitize --family doors
memcheck-device_views|compute-sanitizer --tool memcheck --error-exitcode 99 $B/gpu-tests --sanitize --family device_views
memcheck-seeding|compute-sanitizer --tool memcheck --error-exitcode 99 $B/gpu-tests --sanitize --family seeding
memcheck-clustering|compute-sanitizer --tool memcheck --error-exitcode 99 $B/gpu-tests --sanitize --family clustering
J
run_job() {
  local name="${1%%|*}" cmd="${1#*|}" t0=$(date +%s) rc
  timeout -s INT -k 10 $(( DL - (t0 - START) )) $cmd > "$L/san/$name.log" 2>&1; rc=$?
  printf '%-24s rc=%-3s %4d s PASS %3d FAIL %2d %s\n' "$name" "$rc" $(( $(date +%s) - t0 )) \
    "$(grep -c '^PASS' $L/san/$name.log)" "$(grep -c '^FAIL' $L/san/$name.log)" \
    "$(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY|gpu tests' $L/san/$name.log | tail -2 | tr '\n' ' ')" >> $L/summary.txt
}
export -f run_job; export L START; export DL=300
( while :; do echo "== $(el) s $(free -g | awk '/Mem:/{print "used " $3 " free " $4}')"; sleep 10; done ) > $L/mem.log 2>&1 & SAMP=$!
tr '\n' '\0' < $L/jobs.txt | xargs -0 -P 13 -I{} bash -c 'run_job "$1"' _ {}
kill $SAMP; wait
echo "phase 1 done at $(el) s"; sort $L/summary.txt; tail -2 $L/pytest.log
step() { local name=$1 lim=$2; shift 2; local left=$(( TOTAL - $(el) - 8 ))
  if [ $left -lt 15 ]; then echo "=== $name skipped (time)"; return; fi
  [ $lim -gt $left ] && lim=$left
  timeout $lim "$@" > $L/$name.log 2>&1; echo "=== $name rc=$? at $(el) s"; }
step bh 120 $B/bench-host --reps 15 --variants 30,50,0 --phases --csv $L/rust.csv
step py 95 python3 crates/python/bench_host.py --backend cuda --reps 15 --producer cupy --rust $L/rust.csv --rows cluster1,cluster64,cluster1-pinned,cluster64-pinned,seed1,seed64,convert,sort,coincide,cluster1-dev,cluster64-dev,seed64-dev
step cpu 35 $B/bench-cpu --threads 1,16 --only pet --pet 24 --case convert,coincide --reps 5
step kb 40 $B/detkit-bench --sizes 26 --reps 15 --variants --csv $L/detkit.csv
step cub 25 /tmp/cub --sizes 26 --reps 15
[ -s $L/cub.log ] && python3 bench/compare.py $L/detkit.csv $L/cub.log --out $L/compare.md > /dev/null 2>&1
cd /tmp && tar czf $OUT/logs.tgz L; cp $L/summary.txt $OUT/ 2>/dev/null
echo "== rust"; grep -E "^(cluster_events|seed|pet_)" $L/bh.log | cut -c1-150 | tail -40
echo "== py"; grep -v "^#" $L/py.log | tail -12 | cut -c1-150
echo "== cpu"; grep -vE "^#" $L/cpu.log | tail -8 | cut -c1-150
echo "== cub"; grep -E "scan|sort|select|hist" $L/compare.md 2>/dev/null | head -24
