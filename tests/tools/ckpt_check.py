#!/usr/bin/env python3
"""ckpt_check.py ROOT: an independent reader of mmc's checkpoint layout.

ROOT/latest names a step directory; its manifest.json gives the step, the
world size and the rank files; every rank file must be valid safetensors
whose metadata has the manifest's step, its rank, the world size and the
fingerprint, and a CRC32 (zlib) for every tensor that matches the bytes.
Every other step directory with a manifest (a kept older checkpoint) is
checked the same way.  Prints "STEP NTENSORS" of the live one; exit 1 with a
message on any fault.
"""
import json, os, struct, sys, zlib


def fail(msg):
    print("ckpt_check: " + msg)
    sys.exit(1)


def check_dir(d):
    try:
        man = json.load(open(os.path.join(d, "manifest.json")))
    except Exception as e:
        fail("%s/manifest.json: %s" % (d, e))
    ws, step = man["world_size"], man["step"]
    files = ["rank-%05d.safetensors" % r for r in range(ws)]
    if man.get("files") != files:
        fail("%s/manifest.json: files %r, expected %r" % (d, man.get("files"), files))
    n = 0
    for r, name in enumerate(files):
        p = os.path.join(d, name)
        b = open(p, "rb").read()
        hl = struct.unpack("<Q", b[:8])[0]
        h = json.loads(b[8:8 + hl])
        meta = h.pop("__metadata__", {})
        want = {"step": str(step), "rank": str(r), "world_size": str(ws),
                "fingerprint": man["fingerprint"]}
        for k, v in want.items():
            if meta.get(k) != v:
                fail("%s: metadata %s is %r, expected %r" % (p, k, meta.get(k), v))
        data = b[8 + hl:]
        end = max([v["data_offsets"][1] for v in h.values()] + [0])
        if end != len(data):
            fail("%s: data area %d bytes, tensors cover %d" % (p, len(data), end))
        for k, v in h.items():
            lo, hi = v["data_offsets"]
            crc = "%08x" % (zlib.crc32(data[lo:hi]) & 0xffffffff)
            if meta.get("crc32:" + k) != crc:
                fail("%s: tensor %s: CRC32 %s, metadata says %r" % (p, k, crc, meta.get("crc32:" + k)))
            n += 1
    return step, n


root = sys.argv[1]
try:
    live = open(os.path.join(root, "latest")).read()
except OSError as e:
    fail("%s: %s" % (root, e))
if not live.endswith("\n") or "/" in live.strip() or not live.startswith("step-"):
    fail("%s/latest holds %r" % (root, live))
live = live.strip()
step, n = check_dir(os.path.join(root, live))
for e in sorted(os.listdir(root)):
    if e != live and e.startswith("step-") and os.path.exists(os.path.join(root, e, "manifest.json")):
        check_dir(os.path.join(root, e))
print(step, n)
