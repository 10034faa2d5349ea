"""Writes the runtime's generated clips (mmc-clips' PNG strips: 64 x 64F
grey bytes, clip_<index>.png, and captions.txt) as video files with
Debian's ffmpeg, and OpenSoraPlan-style lists of them (tests/video_train.sh).

    write_clips.py CLIPS_DIR N F OUT_DIR

OUT_DIR gets, for clip i < N:
  rgb_<i>.mp4   H.264 RGB (libx264rgb -qp 0): lossless
  lossy_<i>.mp4 H.264 4:2:0 (libx264 -crf 12): near-lossless
and lists rgb.json, rgb.jsonl, lossy.json ({"path", "cap", "num_frames",
"fps", "resolution"}: 8 fps, 64x64), frames.npy (N, F, 64, 64) uint8: the
clips' bytes, the reference."""
import json
import subprocess
import sys

import numpy as np
from PIL import Image

src, n, F, out = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
caps = {}
for line in open(src + "/captions.txt"):
    idx, _item, _label, cap = line.rstrip("\n").split(" ", 3)
    caps[int(idx)] = cap
frames = np.zeros((n, F, 64, 64), np.uint8)
for i in range(n):
    strip = np.asarray(Image.open("%s/clip_%05d.png" % (src, i)).convert("L"))
    assert strip.shape == (64, 64 * F), strip.shape
    frames[i] = strip.reshape(64, F, 64).transpose(1, 0, 2)
np.save(out + "/frames.npy", frames)

ENC = {
    "rgb": ["-c:v", "libx264rgb", "-qp", "0", "-pix_fmt", "rgb24"],
    "lossy": ["-c:v", "libx264", "-crf", "12", "-pix_fmt", "yuv420p"],
}
for kind, args in ENC.items():
    ents = []
    for i in range(n):
        rgb = np.repeat(frames[i][..., None], 3, axis=3)  # grey as R = G = B
        path = "%s_%d.mp4" % (kind, i)
        cmd = ["ffmpeg", "-v", "error", "-y", "-f", "rawvideo", "-pix_fmt", "rgb24", "-s", "64x64",
               "-r", "8", "-i", "-"] + args + [out + "/" + path]
        subprocess.run(cmd, input=rgb.tobytes(), check=True)
        ents.append({"path": path, "cap": caps[i], "num_frames": F, "fps": 8,
                     "resolution": {"height": 64, "width": 64}, "aes": 5.0})
    json.dump(ents, open("%s/%s.json" % (out, kind), "w"), indent=1)
    if kind == "rgb":
        with open(out + "/rgb.jsonl", "w") as f:
            for e in ents:
                f.write(json.dumps(e) + "\n\n")
print("wrote %d clips of %d frames, 2 codecs" % (n, F))
