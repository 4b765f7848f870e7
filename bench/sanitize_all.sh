#!/usr/bin/env bash
# Every GPU test family under racecheck and memcheck, each family in ONE process, in
# parallel on one GPU (issue 28), plus the full GPU tests on both images.
# Usage: bench/sanitize_all.sh GPU_TESTS_BINARY OUT_DIR [PARALLEL] [DEADLINE_S]
#   GPU_TESTS_BINARY: the release test binary (`cargo test --release -p detkit-tests --test gpu
#   --no-run`), or bin/gpu-tests of a bundle. Each family runs as
#   `compute-sanitizer --tool T --error-exitcode 99 BIN --sanitize --family F` (the flag: the
#   binary cannot tell it runs under the tool; job `detect` shows that). Logs:
#   OUT_DIR/{racecheck,memcheck}-F.log, tests-{auto,ptx70}.log, mem.log (host memory and the
#   largest processes every 5 s), and OUT_DIR/summary.txt (one line per job).
# Set JOBS="racecheck memcheck tests" to choose the job kinds (default: all three), and
# FAMILIES="pet doors ..." to choose the families (default: every family, longest first).
set -uo pipefail
bin="${1:?usage: sanitize_all.sh BIN OUT [PARALLEL] [DEADLINE_S]}"
out="${2:?usage}"; par="${3:-12}"; deadline="${4:-420}"
mkdir -p "$out"
for d in /usr/local/cuda/bin /usr/local/cuda/compute-sanitizer; do [ -d "$d" ] && PATH="$PATH:$d"; done
export PATH
jobs_kinds="${JOBS:-racecheck memcheck tests}"
start=$(date +%s)
families=$("$bin" --list | awk '{print $1}' | uniq)
# Longest first (racecheck of the sort, PET, clustering families take longest).
order="${FAMILIES:-radix_sort pet clustering doors device_views seeding foundation shapes image}"
jobfile="$out/jobs.txt"; : > "$jobfile"
for k in $jobs_kinds; do
  case "$k" in
    tests)
      echo "tests-auto|$bin --isolate" >> "$jobfile"
      echo "tests-ptx70|env DETKIT_IMAGE=ptx70 $bin --isolate" >> "$jobfile"
      echo "detect|compute-sanitizer --tool memcheck $bin --exact params_layout" >> "$jobfile" ;;
  esac
done
for f in $order; do
  echo "$families" | grep -qx "$f" || continue
  for k in $jobs_kinds; do
    case "$k" in
      racecheck|memcheck)
        echo "$k-$f|compute-sanitizer --tool $k --error-exitcode 99 $bin --sanitize --family $f" >> "$jobfile" ;;
    esac
  done
done
( while :; do
    echo "== $(( $(date +%s) - start )) s: $(free -g | awk '/Mem:/{print "used " $3 " GiB, free " $4 " GiB"}')"
    ps -eo rss,etimes,args --sort=-rss | awk 'NR>1 && NR<=7 {printf "  %6.2f GiB %5d s %s\n", $1/1048576, $2, substr($0, index($0,$3), 110)}'
    sleep 5
  done ) > "$out/mem.log" 2>&1 &
sampler=$!
run_job() {
  local name="${1%%|*}" cmd="${1#*|}" t0 rc left
  t0=$(date +%s)
  left=$(( deadline - (t0 - start) ))
  if [ "$left" -le 5 ]; then echo "$name: not started (deadline)" >> "$out/summary.txt"; return; fi
  # gpu-tests' own deadline 20 s before the job's: tests not started print SKIP lines.
  case "$cmd" in *"$bin"*) cmd="$cmd --deadline $(( left > 40 ? left - 20 : 20 ))" ;; esac
  timeout -s INT -k 10 "$left" $cmd > "$out/$name.log" 2>&1
  rc=$?
  local pass fail sum
  pass=$(grep -c '^PASS' "$out/$name.log"); fail=$(grep -c '^FAIL' "$out/$name.log")
  sum=$(grep -E 'SUMMARY|gpu tests' "$out/$name.log" | tail -2 | tr '\n' ' ')
  local rss
  rss=$(grep -o 'peak [0-9.]* GiB' "$out/$name.log" | awk '{if ($2>m) m=$2} END {print m+0}')
  printf '%-24s rc=%-3s %4d s  PASS %3d FAIL %2d  peak RSS %s GiB  %s\n' "$name" "$rc" \
    $(( $(date +%s) - t0 )) "$pass" "$fail" "$rss" "$sum" >> "$out/summary.txt"
}
export -f run_job; export out start deadline
tr '\n' '\0' < "$jobfile" | xargs -0 -P "$par" -I{} bash -c 'run_job "$1"' _ {}
kill "$sampler" 2>/dev/null
sort "$out/summary.txt" -o "$out/summary.txt"
cat "$out/summary.txt"
