#!/usr/bin/python3
"""A hostile client for muster's job servers (the test suite runs it during a smoke test).

Usage: hostile_client.py IDLE_COUNT HOST:PORT...

Against every address: garbage, a 4 GiB length prefix, a correct-looking rendezvous write
without the handshake; then IDLE_COUNT idle connections spread over the addresses, held
until the servers shed them. Prints one line per attack and exits 0 when every connection
was closed by the server (nothing of it was taken), 1 otherwise.
"""
import concurrent.futures
import resource
import select
import socket
import struct
import sys
import time


def closed_by_server(sock, limit=15.0):
    """True when the server closes the connection within `limit` seconds."""
    sock.settimeout(limit)
    try:
        while True:
            data = sock.recv(65536)
            if not data:
                return True
    except (ConnectionResetError, BrokenPipeError):
        return True
    except socket.timeout:
        return False


def attack(target, payload):
    host, port = target.rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=5) as sock:
        try:
            sock.sendall(payload)
        except (ConnectionResetError, BrokenPipeError):
            return True
        return closed_by_server(sock)


def main():
    idle_count = int(sys.argv[1])
    targets = sys.argv[2:]
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, idle_count + 1024), hard))
    key, value = b"gloo/world/rank0", b"10.66.66.66:6666"
    attacks = {
        "garbage": b"\x00\xffGET / HTTP/1.1\r\n\r\n" * 64,
        "4 GiB length prefix": b"S" + struct.pack("<I", 0xFFFFFFFF),
        "unauthenticated write": b"S" + struct.pack("<I", len(key)) + key
        + struct.pack("<I", len(value)) + value,
    }
    ok = True
    # All at once: a server holds an unproven connection up to its handshake limit (3 s), and
    # the job under attack must still be running when the last attack lands.
    jobs = [(target, name, payload) for target in targets for name, payload in attacks.items()]
    with concurrent.futures.ThreadPoolExecutor(max_workers=len(jobs)) as pool:
        outcomes = list(pool.map(lambda job: attack(job[0], job[2]), jobs))
    for (target, name, _), closed in zip(jobs, outcomes):
        ok &= closed
        print(f"{target} {name}: {'closed by the server' if closed else 'NOT CLOSED'}")

    idle = []
    for k in range(idle_count):
        host, port = targets[k % len(targets)].rsplit(":", 1)
        try:
            idle.append(socket.create_connection((host, int(port)), timeout=5))
        except OSError:
            pass  # refused outright: shed too
    deadline = time.time() + 20
    open_ones = list(idle)
    while open_ones and time.time() < deadline:
        readable, _, _ = select.select(open_ones, [], [], 1.0)
        for sock in readable:
            try:
                data = sock.recv(65536)
            except OSError:
                data = b""
            if not data:
                open_ones.remove(sock)
    print(f"{idle_count} idle connections: {idle_count - len(open_ones)} shed by the servers, "
          f"{len(open_ones)} still open")
    ok &= not open_ones
    for sock in idle:
        sock.close()
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
