#!/usr/bin/env python3
"""A tiny fake internet for the egress tests, run inside a network namespace the test made.

DNS on udp ADDR:53 answers A questions from a fixed table (everything else: NXDOMAIN) and writes
every question it receives, one name a line, to QUESTIONS_LOG. HTTP on tcp ADDR:80 answers any
request with "hello from HOST" (the Host header); with CERT and KEY, HTTPS on tcp ADDR:443 does
the same behind TLS. Prints "ready" once all listen.

usage: fake_internet.py ADDR QUESTIONS_LOG [CERT KEY]
"""
import socket
import ssl
import struct
import sys
import threading

ADDR, LOG = sys.argv[1], sys.argv[2]
TABLE = {
    "allowed.test": ADDR,
    "api.allowed.test": ADDR,
    "private.allowed.test": ADDR,
    "other.test": ADDR,
    "denied.test": ADDR,
    "rebind.test": "127.0.0.1",
    "meta.test": "169.254.169.254",
}


def question(msg):
    labels, i = [], 12
    while msg[i]:
        n = msg[i]
        labels.append(msg[i + 1:i + 1 + n].decode("ascii", "replace"))
        i += 1 + n
    qtype = struct.unpack("!H", msg[i + 1:i + 3])[0]
    return ".".join(labels).lower(), qtype, msg[12:i + 5]


def dns(s):
    while True:
        msg, peer = s.recvfrom(4096)
        try:
            name, qtype, q = question(msg)
        except (IndexError, struct.error):
            continue
        with open(LOG, "a") as f:
            f.write(name + "\n")
        answer = TABLE.get(name)
        flags = 0x8180 if answer else 0x8183
        count = 1 if answer and qtype == 1 else 0
        out = msg[:2] + struct.pack("!HHHHH", flags, 1, count, 0, 0) + q
        if count:
            out += b"\xc0\x0c" + struct.pack("!HHIH", 1, 1, 60, 4) + socket.inet_aton(answer)
        s.sendto(out, peer)


def http(s):
    while True:
        c, _ = s.accept()
        threading.Thread(target=serve, args=(c,), daemon=True).start()


def serve(c):
    with c:
        data = b""
        while b"\r\n\r\n" not in data and len(data) < 65536:
            more = c.recv(4096)
            if not more:
                return
            data += more
        host = "?"
        for line in data.split(b"\r\n")[1:]:
            if line.lower().startswith(b"host:"):
                host = line[5:].strip().decode("ascii", "replace").split(":")[0]
        body = ("hello from %s\n" % host).encode()
        c.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\nConnection: close\r\n\r\n"
                  % len(body) + body)


udp = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
udp.bind((ADDR, 53))
tcp = socket.socket()
tcp.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
tcp.bind((ADDR, 80))
tcp.listen(64)
threading.Thread(target=dns, args=(udp,), daemon=True).start()
threading.Thread(target=http, args=(tcp,), daemon=True).start()
if len(sys.argv) > 4:
    tls_ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    tls_ctx.load_cert_chain(sys.argv[3], sys.argv[4])
    tls = socket.socket()
    tls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    tls.bind((ADDR, 443))
    tls.listen(64)

    def https():
        while True:
            c, _ = tls.accept()
            threading.Thread(target=serve_tls, args=(c,), daemon=True).start()

    def serve_tls(c):
        try:
            serve(tls_ctx.wrap_socket(c, server_side=True))
        except (ssl.SSLError, OSError):
            c.close()

    threading.Thread(target=https, daemon=True).start()
print("ready", flush=True)
threading.Event().wait()
