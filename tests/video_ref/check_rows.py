"""Checks the clips a trainer decoded from video files against the clips
they were written from (tests/video_train.sh).

    check_rows.py FRAMES.npy MIN_PSNR DUMP/step-000001.safetensors ...

Each dumped step's input `video` (B, 1, F, 64, 64) in [0, 1]: every row is
matched to the reference clip of highest PSNR (peak 1); the rows of the
steps given (one epoch: as many rows as clips) must use every clip once,
and each PSNR must be above MIN_PSNR (inf: equal to the byte). Prints the
least and mean PSNR."""
import json
import math
import struct
import sys

import numpy as np

# the runtime's values: byte / 255 in float32 (N, F, 64, 64)
ref = (np.load(sys.argv[1]).astype(np.float32) / np.float32(255)).astype(np.float64)
floor = float(sys.argv[2])
rows = []
for path in sys.argv[3:]:
    b = open(path, "rb").read()
    n = struct.unpack("<Q", b[:8])[0]
    h = json.loads(b[8:8 + n])
    s, e = h["video"]["data_offsets"]
    v = np.frombuffer(b[8 + n + s:8 + n + e], np.float32).reshape(h["video"]["shape"])
    rows += [v[r, 0].astype(np.float64) for r in range(v.shape[0])]
used, psnrs = [], []
for x in rows:
    mse = ((ref - x[None]) ** 2).reshape(len(ref), -1).mean(axis=1)
    k = int(np.argmin(mse))
    used.append(k)
    psnrs.append(math.inf if mse[k] == 0 else 10 * math.log10(1 / mse[k]))
print("rows %d, clips used %s, PSNR least %.2f dB, mean %.2f dB" %
      (len(rows), sorted(used), min(psnrs), sum(psnrs) / len(psnrs)))
assert sorted(used) == list(range(len(ref))), "an epoch must use every clip once: %s" % used
assert min(psnrs) > floor or min(psnrs) == floor == math.inf, "PSNR %.2f dB at or below %.2f" % (min(psnrs), floor)
