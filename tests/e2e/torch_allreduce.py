# A real client: torch.distributed with init_method="env://" reads only what muster set.
import os
import sys

import torch
import torch.distributed as dist

dist.init_process_group("gloo", init_method="env://")
rank, world = dist.get_rank(), dist.get_world_size()
assert rank == int(os.environ["RANK"]) and world == int(os.environ["WORLD_SIZE"])

# Rank r contributes r+1 in every element: the sum is world*(world+1)/2, computed here
# independently of the collective.
values = torch.full((4096,), float(rank + 1), dtype=torch.float64)
dist.all_reduce(values, op=dist.ReduceOp.SUM)
expected = world * (world + 1) / 2
wrong = int((values != expected).sum().item())
print(f"rank {rank} of {world} local_rank {os.environ['LOCAL_RANK']} "
      f"sum {values[0].item():g} expected {expected:g} wrong {wrong}", flush=True)
dist.barrier()
dist.destroy_process_group()
sys.exit(0 if wrong == 0 else 1)
