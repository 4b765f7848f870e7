#!/usr/bin/env bash
# One device call for the radix sort's acceptance (issue 11), inside a gpu bundle:
# every GPU test group, and memcheck / racecheck / synccheck of each radix_sort group
# (`--quick` sizes), all in parallel, each process bounded by LIMIT seconds (default 420);
# EXTRA_RACE="group ..." adds racecheck runs of other groups; then `bin/detkit demo`.
# Usage: bench/final_sort_check.sh OUT_DIR
set -uo pipefail
out="${1:?usage: final_sort_check.sh OUT_DIR}"; mkdir -p "$out"
limit="${LIMIT:-420}"
for d in /usr/local/cuda/bin /usr/local/cuda/compute-sanitizer; do [ -d "$d" ] && PATH="$PATH:$d"; done
groups="radix_sort_keys_u32 radix_sort_keys_u64 radix_sort_pairs_u32 radix_sort_pairs_u64 radix_sort_payloads radix_sort_reuse radix_sort_errors bucket pet_sort"
timeout "$limit" bin/gpu-tests > "$out/gpu-tests.log" 2>&1 &
for tool in memcheck racecheck synccheck; do
  for g in $groups; do
    timeout "$limit" compute-sanitizer --tool "$tool" --error-exitcode 1 bin/gpu-tests --quick "$g" \
      > "$out/san-$tool-$g.log" 2>&1 &
  done
done
for g in ${EXTRA_RACE:-}; do
  timeout "$limit" compute-sanitizer --tool racecheck --error-exitcode 1 bin/gpu-tests --quick "$g" \
    > "$out/san-racecheck-$g.log" 2>&1 &
done
wait
bin/detkit demo --backend cuda > "$out/demo.log" 2>&1; echo "demo exit $?"; tail -20 "$out/demo.log"
grep -E "^(PASS|FAIL)|gpu tests:" "$out/gpu-tests.log"
for tool in memcheck racecheck synccheck; do
  extra=""; [ "$tool" = racecheck ] && extra="${EXTRA_RACE:-}"
  for g in $groups $extra; do
    f="$out/san-$tool-$g.log"
    s=$(grep -E "ERROR SUMMARY|RACECHECK SUMMARY" "$f" | tail -1)
    r=$(grep -E "^(PASS|FAIL)" "$f" | tr '\n' ' ')
    echo "$tool $g: ${s:-no summary (timed out?)} | $r"
  done
done
