#!/usr/bin/env bash
# Benchmark (not a test): folding, expanding and counting host lists with muster and with
# ClusterShell's nodeset, in one run, at growing sizes. The input to folding is the expanded
# list (one name per argument, shuffled), as a user's script would hand it over.
# Run: tests/bench/hostlist_bench.sh [BUILD_DIR]
set -euo pipefail
muster=${1:-build}/muster
command -v nodeset >/dev/null || { echo "needs ClusterShell's nodeset (apt-get install clustershell)"; exit 2; }
seconds() { local start=$(date +%s.%N); "$@" >/dev/null; echo "$(date +%s.%N) - $start" | bc; }
median3() { printf '%s\n' "$@" | sort -g | sed -n 2p; }
printf '%-8s %-20s %-8s %10s %10s %8s\n' hosts shape op "muster s" "nodeset s" ratio
for n in 2500 5000 10000 20000 100000; do
  for shape in 1d 2d; do
    if [ $shape = 1d ]; then list="n[1-$n]"; else list="r[1-$((n / 100))]n[001-100]"; fi
    mapfile -t names < <("$muster" hostlist -e "$list" | tr ' ' '\n' | shuf --random-source=<(yes))
    for op in fold expand count; do
      case $op in
        fold) m=(-f "${names[@]}"); c=(-f "${names[@]}") ;;
        expand) m=(-e "$list"); c=(-e "$list") ;;
        count) m=(-c "$list"); c=(-c "$list") ;;
      esac
      mt=$(median3 $(seconds "$muster" hostlist "${m[@]}") $(seconds "$muster" hostlist "${m[@]}") $(seconds "$muster" hostlist "${m[@]}"))
      if [ "$n" -le 20000 ]; then
        ct=$(median3 $(seconds nodeset "${c[@]}") $(seconds nodeset "${c[@]}") $(seconds nodeset "${c[@]}"))
        printf '%-8s %-20s %-8s %10.3f %10.3f %8.2f\n' "$n" "$list" $op "$mt" "$ct" "$(echo "$mt / $ct" | bc -l)"
      else
        printf '%-8s %-20s %-8s %10.3f %10s %8s\n' "$n" "$list" $op "$mt" "-" "-"
      fi
    done
  done
done
echo "median of 3 runs; wall time of the whole command (start-up included); nodeset skipped above 20000"
