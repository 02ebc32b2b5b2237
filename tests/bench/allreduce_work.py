# stacks_bench's job: N all-reduces of 256 Ki floats over torch Gloo; rank 0 prints how long
# they took, timed from a barrier after the rendezvous to a barrier after the last, so that
# torch's import and the rendezvous (seconds on shared cores) are not in the figure.
import os
import sys
import time

import torch
import torch.distributed as dist

rank = int(os.environ["RANK"])
dist.init_process_group("gloo", init_method="env://")
values = torch.ones(256 * 1024)
dist.barrier()
start = time.monotonic()
for _ in range(int(sys.argv[1])):
    dist.all_reduce(values)
dist.barrier()
if rank == 0:
    print(f"work took {time.monotonic() - start:.3f} s", flush=True)
dist.destroy_process_group()
