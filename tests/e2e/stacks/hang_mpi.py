# An mpi4py job (Open MPI, served PMIx by muster) that hangs, for muster's stacks report:
# rank 2 sleeps before the allreduce the other ranks wait in. Each rank prints "in place"
# once it is where it stays.
import time

from mpi4py import MPI

comm = MPI.COMM_WORLD
if comm.Get_rank() == 2:
    print("in place: asleep", flush=True)
    time.sleep(100000)
print("in place: allreduce", flush=True)
comm.allreduce(1)
