# One rank of the torch.distributed Gloo all_reduce benchmark (started by `muster run`).
# Prints, from rank 0, one JSON line: bytes -> mean seconds per all_reduce, the slowest rank's.
import json
import os
import sys
import time

import torch
import torch.distributed as dist

sizes = [int(s) for s in sys.argv[1].split(",")]
iters, warmup = int(sys.argv[2]), int(sys.argv[3])
dist.init_process_group("gloo", init_method="env://")
out = {}
for size in sizes:
    t = torch.ones(max(size // 4, 1), dtype=torch.float32)
    for _ in range(warmup):
        dist.all_reduce(t)
    dist.barrier()
    start = time.perf_counter()
    for _ in range(iters):
        dist.all_reduce(t)
    mine = torch.tensor([(time.perf_counter() - start) / iters], dtype=torch.float64)
    dist.all_reduce(mine, op=dist.ReduceOp.MAX)
    out[size] = mine.item()
if dist.get_rank() == 0:
    print(json.dumps(out), flush=True)
dist.destroy_process_group()
