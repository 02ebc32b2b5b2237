#!/bin/bash
# Benchmark (not a test): what `muster stacks` every second costs a running job when the
# reading has a core of its own, as on a node whose job leaves cores idle. stacks_bench
# measures the cost where the job and the readings share the same 2 cores (1.2x), which is
# CPU taken from the job, not the pause; here the job's 2 torch Gloo ranks run on core 0 and
# muster (the head, which reads a local job's ranks itself, and each `muster stacks`) on
# core 1, so that only the hold of each rank is the job's cost. Each report's JSON says how
# long each rank was held still (held_ms); their median and maximum are printed.
# Usage: tests/bench/stacks_cost_pinned.sh [RUNS] [ALLREDUCES]   (default 5 3000)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
muster=${MUSTER:-$here/../../build/muster}
work=$here/allreduce_work.py
runs=${1:-5}
allreduces=${2:-3000}
if [ "$(nproc)" -lt 2 ]; then echo "stacks_cost_pinned: needs 2 cores" >&2; exit 1; fi
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT

job() {
  taskset -c 1 "$muster" run -n 2 --bind none -- taskset -c 0 /usr/bin/python3 "$work" "$allreduces" 2>&1 |
    sed -n 's/.*work took \([0-9.]*\) s.*/\1/p'
}

alone=() beside=() reports=0
for ((r = 0; r < runs; r++)); do
  alone+=("$(job)")
  : >"$scratch/asks"
  (while :; do
    taskset -c 1 "$muster" stacks --json 2>/dev/null >"$scratch/report" &&
      /usr/bin/python3 -c 'import json, sys
for r in json.load(open(sys.argv[1]))["ranks"]: print(r["held_ms"])' "$scratch/report" >>"$scratch/asks"
    sleep 1
  done) &
  asker=$!
  beside+=("$(job)")
  kill "$asker"
  wait "$asker" 2>/dev/null || true
  reports=$((reports + $(wc -l <"$scratch/asks") / 2))
  cat "$scratch/asks" >>"$scratch/held"
done
median() { printf '%s\n' "$@" | sort -n | awk '{v[NR] = $1} END {print v[int((NR + 1) / 2)]}'; }
a=$(median "${alone[@]}")
b=$(median "${beside[@]}")
echo "2 torch Gloo ranks on core 0, $allreduces all-reduces of 1 MiB; muster on core 1 (median of $runs)"
printf '%-28s %10s %10s %8s\n' "" "alone s" "stacks s" "ratio"
printf '%-28s %10.3f %10.3f %8.2f\n' "muster stacks every second" "$a" "$b" "$(echo "$b / $a" | bc -l)"
mean() { printf '%s\n' "$@" | awk '{t += $1} END {printf "%.3f", t / NR}'; }
echo "means: alone $(mean "${alone[@]}") s, beside $(mean "${beside[@]}") s"
echo "each rank held still per report (ms): median $(sort -n "$scratch/held" | awk '{v[NR] = $1} END {printf "%.2f", v[int((NR + 1) / 2)]}'), max $(sort -n "$scratch/held" | tail -1)"
echo "($reports reports taken; runs alone: ${alone[*]}; beside: ${beside[*]})"
