"""An mpi4py program as a user writes one (Open MPI underneath, Debian's default), for the
tests that start it under muster: it says its rank, the world's size and its rank among the
ranks of its node, checks an Allreduce element by element, and with an argument N, rank N
calls Abort(7)."""
import array
import sys

from mpi4py import MPI

world = MPI.COMM_WORLD
rank, size = world.Get_rank(), world.Get_size()
local = world.Split_type(MPI.COMM_TYPE_SHARED).Get_rank()
count = 4096
mine = array.array("d", (rank + i for i in range(count)))
sums = array.array("d", bytes(8 * count))
world.Allreduce(mine, sums, op=MPI.SUM)
wrong = sum(1 for i in range(count) if sums[i] != size * (size - 1) / 2 + size * i)
if len(sys.argv) > 1 and int(sys.argv[1]) == rank:
    world.Abort(7)
print(f"rank {rank} of {size} local {local} wrong {wrong}", flush=True)
