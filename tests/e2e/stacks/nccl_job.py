# A rank of a job hung as an NCCL job hangs, as muster's agents see one from outside, for a
# machine with no GPU. What the agent looks at is real, in the kernel's and the libraries'
# own forms:
# - NCCL is loaded: the library file named on the command line is mapped, so that the rank's
#   /proc/PID/maps names it, as it names a real libnccl.so.2.
# - NCCL's RAS service (2.24 and later): every rank listens at NCCL_RAS_ADDR (default
#   localhost:28028, SO_REUSEPORT as NCCL does) and speaks ncclras's protocol 2
#   ("CLIENT PROTOCOL", "TIMEOUT", "STATUS"), answering STATUS with NCCL's text report, whose
#   Warnings name the rank whose all-reduce count fell behind: the odd rank.
# - torch's flight recorder: with TORCH_NCCL_TRACE_BUFFER_SIZE > 0 and
#   TORCH_NCCL_DEBUG_INFO_PIPE_FILE set, a FIFO at <stem><rank>.pipe that a monitor thread
#   reads once a second; anything written to it makes the rank write its dump, a pickle, to
#   <TORCH_NCCL_DEBUG_INFO_TEMP_FILE or /tmp/nccl_trace_rank_><rank>, as torch does.
# Usage: nccl_job.py LIBNCCL ODD_RANK [finish SECONDS]
import mmap
import os
import pickle
import socket
import sys
import threading
import time

rank = int(os.environ["RANK"])
world = int(os.environ["WORLD_SIZE"])
odd = int(sys.argv[2])
finish_after = float(sys.argv[4]) if len(sys.argv) > 4 and sys.argv[3] == "finish" else None
launched = {r: 12 for r in range(world)}
launched[odd] = 11

with open(sys.argv[1], "rb") as library:
    nccl_mapping = mmap.mmap(library.fileno(), 0, prot=mmap.PROT_READ)


def status_report():
    others = world - 1
    return (
        "Job summary\n===========\n\n"
        "  Nodes  Processes         GPUs  Processes     GPUs\n"
        "(total)   per node  per process    (total)  (total)\n"
        f"      {world // 2}          2            1          {world}        {world}\n\n"
        "Errors\n======\n\n"
        "Warnings\n========\n\n"
        "#0-0 (7b6e4f2a9c1d3e58) MISMATCH\n"
        "  Communicator ranks have different AllReduce operation counts\n"
        f"  {others} ranks have launched up to operation {launched[0 if odd else 1]}\n"
        f"  Rank {odd} has launched up to operation {launched[odd]} -- GPU {odd % 2} managed by process 4242"
        " on node 10.88.0.13\n\n"
    )


def serve_ras_client(conn):
    with conn, conn.makefile("rwb", buffering=0) as f:
        while True:
            line = f.readline().decode().strip()
            if not line:
                return
            if line.startswith("CLIENT PROTOCOL"):
                f.write(b"SERVER PROTOCOL 2\n")
            elif line.startswith("TIMEOUT") or line.startswith("SET FORMAT"):
                f.write(b"OK\n")
            elif line.endswith("STATUS"):
                f.write(status_report().encode())
                return


def ras_service():
    host, _, port = os.environ.get("NCCL_RAS_ADDR", "localhost:28028").rpartition(":")
    server = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    server.bind(("127.0.0.1" if host in ("", "localhost") else host, int(port)))
    server.listen(16)
    while True:
        conn, _ = server.accept()
        threading.Thread(target=serve_ras_client, args=(conn,), daemon=True).start()


def flight_recorder_monitor(pipe_path, dump_path):
    if os.path.lexists(pipe_path):
        os.unlink(pipe_path)
    os.mkfifo(pipe_path, 0o600)
    fd = os.open(pipe_path, os.O_RDONLY | os.O_NONBLOCK)
    while True:
        time.sleep(1.0)
        try:
            asked = os.read(fd, 128)
        except BlockingIOError:
            asked = b""
        if asked:
            entries = [{"record_id": i, "pg_id": 0, "collective_seq_id": i + 1, "profiling_name": "nccl:all_reduce",
                        "state": "completed" if i + 1 < launched[rank] else "scheduled"}
                       for i in range(launched[rank])]
            with open(dump_path, "wb") as out:
                pickle.dump({"version": "2.4", "rank": rank, "entries": entries}, out)


threading.Thread(target=ras_service, daemon=True).start()
if int(os.environ.get("TORCH_NCCL_TRACE_BUFFER_SIZE", "0")) > 0 and os.environ.get("TORCH_NCCL_DEBUG_INFO_PIPE_FILE"):
    stem = os.environ["TORCH_NCCL_DEBUG_INFO_PIPE_FILE"]
    dump = os.environ.get("TORCH_NCCL_DEBUG_INFO_TEMP_FILE", "/tmp/nccl_trace_rank_")
    threading.Thread(target=flight_recorder_monitor, args=(f"{stem}{rank}.pipe", f"{dump}{rank}"),
                     daemon=True).start()


def all_reduce():
    time.sleep(finish_after if finish_after is not None else 1000)


def load_batch():
    time.sleep(finish_after if finish_after is not None else 1000)


time.sleep(0.5)  # the service and the pipe in place
print(f"[{rank}] in place", flush=True)
if rank == odd:
    load_batch()
else:
    all_reduce()
print(f"[{rank}] done", flush=True)
