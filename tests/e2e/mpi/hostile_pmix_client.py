#!/usr/bin/python3
"""An MPI rank that first attacks its node's PMIx server as a local user could, then joins
its world (the security suite runs it under `muster run`).

Rank 0 finds the server's TCP listener in the URI the server gave it (PMIX_SERVER_URI*),
and sends it garbage, a 4 GiB length prefix and an unauthenticated header, then holds 64
idle connections for 2 s. Every rank then makes an Allreduce: the job must not notice.
Prints one line per attack and the rank's sum.
"""
import os
import socket
import struct
import sys
import time


def server_address():
    for name in ("PMIX_SERVER_URI41", "PMIX_SERVER_URI4", "PMIX_SERVER_URI3", "PMIX_SERVER_URI21",
                 "PMIX_SERVER_URI2"):
        uri = os.environ.get(name, "")
        if "tcp4://" in uri:
            host, port = uri.split("tcp4://", 1)[1].rsplit(":", 1)
            return host, int(port)
    return None


def attack(address, payload):
    try:
        with socket.create_connection(address, timeout=3) as sock:
            sock.sendall(payload)
            sock.settimeout(2)
            try:
                while sock.recv(65536):
                    pass
                return "closed by the server"
            except socket.timeout:
                return "left open"
    except OSError as e:
        return f"refused ({e.strerror})"


def main():
    address = server_address()
    if address is None:
        print("no PMIx server URI with a TCP address", flush=True)
        return 2
    if os.environ.get("PMIX_RANK") == "0":
        attacks = {
            "garbage": b"\x00\xffGET / HTTP/1.1\r\n\r\n" * 64,
            "4 GiB length prefix": struct.pack("<I", 0xFFFFFFFF) * 16,
            "unauthenticated header": b"PMIX" + struct.pack("<I", 1 << 30) + b"\x00" * 256,
        }
        for name, payload in attacks.items():
            print(f"{name}: {attack(address, payload)}", flush=True)
        idle = []
        for _ in range(64):
            try:
                idle.append(socket.create_connection(address, timeout=3))
            except OSError:
                pass
        time.sleep(2)
        for sock in idle:
            sock.close()
        print(f"{len(idle)} idle connections held", flush=True)

    from mpi4py import MPI
    comm = MPI.COMM_WORLD
    total = comm.allreduce(comm.Get_rank() + 1)
    print(f"rank {comm.Get_rank()} of {comm.Get_size()}: sum {total}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
