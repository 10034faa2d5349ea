"""The --save-hf directories of one model trained under several plans hold
the serial run's export, tensor by tensor, without transformers
(tests/hf_internvl.sh: the test venv's transformers has no InternVL).
  same_tensors.py TOL SERIAL_DIR NAME=DIR [NAME=DIR ...]
Each DIR must have SERIAL_DIR's files; its other files (config.json, the
tokenizer's) byte for byte; the safetensors shards (the index's, or
model.safetensors) the same tensor names, shapes and dtypes, and every
tensor's values within TOL of the largest |value| in the serial export (a
tensor's own largest would be too tight for the small ones: AdamW's steps
are lr-sized wherever a gradient is, so float32 reduction order moves a
near-zero gradient's element by a fraction of lr). Reads the files with the standard library and numpy only (F32, BF16,
F16). Prints one PASS or FAIL line per NAME; exit 1 if any failed."""
import json
import os
import struct
import sys

import numpy as np


def tensors(d):
    """name -> (dtype, shape, float32 array) of directory d's shards."""
    idx = os.path.join(d, "model.safetensors.index.json")
    files = (sorted(set(json.load(open(idx))["weight_map"].values()))
             if os.path.exists(idx) else ["model.safetensors"])
    out = {}
    for f in files:
        raw = open(os.path.join(d, f), "rb").read()
        n = struct.unpack("<Q", raw[:8])[0]
        head = json.loads(raw[8:8 + n])
        data = raw[8 + n:]
        for k, v in head.items():
            if k == "__metadata__":
                continue
            a, b = v["data_offsets"]
            buf = data[a:b]
            if v["dtype"] == "F32":
                x = np.frombuffer(buf, "<f4")
            elif v["dtype"] == "BF16":
                x = (np.frombuffer(buf, "<u2").astype(np.uint32) << 16).view(np.float32)
            elif v["dtype"] == "F16":
                x = np.frombuffer(buf, "<f2").astype(np.float32)
            else:
                raise SystemExit(f"{d}/{f}: {k} has dtype {v['dtype']}")
            out[k] = (v["dtype"], tuple(v["shape"]), x)
    return out


tol, serial, rest = float(sys.argv[1]), sys.argv[2], sys.argv[3:]
ref = tensors(serial)
big = max(float(np.abs(x).max(initial=0)) for _, _, x in ref.values())
bad = 0
for spec in rest:
    name, d = spec.split("=", 1)
    why, worst = [], 0.0
    if sorted(os.listdir(d)) != sorted(os.listdir(serial)):
        why.append(f"files {sorted(os.listdir(d))}, serial {sorted(os.listdir(serial))}")
    for f in sorted(os.listdir(serial)):
        p = os.path.join(d, f)
        if not f.endswith(".safetensors") and os.path.exists(p) and \
                open(p, "rb").read() != open(os.path.join(serial, f), "rb").read():
            why.append(f"{f} differs")
    got = tensors(d)
    if got.keys() != ref.keys():
        why.append(f"names: extra {sorted(got.keys() - ref.keys())[:3]}, "
                   f"missing {sorted(ref.keys() - got.keys())[:3]}")
    for k in sorted(got.keys() & ref.keys()):
        (ta, sa, xa), (tb, sb, xb) = got[k], ref[k]
        if (ta, sa) != (tb, sb):
            why.append(f"{k}: {ta}{list(sa)}, serial {tb}{list(sb)}")
            continue
        e = float(np.abs(xa - xb).max(initial=0)) / big
        if e > worst:
            worst, wk = e, k
        if e > tol:
            why.append(f"{k}: {e:.2e} from the serial tensor")
    ok = not why
    bad += not ok
    print(f"{'PASS' if ok else 'FAIL'}: {name}: --save-hf has the serial export's files and {len(ref)} "
          f"tensors' names, shapes and dtypes; values within {worst:.2e} of the largest, {big:.3g}"
          f"{' (' + wk + ')' if worst else ''} (tolerance {tol:g})" + ("" if ok else "; " + "; ".join(why[:4])))
sys.exit(1 if bad else 0)
