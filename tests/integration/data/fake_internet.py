#!/usr/bin/env python3
"""A tiny fake internet for the egress tests, run inside a network namespace the test made.

DNS on udp ADDR:53 answers A questions from a fixed table (everything else: NXDOMAIN) and writes
every question it receives, one name a line, to QUESTIONS_LOG. HTTP on tcp ADDR:80 answers any
request with "hello from HOST" (the Host header); with CERT and KEY, HTTPS on tcp ADDR:443 does
the same behind TLS. Both also answer GET /bytes/N with N bytes (downloads for bench/); with ROOT,
any other path but "/" is a file under ROOT (a directory: its index.html), else 404, enough for
git's dumb HTTP protocol and a pip simple index. GET /auth appends the request's head to
QUESTIONS_LOG.http (what the brokered-secrets tests check) and answers "checked"; /private/P is
P after Basic authentication with the password in QUESTIONS_LOG.token (else 401). A "hello" request that says "Connection:
keep-alive" is answered keep-alive, and the next request on the connection is read (the
egress tests check that the enforcer lets none through for another name). Prints "ready" once
all listen.

usage: fake_internet.py ADDR QUESTIONS_LOG [CERT KEY [ROOT]]
"""
import base64
import mimetypes
import os
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


ROOT = os.path.realpath(sys.argv[5]) if len(sys.argv) > 5 else None
CHUNK = bytes(1 << 20)


def reply(c, status, body, ctype="text/plain", length=None, head=False, keep=False):
    n = len(body) if length is None else length
    # One write: the tests read a small answer with a single recv (one TLS record).
    c.sendall(b"HTTP/1.1 %s\r\nContent-Type: %s\r\nContent-Length: %d\r\n"
              b"Connection: %s\r\n\r\n" % (status.encode(), ctype.encode(), n,
                                           b"keep-alive" if keep else b"close")
              + (b"" if head else body))


def serve(c):
    with c:
        data = b""
        while True:
            while b"\r\n\r\n" not in data and len(data) < 65536:
                more = c.recv(4096)
                if not more:
                    return
                data += more
            head, _, data = data.partition(b"\r\n\r\n")
            if not answer(c, head):
                return


def answer(c, data):
    """Answers one request (its head); True when the connection stays open for the next."""
    lines = data.split(b"\r\n")
    parts = lines[0].decode("ascii", "replace").split(" ")
    method = parts[0]
    path = parts[1].split("?", 1)[0] if len(parts) > 1 else "/"
    if path.startswith("http://"):  # absolute form
        path = "/" + path.split("/", 3)[3] if path.count("/") >= 3 else "/"
    host = "?"
    for line in lines[1:]:
        if line.lower().startswith(b"host:"):
            host = line[5:].strip().decode("ascii", "replace").split(":")[0]
    if path == "/auth":
        # What a service that checks credentials sees: the head goes to QUESTIONS_LOG.http (never
        # back to the client, so a secret the enforcer put in cannot reach the sandbox here).
        with open(LOG + ".http", "ab") as f:
            f.write(data + b"\r\n")
        reply(c, "200 OK", b"checked\n", head=method == "HEAD")
        return
    if path.startswith("/private/"):
        # A password-protected index or repository: Basic with the password in
        # QUESTIONS_LOG.token (what git and pip send for credentials in a URL), else 401.
        try:
            with open(LOG + ".token") as f:
                want = f.read().strip()
        except OSError:
            want = None
        got = None
        for line in lines[1:]:
            if line.lower().startswith(b"authorization: basic "):
                try:
                    got = base64.b64decode(line[21:].strip()).decode().split(":", 1)[1]
                except (ValueError, IndexError, UnicodeDecodeError):
                    got = None
        if want is None or got != want:
            c.sendall(b"HTTP/1.1 401 Unauthorized\r\nWWW-Authenticate: Basic realm=\"private\"\r\n"
                      b"Content-Length: 0\r\nConnection: close\r\n\r\n")
            return
        path = path[len("/private"):]
    if path.startswith("/bytes/") and path[7:].isdigit():
        left = int(path[7:])
        reply(c, "200 OK", b"", "application/octet-stream", left, head=True)
        while left > 0:
            n = min(left, len(CHUNK))
            c.sendall(CHUNK[:n] if n < len(CHUNK) else CHUNK)
            left -= n
        return
    if ROOT and path != "/":
        f = os.path.realpath(os.path.join(ROOT, path.lstrip("/")))
        if os.path.isdir(f):
            f = os.path.join(f, "index.html")
        if not f.startswith(ROOT + os.sep) or not os.path.isfile(f):
            reply(c, "404 Not Found", b"not found\n", head=method == "HEAD")
            return
        with open(f, "rb") as fh:
            body = fh.read()
        ctype = mimetypes.guess_type(f)[0] or "application/octet-stream"
        reply(c, "200 OK", body, ctype, head=method == "HEAD")
        return
    keep = b"\r\nconnection: keep-alive" in data.lower()
    reply(c, "200 OK", ("hello from %s\n" % host).encode(), keep=keep)
    return keep


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
