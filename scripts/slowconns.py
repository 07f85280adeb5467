#!/usr/bin/env python3
"""Open N connections to an idem gateway that each declare a 1 MiB body and send one byte, then
close them and print the gateway's resident memory over the following minutes.

Usage: scripts/slowconns.py PID HOST:PORT [N] [SECONDS]
PID is the gateway's process id (its VmRSS is read from /proc); run the gateway with
`idem serve --store memory:// --scope none --upstream URL`. Raise `ulimit -n` above N first.
"""
import socket
import sys
import time


def rss(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS"):
                return int(line.split()[1]) // 1024
    return -1


def main():
    pid, addr = sys.argv[1], sys.argv[2]
    n = int(sys.argv[3]) if len(sys.argv) > 3 else 2000
    secs = int(sys.argv[4]) if len(sys.argv) > 4 else 300
    host, port = addr.rsplit(":", 1)
    print(f"before: RSS {rss(pid)} MiB", flush=True)
    conns = []
    for i in range(n):
        s = socket.create_connection((host, int(port)))
        s.sendall(b"POST /v1/x HTTP/1.1\r\nHost: g\r\nIdempotency-Key: k%d\r\n"
                  b"Content-Length: 1048576\r\n\r\n{" % i)
        conns.append(s)
    time.sleep(3)
    print(f"with {n} slow connections: RSS {rss(pid)} MiB", flush=True)
    for s in conns:
        s.close()
    t0 = time.time()
    while time.time() - t0 < secs:
        time.sleep(20)
        print(f"{int(time.time() - t0)}s after close: RSS {rss(pid)} MiB", flush=True)


if __name__ == "__main__":
    main()
