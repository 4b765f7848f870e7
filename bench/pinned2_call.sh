#!/bin/bash
# pinned2 (session 12, issue 30 round 2): the pinned result pool (Rust GPU test, Python tests),
# the race fix of doors_cluster_pinned run 5 times, then bench-host cluster-calls and the
# Python rows. One call, internal deadline 138 s. Carry: bins.tgz (bin/gpu-tests,
# bin/bench-host, stripped), whl/ (the wheel), py/ (bench_host.py and three test files).
# Run on the device as `bash .devcarry-pinned2/run.sh` with carry [".devcarry-pinned2"] (this
# file copied there as run.sh); it took 48 s on an H100 (call P2, docs/benchmarks.md "pinned").
set -u
C=$(cd "$(dirname "$0")" && pwd); L=/tmp/L; mkdir -p $L; START=$(date +%s)
el() { echo $(( $(date +%s) - START )); }
for d in /usr/local/cuda/bin /usr/local/cuda/compute-sanitizer; do [ -d "$d" ] && PATH="$PATH:$d"; done; export PATH
export PYTHONUNBUFFERED=1 RAYON_NUM_THREADS=16
(cd $C && tar xzf bins.tgz && chmod +x bin/*); B=$C/bin
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site $C/whl/*.whl > $L/pip.log 2>&1
export PYTHONPATH=/tmp/site
{ nvidia-smi -L; nproc; date -u; } > $L/machine.txt
# Phase 1 (<= 60 s): correctness, in parallel.
( for i in 1 2 3 4 5; do echo "== run $i"; timeout 50 $B/gpu-tests --exact doors_cluster_pinned; echo "rc=$?"; done ) > $L/t-pinned.log 2>&1 &
timeout 58 $B/gpu-tests --family doors > $L/t-doors.log 2>&1 &
timeout 58 compute-sanitizer --tool memcheck --error-exitcode 99 $B/gpu-tests --sanitize --exact doors_cluster_result_pool > $L/memcheck.log 2>&1 &
( cd $C/py && DETKIT_BACKEND=cuda timeout 58 python3 -m pytest -q -p no:cacheprovider test_pinned.py test_results_memory.py test_pinned_results.py > $L/pytest.log 2>&1; echo "pytest rc=$?" >> $L/pytest.log ) &
wait
echo "phase 1 done at $(el) s"
# Phase 2: timings alone.
timeout 50 $B/bench-host --only cluster-calls --reps 15 --csv $L/rust.csv > $L/bh.log 2>&1; echo "bh rc=$? at $(el) s"
timeout 40 python3 $C/py/bench_host.py --backend cuda --reps 15 --rust $L/rust.csv --rows cluster1,cluster64,cluster1-pinned,cluster64-pinned,cluster1-pinned-out,cluster64-pinned-out > $L/py.log 2>&1; echo "py rc=$? at $(el) s"
left=$(( 136 - $(el) )); [ $left -gt 8 ] && { timeout $left $B/bench-host --only cluster-calls --reps 5 --phases --timeline > $L/phases.log 2>&1; echo "phases rc=$? at $(el) s"; }
cd /tmp && tar czf $OUT/logs.tgz L
echo "== tests"; grep -E "^(== run|rc=)|PASS|FAIL|gpu tests|passed|failed" $L/t-pinned.log | cut -c1-140 | tail -20
grep -E "FAIL|passed|failed|gpu tests" $L/t-doors.log | cut -c1-160 | tail -6
grep -E "ERROR SUMMARY|FAIL|passed" $L/memcheck.log | tail -3; tail -3 $L/pytest.log
echo "== rust"; grep -E "^(call|cluster)" $L/bh.log | cut -c1-160
echo "== py"; grep -v "^#" $L/py.log | tail -26 | cut -c1-170
