# One rank of the torch.distributed Gloo benchmark (started by `muster run`): all_reduce and
# all_gather at each size (nccl-tests' sizes: all_gather's is the total gathered). Prints,
# from rank 0, one JSON line: op -> bytes -> [mean over ranks, slowest rank], seconds per
# iteration of each rank's mean, as nccl-tests computes them.
import json
import sys
import time

import torch
import torch.distributed as dist

sizes = [int(s) for s in sys.argv[1].split(",")]
iters, warmup = int(sys.argv[2]), int(sys.argv[3])
dist.init_process_group("gloo", init_method="env://")
n = dist.get_world_size()


def timed(step):
    for _ in range(warmup):
        step()
    dist.barrier()
    start = time.perf_counter()
    for _ in range(iters):
        step()
    mine = (time.perf_counter() - start) / iters
    total = torch.tensor([mine], dtype=torch.float64)
    slowest = torch.tensor([mine], dtype=torch.float64)
    dist.all_reduce(total)
    dist.all_reduce(slowest, op=dist.ReduceOp.MAX)
    return [total.item() / n, slowest.item()]


out = {"all_reduce": {}, "all_gather": {}}
for size in sizes:
    t = torch.ones(max(size // 4, 1), dtype=torch.float32)
    out["all_reduce"][size] = timed(lambda: dist.all_reduce(t))
    share = torch.ones(max(size // 4 // n, 1), dtype=torch.float32)
    gathered = [torch.empty_like(share) for _ in range(n)]
    out["all_gather"][size] = timed(lambda: dist.all_gather(gathered, share))
if dist.get_rank() == 0:
    print(json.dumps(out), flush=True)
dist.destroy_process_group()
