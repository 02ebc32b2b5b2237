#!/usr/bin/env bash
# Benchmark (not a test): Gloo all-reduce bus bandwidth from `muster smoke` against
# torch.distributed's Gloo all_reduce (Debian's python3-torch) for the same sizes and number
# of ranks, measured in one run, with the ratio per size.
# Usage: tests/bench/smoke_bench.sh [RANKS] [ITERS]   (from the project root, after building)
set -euo pipefail
cd "$(dirname "$0")/../.."
ranks=${1:-4}
iters=${2:-20}
sizes="4096,65536,1048576,16777216"
muster=build/muster

smoke=$("$muster" smoke -n "$ranks" --backend gloo --min-bytes 4K --max-bytes 16M \
        --step-factor 16 --iters "$iters" --warmup 5 --json)
torch=$("$muster" run -n "$ranks" --tag none -- /usr/bin/python3 \
        tests/bench/torch_allreduce_bench.py "$sizes" "$iters" 5 | tail -n 1)

/usr/bin/python3 - "$ranks" "$smoke" "$torch" <<'PY'
import json, sys
n = int(sys.argv[1])
smoke = json.loads(sys.argv[2])
torch = {int(k): v for k, v in json.loads(sys.argv[3]).items()}
factor = 2 * (n - 1) / n
print(f"all_reduce, {n} ranks, Gloo on this machine; busbw GB/s (decimal), nccl-tests' factor {factor:.2f}")
print(f"{'bytes':>10} {'muster us':>11} {'torch us':>10} {'muster busbw':>13} {'torch busbw':>12} {'ratio':>7}")
for row in smoke["results"]:
    if row["op"] != "all_reduce" or row["group"] != "world" or row["bytes"] not in torch:
        continue
    b = row["bytes"]
    t_us = torch[b] * 1e6
    torch_busbw = b / 1e9 / torch[b] * factor
    print(f"{b:>10} {row['time_us']:>11.1f} {t_us:>10.1f} {row['busbw_gbps']:>13.3f} "
          f"{torch_busbw:>12.3f} {row['busbw_gbps'] / torch_busbw:>7.2f}")
print("(ratio = muster busbw / torch busbw; both time the slowest rank's mean per iteration)")
PY
