#!/usr/bin/env python3
"""Writes a package index for the egress tests (PEP 503 "simple" pages) with one package, `demo`
1.0, as the smallest wheel pip installs: a module and the three .dist-info files (METADATA,
WHEEL, RECORD with the hashes pip checks).

usage: simple_index.py ROOT   (ROOT/simple/..., ROOT/packages/demo-1.0-py3-none-any.whl)
"""
import base64
import hashlib
import os
import sys
import zipfile

root = sys.argv[1]
files = {
    "demo/__init__.py": b'GREETING = "hello from demo"\n',
    "demo-1.0.dist-info/METADATA": b"Metadata-Version: 2.1\nName: demo\nVersion: 1.0\n",
    "demo-1.0.dist-info/WHEEL": (b"Wheel-Version: 1.0\nGenerator: simple_index.py\n"
                                  b"Root-Is-Purelib: true\nTag: py3-none-any\n"),
}
record = ""
for name, data in files.items():
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    record += "%s,sha256=%s,%d\n" % (name, digest, len(data))
record += "demo-1.0.dist-info/RECORD,,\n"
files["demo-1.0.dist-info/RECORD"] = record.encode()

wheel = "demo-1.0-py3-none-any.whl"
os.makedirs(os.path.join(root, "packages"), exist_ok=True)
os.makedirs(os.path.join(root, "simple", "demo"), exist_ok=True)
path = os.path.join(root, "packages", wheel)
with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as z:
    for name, data in files.items():
        z.writestr(name, data)
with open(path, "rb") as f:
    sha = hashlib.sha256(f.read()).hexdigest()
with open(os.path.join(root, "simple", "index.html"), "w") as f:
    f.write('<!DOCTYPE html>\n<html><body><a href="demo/">demo</a></body></html>\n')
with open(os.path.join(root, "simple", "demo", "index.html"), "w") as f:
    f.write('<!DOCTYPE html>\n<html><body><a href="../../packages/%s#sha256=%s">%s</a>'
            "</body></html>\n" % (wheel, sha, wheel))
