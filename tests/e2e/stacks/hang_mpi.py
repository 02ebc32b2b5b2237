# An mpi4py job (Open MPI, served PMIx by muster) that hangs, for muster's stacks report:
# rank 2 (or the rank given) sleeps before the allreduce the others wait in. Each rank
# prints "in place" once it is where it stays.
import sys, time  # noqa: E401 (the lines below are named by tests: keep them where they are)

from mpi4py import MPI

comm = MPI.COMM_WORLD
if comm.Get_rank() == int(sys.argv[1] if len(sys.argv) > 1 else 2):
    print("in place: asleep", flush=True)
    time.sleep(100000)
print("in place: allreduce", flush=True)
comm.allreduce(1)
