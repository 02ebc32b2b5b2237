#!/usr/bin/env bash
# Runs every libFuzzer target on its seed corpus for SECONDS each (default 20), stopping at
# the first finding: a crash, a sanitizer report, a leak, a timeout or running out of memory.
# libFuzzer runs on one core, so as many targets run at once as there are cores: each still
# gets its SECONDS, and the whole takes a fraction of the time.
# New inputs the fuzzers find go to a temporary directory, never into the tree.
# Usage: tests/fuzz/run_fuzzers.sh BUILD_DIR [SECONDS]   (BUILD_DIR configured -DMUSTER_FUZZ=ON)
set -euo pipefail
build=${1:?usage: run_fuzzers.sh BUILD_DIR [SECONDS]}
seconds=${2:-20}
here=$(cd "$(dirname "$0")" && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
at_once=$(nproc)

# One target; its report goes to $work/NAME.report, and it fails on a finding.
fuzz_one() {
  local name=$1 corpus=$here/corpus/$1
  mkdir -p "$work/$name"
  {
    echo "fuzz_$name: ${seconds}s on $(ls "$corpus" | wc -l) seeds"
    # -timeout: one input may take at most 10 s; -rss_limit_mb: and 2 GB; -max_len: inputs up
    # to 64 KiB (a cluster file, a batch of frames). Findings are written to $work/NAME-.
    if ! "$build/fuzz/fuzz_$name" "$work/$name" "$corpus" -max_total_time="$seconds" -timeout=10 \
          -rss_limit_mb=2048 -max_len=65536 -print_final_stats=1 -artifact_prefix="$work/$name-" \
          > "$work/$name.log" 2>&1; then
      tail -n 60 "$work/$name.log"
      echo "fuzz_$name: FINDING (input above, copied to tests/fuzz/findings/)"
      return 1
    fi
    grep -E "stat::number_of_executed_units|stat::peak_rss_mb" "$work/$name.log" | sed "s/^/  /"
  } > "$work/$name.report" 2>&1
}

names=()
for corpus in "$here"/corpus/*/; do names+=("$(basename "$corpus")"); done
found=0
for ((first = 0; first < ${#names[@]}; first += at_once)); do
  batch=("${names[@]:first:at_once}")
  pids=()
  for name in "${batch[@]}"; do
    fuzz_one "$name" &
    pids+=($!)
  done
  for i in "${!batch[@]}"; do
    wait "${pids[$i]}" || found=1
    cat "$work/${batch[$i]}.report"
  done
  if ((found)); then
    mkdir -p "$here/findings"
    cp "$work"/*-crash-* "$work"/*-leak-* "$work"/*-timeout-* "$work"/*-oom-* "$here/findings/" 2>/dev/null || true
    exit 1
  fi
done
echo "every fuzz target ran ${seconds}s without a finding"
