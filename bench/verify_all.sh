#!/bin/bash
# One device call that verifies a merged tree (session 11, call F1; phase 1 split over two
# GPUs in session 12): correctness in parallel (the GPU tests on both images, racecheck and
# memcheck per family in one process each, Python on CUDA), then the benchmarks alone.
# Usage, from the repository root on the GPU host: bench/verify_all.sh CARRY_DIR [TOTAL_S].
# CARRY_DIR holds bins.tgz (bin/gpu-tests, bin/bench-host, bin/bench-cpu, bin/detkit-bench:
# release builds) and whl/ (the detkit wheel and any third-party wheels, e.g. distributed).
# Results: $OUT/logs.tgz, summary.txt.
#
# Phase 1 with two GPUs (an nvidia-h100-x2 host; one GPU: everything on GPU 0): GPU 0 runs
# the full list on the default image and the sanitizers of the families in SAN0, GPU 1 the
# full list with DETKIT_IMAGE=ptx70 and the sanitizers of SAN1 (CUDA_VISIBLE_DEVICES per
# job; the GPU's jobs share it, time-sliced). Each GPU has its own deadline (DL0, DL1,
# default 500 s, at most 520): the lists and the families run with `gpu-tests --deadline`
# 25 s before it (tests not started are printed as SKIP, not killed), the job itself is
# stopped at it. Then a per-family summary: for each family, PASS/FAIL/SKIP of its tests in
# each list, and each sanitizer job's result and time. PHASES="1" or "2" runs one phase
# (default both); TOOLS (default "racecheck memcheck") the sanitizers.
set -u
OUT=${OUT:-/tmp/verify-out}; mkdir -p "$OUT"
C=$(cd "${1:?usage: verify_all.sh CARRY_DIR [TOTAL_S]}" && pwd); L=/tmp/L; mkdir -p $L/san; START=$(date +%s); TOTAL=${2:-580}
PHASES=${PHASES:-1 2}; TOOLS=${TOOLS:-racecheck memcheck}
# The families split so that each GPU's sanitizer share is about the same (F1's times at
# 13 jobs on one GPU, and the estimates in docs/benchmarks.md, "shape": racecheck pet ≈ 240,
# radix_sort 229, seeding 61 s + memcheck ≈ 190 s on GPU 0; racecheck clustering ≈ 200, doors
# 185, device_views 199 s + memcheck ≈ 107 s on GPU 1).
# image, foundation and shapes ran whole under both tools in session 11 (`race`); add them
# to SAN0/SAN1 to run them again.
SAN0=${SAN0:-pet radix_sort seeding}; SAN1=${SAN1:-clustering doors device_views}
DL0=${DL0:-500}; DL1=${DL1:-500}; [ "$DL0" -gt 540 ] && DL0=540; [ "$DL1" -gt 540 ] && DL1=540
el() { echo $(( $(date +%s) - START )); }
for d in /usr/local/cuda/bin /usr/local/cuda/compute-sanitizer; do [ -d "$d" ] && PATH="$PATH:$d"; done; export PATH
export PYTHONUNBUFFERED=1
(cd $C && tar xzf bins.tgz && chmod +x bin/*); B=$C/bin
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site $C/whl/*.whl > $L/pip.log 2>&1
export PYTHONPATH=/tmp/site
{ nvidia-smi -L; nproc; date -u; } > $L/machine.txt
NGPU=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU'); [ "$NGPU" -ge 1 ] || NGPU=1
G1=$(( NGPU >= 2 ? 1 : 0 ))
( nvcc -O3 -std=c++17 -arch=sm_90 -o /tmp/cub bench/cub_baseline.cu > $L/nvcc.log 2>&1; echo "nvcc rc=$? at $(el)" >> $L/nvcc.log ) &
if [[ " $PHASES " == *" 1 "* ]]; then
( cd crates/python && CUDA_VISIBLE_DEVICES=0 DETKIT_BACKEND=cuda timeout 290 python3 -m pytest -q -p no:cacheprovider tests > $L/pytest.log 2>&1; echo "pytest rc=$? at $(el)" >> $L/pytest.log ) &
# jobs: NAME|GPU|DEADLINE|COMMAND
: > $L/jobs.txt
# The lists: one process per family (LIST_MODE=--isolate: one per test, 71 context starts
# instead of 9, ≈ 0.4 s each alone and ≈ 1.5 s in F1's crowd).
LIST_MODE=${LIST_MODE:---isolate-family}
echo "tests-auto|0|$DL0|$B/gpu-tests $LIST_MODE --deadline @DL@" >> $L/jobs.txt
echo "tests-ptx70|$G1|$DL1|env DETKIT_IMAGE=ptx70 $B/gpu-tests $LIST_MODE --deadline @DL@" >> $L/jobs.txt
# The image each GPU's sanitizer jobs load (empty: the default choice; ptx70: the sm_70
# fallback). Issue 28 wants both images clean: a second run with SAN0 and SAN1 swapped, or
# SAN_IMAGE1=ptx70, covers the other.
E0=${SAN_IMAGE0:+env DETKIT_IMAGE=$SAN_IMAGE0 }; E1=${SAN_IMAGE1:+env DETKIT_IMAGE=$SAN_IMAGE1 }
san() { # TOOL FAMILY GPU DEADLINE [IMAGE]: one sanitizer job (named TOOL-FAMILY[-IMAGE])
  local e=${5:+env DETKIT_IMAGE=$5 }
  echo "$1-$2${5:+-$5}|$3|$4|${e}compute-sanitizer --tool $1 --error-exitcode 99 $B/gpu-tests --sanitize --family $2 --deadline @DL@" >> $L/jobs.txt
}
if [ "$NGPU" -ge 4 ]; then
  # Four GPUs (session 12): every family under both tools on both images. GPU 0: the default
  # list + racecheck of SAN0 (+ the light families) on the default image; GPU 1: the same on
  # ptx70; GPU 2: racecheck of SAN1 + memcheck of every family, default image; GPU 3: the same
  # on ptx70. DL2/DL3 default to DL0/DL1.
  DL2=${DL2:-$DL0}; DL3=${DL3:-$DL1}
  ALL="image foundation shapes $SAN0 $SAN1"
  for f in image foundation shapes $SAN0; do san racecheck $f 0 $DL0; san racecheck $f 1 $DL1 ptx70; done
  for f in $SAN1; do san racecheck $f 2 $DL2; san racecheck $f 3 $DL3 ptx70; done
  for f in $ALL; do san memcheck $f 2 $DL2; san memcheck $f 3 $DL3 ptx70; done
else
for t in $TOOLS; do
  for f in $SAN0; do echo "$t-$f|0|$DL0|${E0}compute-sanitizer --tool $t --error-exitcode 99 $B/gpu-tests --sanitize --family $f --deadline @DL@" >> $L/jobs.txt; done
  for f in $SAN1; do echo "$t-$f|$G1|$DL1|${E1}compute-sanitizer --tool $t --error-exitcode 99 $B/gpu-tests --sanitize --family $f --deadline @DL@" >> $L/jobs.txt; done
done
fi
run_job() {
  IFS='|' read -r name gpu dl cmd <<< "$1"
  local t0=$(date +%s) rc
  cmd=${cmd//@DL@/$(( dl - (t0 - START) - 25 ))}   # gpu-tests' own deadline, from its start
  local thr=$SAN_THREADS; [[ $name == tests-* ]] && thr=$LIST_THREADS
  CUDA_VISIBLE_DEVICES=$gpu RAYON_NUM_THREADS=$thr timeout -s INT -k 10 $(( dl - (t0 - START) )) $cmd > "$L/san/$name.log" 2>&1; rc=$?
  printf '%-26s gpu %s rc=%-3s %4d s PASS %3d FAIL %2d SKIP %2d %s\n' "$name" "$gpu" "$rc" $(( $(date +%s) - t0 )) \
    "$(grep -c '^PASS' $L/san/$name.log)" "$(grep -c '^FAIL' $L/san/$name.log)" "$(grep -c '^SKIP' $L/san/$name.log)" \
    "$(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY|gpu tests' $L/san/$name.log | tail -2 | tr '\n' ' ')" >> $L/summary.txt
}
# rayon threads per job (results never depend on them): 14 jobs on one host oversubscribe
# its cores, and F1's doors_pet_run_file (the CPU backend's per-chunk parallel loops) took
# 63 s there against 1.9 s alone. A guess, not measured.
export LIST_THREADS=${LIST_THREADS:-8} SAN_THREADS=${SAN_THREADS:-4}
export -f run_job; export L START
( while :; do echo "== $(el) s $(free -g | awk '/Mem:/{print "used " $3 " free " $4}')"; nvidia-smi --query-gpu=index,utilization.gpu,memory.used --format=csv,noheader 2>/dev/null; sleep 10; done ) > $L/mem.log 2>&1 & SAMP=$!
N=$(wc -l < $L/jobs.txt)
tr '\n' '\0' < $L/jobs.txt | xargs -0 -P "$N" -I{} bash -c 'run_job "$1"' _ {}
kill $SAMP; wait
echo "phase 1 done at $(el) s ($NGPU GPU(s))"; sort -k3,3 -k1,1 $L/summary.txt; tail -2 $L/pytest.log
# Per family: each list's PASS/FAIL/SKIP of the family's tests, each sanitizer job's line.
$B/gpu-tests --list > $L/families.txt
echo "== per family (list auto | list ptx70 | sanitizers: rc, s, PASS/FAIL/SKIP)"
for f in $(awk '{print $1}' $L/families.txt | uniq); do
  line="$(printf '%-13s' "$f")"
  for lst in tests-auto tests-ptx70; do
    line="$line $(awk -v f="$f" -v lg="$L/san/$lst.log" -v tag="${lst#tests-}" '
      BEGIN { while ((getline l < lg) > 0) { split(l, w, " "); sub(/:$/, "", w[2]); k = w[1]; if (k == "FAIL" || k == "PASS" && st[w[2]] != "FAIL" || k == "SKIP" && !(w[2] in st)) st[w[2]] = k } }
      $1 == f { n++; if (st[$2] == "PASS") p++; else if (st[$2] == "FAIL") x++; else if (st[$2] == "SKIP") s++; else u++ }
      END { printf "%s %d/%d pass, %d fail, %d skip, %d not run |", tag, p, n, x, s, u }' $L/families.txt)"
  done
  for t in $TOOLS; do
    j=$(grep -E "^$t-$f(-ptx70)? " $L/summary.txt | awk '{printf "%s %s %s P%s F%s S%s; ", $1, $4, $5, $8, $10, $12}')
    [ -n "$j" ] && line="$line $j;"
  done
  echo "$line"
done | tee $L/families-summary.txt
grep -h '^slowest' $L/san/tests-*.log
fi
[[ " $PHASES " == *" 2 "* ]] || { cd /tmp && tar czf $OUT/logs.tgz L; cp $L/summary.txt $L/families-summary.txt $OUT/ 2>/dev/null; exit 0; }

step() { local name=$1 lim=$2; shift 2; local left=$(( TOTAL - $(el) - 8 ))
  if [ $left -lt 15 ]; then echo "=== $name skipped (time)"; return; fi
  [ $lim -gt $left ] && lim=$left
  timeout $lim "$@" > $L/$name.log 2>&1; echo "=== $name rc=$? at $(el) s"; }
step bh 120 $B/bench-host --reps 15 --phases --csv $L/rust.csv
step dv 30 $B/bench-host --only devview --reps 15 --csv $L/dv.csv
step py 95 python3 crates/python/bench_host.py --backend cuda --reps 15 --producer cupy --rust $L/rust.csv,$L/dv.csv --rows cluster1,cluster64,cluster1-pinned,cluster64-pinned,seed1,seed64,convert,sort,coincide,cluster1-dev,cluster64-dev,seed64-dev,seed64-flat-dev
step cpu 35 $B/bench-cpu --threads 1,16 --only pet --pet 24 --case convert,coincide --reps 5
step kb 40 $B/detkit-bench --sizes 26 --reps 15 --variants --csv $L/detkit.csv
step cub 25 /tmp/cub --sizes 26 --reps 15
[ -s $L/cub.log ] && python3 bench/compare.py $L/detkit.csv $L/cub.log --out $L/compare.md > /dev/null 2>&1
cd /tmp && tar czf $OUT/logs.tgz L; cp $L/summary.txt $L/families-summary.txt $OUT/ 2>/dev/null
echo "== rust"; grep -hE "^(cluster_events|seed|pet_|devview)" $L/bh.log $L/dv.log | cut -c1-150 | tail -40
echo "== py"; grep -v "^#" $L/py.log | tail -12 | cut -c1-150
echo "== cpu"; grep -vE "^#" $L/cpu.log | tail -8 | cut -c1-150
echo "== cub"; grep -E "scan|sort|select|hist" $L/compare.md 2>/dev/null | head -24
