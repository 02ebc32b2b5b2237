"""An 8-rank mpi4py Allreduce sweep for tests/bench/mpi_bench: rank 0 prints one line per
size, "BYTES SECONDS_PER_ALLREDUCE", each the best of 3 timed batches after a warm-up."""
import array

from mpi4py import MPI

world = MPI.COMM_WORLD
for size in (1 << 10, 1 << 14, 1 << 18, 1 << 20, 1 << 22):
    count = size // 8
    mine = array.array("d", bytes(size))
    sums = array.array("d", bytes(size))
    iters = max(2, min(200, (64 << 20) // size))
    world.Allreduce(mine, sums, op=MPI.SUM)
    best = None
    for _ in range(3):
        world.Barrier()
        start = MPI.Wtime()
        for _ in range(iters):
            world.Allreduce(mine, sums, op=MPI.SUM)
        took = world.allreduce(MPI.Wtime() - start, op=MPI.MAX) / iters
        best = took if best is None else min(best, took)
    if world.Get_rank() == 0:
        print(f"{size} {best:.9f}", flush=True)
