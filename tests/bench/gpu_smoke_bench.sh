#!/usr/bin/env bash
# Benchmark (not a test): `muster smoke --backend nccl` against torch.distributed over NCCL
# (tests/bench/torch_nccl_sweep.py, started by `muster run`) on this machine's GPUs, in one
# run, ROUNDS times, with the ratio per op and size. Needs a GPU, NCCL and a PyTorch with CUDA.
# Usage: tests/bench/gpu_smoke_bench.sh [ROUNDS] [RANKS]   (PYTHON=... picks the interpreter)
set -euo pipefail
cd "$(dirname "$0")/../.."
rounds=${1:-2} ranks=${2:-1} muster=${MUSTER:-build/muster} python=${PYTHON:-python3}
out=$(mktemp -d); trap 'rm -rf "$out"' EXIT
for round in $(seq "$rounds"); do
  "$muster" smoke -n "$ranks" --backend nccl --min-bytes 8 --max-bytes 32M --iters 20 --json > "$out/smoke$round.json"
  "$muster" run -n "$ranks" -- "$python" tests/bench/torch_nccl_sweep.py > "$out/torch$round.txt"
done
"$python" - "$out" "$rounds" <<'PY'
import json, sys
out, rounds = sys.argv[1], int(sys.argv[2])
for r in range(1, rounds + 1):
    m = json.load(open(f"{out}/smoke{r}.json"))
    t = json.loads(open(f"{out}/torch{r}.txt").read().split("TORCH ", 1)[1].splitlines()[0])
    print(f"round {r}: {'op':10} {'bytes':>9} {'muster us':>9} {'torch us':>9} muster/torch")
    for row in m["results"]:
        theirs = t.get(row["op"], {}).get(str(row["bytes"]))
        if row["group"] == "world" and theirs:
            print(f"         {row['op']:10} {row['bytes']:>9} {row['time_us']:9.1f} {theirs:9.1f} {row['time_us'] / theirs:6.2f}")
PY
