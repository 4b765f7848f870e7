#!/bin/bash
# pinned (session 12, issue 30): tests of the clustering door on pinned caller memory, then
# bench-host --only cluster-calls and the Python rows. One call, internal deadline 135 s.
# The carry folder (this script beside): bins.tgz (bin/gpu-tests, bin/bench-host: the release
# `gpu` test binary and bench-host, stripped), whl/ (the wheel), py/ (crates/python's
# bench_host.py, tests/test_pinned.py, tests/test_results_memory.py). Run on the device as
# `bash .devcarry-pinned/run.sh` with carry [".devcarry-pinned"]; it took 24 s on an H100.
set -u
C=$(cd "$(dirname "$0")" && pwd); L=/tmp/L; mkdir -p $L; START=$(date +%s)
el() { echo $(( $(date +%s) - START )); }
for d in /usr/local/cuda/bin /usr/local/cuda/compute-sanitizer; do [ -d "$d" ] && PATH="$PATH:$d"; done; export PATH
export PYTHONUNBUFFERED=1 RAYON_NUM_THREADS=16
(cd $C && tar xzf bins.tgz && chmod +x bin/*); B=$C/bin
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site $C/whl/*.whl > $L/pip.log 2>&1
export PYTHONPATH=/tmp/site
{ nvidia-smi -L; nproc; date -u; } > $L/machine.txt
# Phase 1 (<= 70 s): correctness, in parallel.
timeout 68 $B/gpu-tests --exact doors_cluster_pinned > $L/t-pinned.log 2>&1 &
timeout 68 $B/gpu-tests --family doors > $L/t-doors.log 2>&1 &
timeout 68 compute-sanitizer --tool memcheck --error-exitcode 99 $B/gpu-tests --sanitize --exact doors_cluster_pinned > $L/memcheck.log 2>&1 &
( cd $C/py && DETKIT_BACKEND=cuda timeout 68 python3 -m pytest -q -p no:cacheprovider test_pinned.py test_results_memory.py > $L/pytest.log 2>&1; echo "pytest rc=$?" >> $L/pytest.log ) &
wait
echo "phase 1 done at $(el) s"
# Phase 2: timings alone.
timeout 45 $B/bench-host --only cluster-calls --reps 15 --csv $L/rust.csv > $L/bh.log 2>&1; echo "bh rc=$? at $(el) s"
timeout 25 python3 $C/py/bench_host.py --backend cuda --reps 15 --rust $L/rust.csv --rows cluster1,cluster64,cluster1-pinned,cluster64-pinned > $L/py.log 2>&1; echo "py rc=$? at $(el) s"
left=$(( 138 - $(el) )); [ $left -gt 8 ] && { timeout $left $B/bench-host --only cluster-calls --reps 5 --phases --timeline > $L/phases.log 2>&1; echo "phases rc=$? at $(el) s"; }
cd /tmp && tar czf $OUT/logs.tgz L
echo "== tests"; grep -E "^(PASS|FAIL)|gpu tests|passed|failed" $L/t-pinned.log $L/t-doors.log | cut -c1-160 | tail -16
grep -E "ERROR SUMMARY" $L/memcheck.log; tail -3 $L/pytest.log
echo "== rust"; grep -E "^(call|cluster)" $L/bh.log | cut -c1-150
echo "== py"; grep -v "^#" $L/py.log | tail -6 | cut -c1-150
