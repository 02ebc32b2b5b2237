# One rank of gpu_smoke_bench.sh's torch side (started by `muster run`): torch.distributed over NCCL
# timed as nccl-tests times: warm-up, a barrier, 20 runs enqueued back to back, one
# synchronisation; each size's time is the mean over the ranks, as muster's time_us is.
import json, os, sys, time, torch, torch.distributed as dist
torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
dist.init_process_group("nccl", init_method="env://")
n = dist.get_world_size(); out = {}
for op in ("all_reduce", "all_gather"):
    for shift in range(3, 27, 2):
        b = 1 << shift; e = max(1, b // 4)
        if op == "all_reduce":
            x = torch.ones(e, device="cuda"); step = lambda: dist.all_reduce(x)
        else:
            x = torch.ones(max(1, e // n), device="cuda"); y = torch.empty(max(1, e // n) * n, device="cuda")
            step = lambda: dist.all_gather_into_tensor(y, x)
        for _ in range(5): step()
        dist.barrier(); torch.cuda.synchronize(); t = time.perf_counter()
        for _ in range(20): step()
        torch.cuda.synchronize()
        mine = torch.tensor([(time.perf_counter() - t) / 20 * 1e6], device="cuda")
        dist.all_reduce(mine)
        out.setdefault(op, {})[str(b)] = mine.item() / n
if dist.get_rank() == 0: print("TORCH " + json.dumps(out), flush=True)
dist.destroy_process_group()
