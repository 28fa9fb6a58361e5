#!/usr/bin/env python3
"""Runs inside a sandbox for `agvisor_bench --suite egress` (bench/egress_suite.cc); times what
happens in the sandbox, so no exec or channel time is counted.

  download TARGET BYTES   GET http://TARGET/bytes/BYTES on port 80; prints the seconds from
                          connect to the last byte
  connect TARGET N        N times: connect to TARGET:80, send a small GET, read the first bytes
                          of the answer; prints each time in ms
  hold N                  opens N CONNECT tunnels through $http_proxy to allowed.test:80, touches
                          /tmp/opened, waits for /tmp/done (at most 120 s)

TARGET is a name (resolved once, by the sandbox's resolver) or an address. The Host header is
always allowed.test: through the enforcer it is what the policy decides on.
"""
import os
import socket
import sys
import time
import urllib.parse

HOST = b"allowed.test"


def download(target, n):
    buf = bytearray(1 << 20)
    view = memoryview(buf)
    addr = socket.gethostbyname(target)
    start = time.monotonic()
    s = socket.create_connection((addr, 80), 30)
    s.sendall(b"GET /bytes/%d HTTP/1.1\r\nHost: %s\r\nConnection: close\r\n\r\n" % (n, HOST))
    got = 0
    while True:
        k = s.recv_into(view)
        if not k:
            break
        got += k
    took = time.monotonic() - start
    s.close()
    if got < n:
        sys.exit("short download: %d of %d bytes" % (got, n))
    print("%.6f" % took)


def connect(target, n):
    addr = socket.gethostbyname(target)
    req = b"GET / HTTP/1.1\r\nHost: %s\r\nConnection: close\r\n\r\n" % HOST
    times = []
    for _ in range(n):
        start = time.perf_counter()
        s = socket.create_connection((addr, 80), 10)
        s.sendall(req)
        first = s.recv(4096)
        times.append((time.perf_counter() - start) * 1000)
        s.close()
        if not first.startswith(b"HTTP/1.1 200"):
            sys.exit("unexpected answer: %r" % first[:80])
    print(" ".join("%.3f" % t for t in times))


def hold(n):
    proxy = urllib.parse.urlsplit(os.environ["http_proxy"])
    held = []
    for _ in range(n):
        s = socket.create_connection((proxy.hostname, proxy.port), 10)
        s.sendall(b"CONNECT %s:80 HTTP/1.1\r\nHost: %s:80\r\n\r\n" % (HOST, HOST))
        answer = s.recv(4096)
        if not answer.startswith(b"HTTP/1.1 200"):
            sys.exit("CONNECT refused: %r" % answer[:80])
        held.append(s)
    open("/tmp/opened", "w").close()
    deadline = time.monotonic() + 120
    while not os.path.exists("/tmp/done") and time.monotonic() < deadline:
        time.sleep(0.05)
    print(len(held))


if __name__ == "__main__":
    mode = sys.argv[1]
    if mode == "download":
        download(sys.argv[2], int(sys.argv[3]))
    elif mode == "connect":
        connect(sys.argv[2], int(sys.argv[3]))
    elif mode == "hold":
        hold(int(sys.argv[2]))
    else:
        sys.exit("unknown mode " + mode)
