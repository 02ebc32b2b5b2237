# A torch Gloo job that hangs, as a user's would, for muster's stacks report:
#   odd:   rank 5 sleeps before the all-reduce the other ranks wait in
#   gone:  rank 3 ends at once; the others wait for it in the rendezvous
#   same:  every rank waits in a receive from the next rank, which never sends
#   finish: rank 5 sleeps a while, then every rank finishes the all-reduce
# Each rank prints "in place" once it is where it stays, so that a test knows when to look.
import os
import subprocess
import sys
import time

mode = sys.argv[1]
rank = int(os.environ["RANK"])
world = int(os.environ["WORLD_SIZE"])

# A line a second until the rank is in place: --stall counts from the last line of any rank,
# so it fires once every rank is where it stays, however long torch takes to load. The lines
# come from a shell beside the rank, not a thread: loading torch's extensions holds the GIL
# for seconds at a time on a loaded machine, and a thread would fall silent with it.
ticker = subprocess.Popen(
    ["/bin/sh", "-c", 'while kill -0 "$1" 2>/dev/null; do echo loading; sleep 1; done', "tick", str(os.getpid())])


def in_place(where):
    ticker.terminate()
    ticker.wait()
    print(f"in place: {where}", flush=True)

if mode == "gone" and rank == 3:
    in_place("leaving")
    sys.exit(0)

import torch
import torch.distributed as dist

if mode == "gone":
    in_place("the rendezvous")
dist.init_process_group("gloo", init_method="env://")
values = torch.ones(16)
if mode == "odd" and rank == 5:
    in_place("asleep")
    time.sleep(100000)
if mode == "finish" and rank == 5:
    in_place("asleep")
    time.sleep(float(sys.argv[2]))
    print("awake", flush=True)
if mode == "same":
    in_place("recv")
    dist.recv(values, src=(rank + 1) % world)
if mode != "finish" or rank != 5:
    in_place("all_reduce")
dist.all_reduce(values)
print(f"done {values[0].item():g}", flush=True)
dist.destroy_process_group()
