#!/usr/bin/env bash
# Benchmark (not a test): `muster topo --json` against `lstopo-no-graphics --whole-io`, on
# this machine and on the DGX-2 export, measured in one run. Prints medians and ratios.
# Usage: tests/bench/topo_bench.sh [RUNS]   (from the project root, after building)
set -euo pipefail
cd "$(dirname "$0")/../.."
runs=${1:-50}
muster=build/muster
dgx=tests/fixtures/hwloc/nvidia-dgx2.xml
command -v lstopo-no-graphics >/dev/null || { echo "needs lstopo-no-graphics (apt-get install hwloc)"; exit 2; }

# median wall time in milliseconds of RUNS runs of a command
median_ms() {
  local times=()
  for _ in $(seq "$runs"); do
    local start end
    start=$(date +%s%N)
    "$@" >/dev/null
    end=$(date +%s%N)
    times+=($(( (end - start) / 1000 )))
  done
  printf '%s\n' "${times[@]}" | sort -n | awk '{a[NR]=$1} END {printf "%.2f", a[int((NR+1)/2)]/1000}'
}

printf '%-22s %12s %12s %8s\n' "input" "muster ms" "lstopo ms" "ratio"
for input in "this machine" "DGX-2 export"; do
  if [ "$input" = "this machine" ]; then
    m=$(median_ms "$muster" topo --json); l=$(median_ms lstopo-no-graphics --whole-io)
  else
    m=$(median_ms "$muster" topo --json --xml "$dgx"); l=$(median_ms lstopo-no-graphics --whole-io -i "$dgx")
  fi
  printf '%-22s %12s %12s %8s\n' "$input" "$m" "$l" "$(awk -v a="$m" -v b="$l" 'BEGIN {printf "%.2f", a/b}')"
done
echo "(median of $runs runs each; ratio = muster / lstopo)"
