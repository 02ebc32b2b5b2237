#!/usr/bin/env bash
# Benchmark (not a test): Gloo all_reduce and all_gather from `muster smoke` against
# torch.distributed's Gloo (Debian's python3-torch) at the same sizes and rank counts, in one
# run: the two alternate, ROUNDS times, and the table gives each one's median per size with
# the busbw ratio. Times are nccl-tests' default: the average over ranks of each rank's mean
# per iteration; the slowest rank's is its own column.
# Usage: tests/bench/smoke_bench.sh [ROUNDS] [ITERS] [RANKS...]   (from the project root,
# after building; default 3 rounds of 100 iterations at 2 and 4 ranks)
set -euo pipefail
cd "$(dirname "$0")/../.."
rounds=${1:-3}
iters=${2:-100}
shift $(($# < 2 ? $# : 2))
rank_counts=(2 4)
[[ $# -gt 0 ]] && rank_counts=("$@")
sizes="4096,65536,1048576,16777216"
muster=build/muster
results=$(mktemp)
trap 'rm -f "$results"' EXIT

for ranks in "${rank_counts[@]}"; do
  for ((round = 1; round <= rounds; round++)); do
    smoke=$("$muster" smoke -n "$ranks" --backend gloo --min-bytes 4K --max-bytes 16M \
            --step-factor 16 --iters "$iters" --warmup 5 --json)
    # torch's ranks unbound, as torchrun starts them.
    torch=$("$muster" run -n "$ranks" --bind none --tag none -- /usr/bin/python3 \
            tests/bench/torch_collectives_bench.py "$sizes" "$iters" 5 | tail -n 1)
    printf '%s\t%s\t%s\n' "$ranks" "$smoke" "$torch" | tr -d '\n' >>"$results"
    echo >>"$results"
  done
done

/usr/bin/python3 - "$results" <<'PY'
import json, statistics, sys
runs = {}
for line in open(sys.argv[1]):
    ranks, smoke, torch = line.rstrip("\n").split("\t")
    runs.setdefault(int(ranks), []).append((json.loads(smoke), json.loads(torch)))
factors = {"all_reduce": lambda n: 2 * (n - 1) / n, "all_gather": lambda n: (n - 1) / n}
print("Gloo on this machine, muster smoke against torch.distributed, medians of",
      len(next(iter(runs.values()))), "alternating rounds")
print("time: average over ranks of each rank's mean (nccl-tests' default); busbw GB/s, decimal")
head = f"{'op':>10} {'ranks':>5} {'bytes':>9} {'muster us':>10} {'max us':>9} {'torch us':>9} {'max us':>9} {'muster bw':>10} {'torch bw':>9} {'ratio':>6}"
print(head)
for n, pairs in sorted(runs.items()):
    for op in ("all_reduce", "all_gather"):
        for size in (4096, 65536, 1048576, 16777216):
            m_avg, m_max, t_avg, t_max = [], [], [], []
            for smoke, torch in pairs:
                row = next(r for r in smoke["results"] if r["op"] == op and r["group"] == "world" and r["bytes"] == size)
                m_avg.append(row["time_us"]); m_max.append(row["max_time_us"])
                avg, slowest = torch[op][str(size)]
                t_avg.append(avg * 1e6); t_max.append(slowest * 1e6)
            m, t = statistics.median(m_avg), statistics.median(t_avg)
            bw = lambda us: size / 1e9 / (us / 1e6) * factors[op](n)
            print(f"{op:>10} {n:>5} {size:>9} {m:>10.1f} {statistics.median(m_max):>9.1f} {t:>9.1f} "
                  f"{statistics.median(t_max):>9.1f} {bw(m):>10.3f} {bw(t):>9.3f} {bw(m) / bw(t):>6.2f}")
print("(ratio = muster busbw / torch busbw, from the medians)")
PY
