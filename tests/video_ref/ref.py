"""mmc video against references (run by tests/video_files.sh, hf venv python):
videos written here with Debian's ffmpeg from generated RGB frames (raw
rgb24 piped in), decoded by `mmc video`, compared with
  - the source frames: exactly for lossless FFV1/MKV and H.264 RGB
    (libx264rgb -qp 0), within the RGB->YUV->RGB rounding for H.264 4:4:4
    -qp 0, by PSNR for lossy H.264 4:2:0, VP9 and VP8;
  - a Python rewrite of the frame-sampling rule (docs/video.md) for several
    source fps / wanted fps / frame counts, and the frames themselves;
  - a Python rewrite of the bucket rule and of the crop, with PIL's bicubic
    resize for the pixels;
then bad videos and bad JSON entries must exit 1 naming the file (and the
entry and field) with no --out written.
usage: ref.py MMC TMPDIR SAN; prints FAIL lines and "N passed, M failed"."""
import json
import math
import os
import subprocess
import sys

import numpy as np
from PIL import Image

MMC, T, SAN = sys.argv[1], sys.argv[2], sys.argv[3] == "1"
passed = failed = 0


def check(ok, what):
    global passed, failed
    if ok:
        passed += 1
    else:
        failed += 1
        print("FAIL", what)


def frames_of(n, h, w, seed=0):
    """n smooth RGB frames with a moving square; each frame differs."""
    y, x = np.mgrid[0:h, 0:w].astype(np.float64)
    out = np.empty((n, h, w, 3), np.uint8)
    for t in range(n):
        r = 128 + 90 * np.sin(x / 7.0 + t * 0.4 + seed)
        g = 128 + 90 * np.cos(y / 5.0 - t * 0.3)
        b = 128 + 60 * np.sin((x + y) / 9.0 + t * 0.2)
        f = np.stack([r, g, b], -1)
        s0, s1 = (3 * t) % max(1, w - 8), (2 * t) % max(1, h - 8)
        f[s1:s1 + 8, s0:s0 + 8] = [250, 240, 20]
        f[0, 0] = [t % 256, (t * 7) % 256, 255 - t % 256]  # a frame id
        out[t] = np.clip(np.rint(f), 0, 255).astype(np.uint8)
    return out


def encode(path, fr, rate, args):
    n, h, w, _ = fr.shape
    p = subprocess.run(["ffmpeg", "-v", "error", "-y", "-f", "rawvideo", "-pix_fmt", "rgb24", "-s",
                        "%dx%d" % (w, h), "-r", rate, "-i", "-"] + args + [path],
                       input=fr.tobytes(), capture_output=True)
    if p.returncode != 0:
        print(p.stderr.decode())
    return p.returncode == 0


def mmc(*args):
    return subprocess.run([MMC, "video"] + list(args), capture_output=True, text=True)


def decode(path, frames, size, fps=None, extra=()):
    out = os.path.join(T, "o.f32")
    if os.path.exists(out):
        os.remove(out)
    a = [path, "--frames", str(frames), "--out", out] + list(extra)
    if size:
        a += ["--size", "%dx%d" % size]
    if fps:
        a += ["--fps", str(fps)]
    p = mmc(*a)
    if p.returncode != 0:
        return p, None, None
    line = [ln for ln in p.stdout.splitlines() if "indices" in ln][-1]
    idx = [int(v) for v in line.split("indices")[1].split()]
    v = np.fromfile(out, "<f4")
    return p, idx, v


def to_thwc(v, t, h, w):
    return np.rint(v.reshape(3, t, h, w).transpose(1, 2, 3, 0) * 255).astype(np.int64)


def ref_indices(frames, src, fps):
    d = 1.0 if (not fps or abs(src - fps) < 0.1) else src / fps
    return [int(math.floor(k * d)) for k in range(frames)]


def psnr(a, b):
    mse = np.mean((a.astype(np.float64) - b.astype(np.float64)) ** 2)
    return 99.0 if mse == 0 else 10 * math.log10(255.0 ** 2 / mse)


H, W, N = (48, 64, 24) if not SAN else (32, 48, 10)
src = frames_of(N, H, W)

# ---- lossless: exact ----
for name, args in [("ffv1.mkv", ["-c:v", "ffv1", "-pix_fmt", "bgr0"]),
                   ("x264rgb.mp4", ["-c:v", "libx264rgb", "-qp", "0", "-pix_fmt", "bgr24"])]:
    path = os.path.join(T, name)
    check(encode(path, src, "24", args), "ffmpeg wrote " + name)
    p, idx, v = decode(path, N, (H, W))
    check(p.returncode == 0, "%s decodes: %s" % (name, p.stderr.strip()))
    if v is not None:
        d = np.abs(to_thwc(v, N, H, W) - src).max()
        print("%s: lossless, max difference %d/255 over %d frames" % (name, d, N))
        check(d == 0, "%s: decoded frames equal the source exactly (max diff %d)" % (name, d))
        check(np.all((v >= 0) & (v <= 1)), "%s: values in [0, 1]" % name)

# H.264 4:4:4 -qp 0: lossless in YUV; RGB->YUV (ffmpeg) -> RGB (mmc) rounds
path = os.path.join(T, "x264_444.mp4")
check(encode(path, src, "24", ["-c:v", "libx264", "-qp", "0", "-pix_fmt", "yuv444p"]), "x264 444")
p, idx, v = decode(path, N, (H, W))
if v is not None:
    d = np.abs(to_thwc(v, N, H, W) - src).max()
    print("x264_444.mp4 (-qp 0, yuv444p): max difference %d/255, PSNR %.1f dB" %
          (d, psnr(to_thwc(v, N, H, W), src)))
    check(d <= 3, "yuv444p -qp 0 within 3/255 of the source (colour conversion rounding): %d" % d)
else:
    check(False, "x264_444.mp4 decodes: " + p.stderr)

# ---- lossy: PSNR bounds ----
for name, args, bound in [
        ("h264.mp4", ["-c:v", "libx264", "-crf", "18", "-pix_fmt", "yuv420p"], 28.0),
        ("vp9.webm", ["-c:v", "libvpx-vp9", "-crf", "20", "-b:v", "0", "-pix_fmt", "yuv420p"], 28.0),
        ("vp8.webm", ["-c:v", "libvpx", "-crf", "8", "-b:v", "2M", "-pix_fmt", "yuv420p"], 28.0)]:
    path = os.path.join(T, name)
    check(encode(path, src, "24", args), "ffmpeg wrote " + name)
    p, idx, v = decode(path, N, (H, W))
    if v is None:
        check(False, "%s decodes: %s" % (name, p.stderr))
        continue
    q = psnr(to_thwc(v, N, H, W), src)
    # ffmpeg's own decode to RGB with the same conversion (bilinear chroma,
    # accurate rounding, full chroma interpolation): equal to the byte
    ff = subprocess.run(["ffmpeg", "-v", "error", "-i", path, "-sws_flags",
                         "bilinear+accurate_rnd+full_chroma_int", "-f", "rawvideo", "-pix_fmt",
                         "rgb24", "-"], capture_output=True).stdout
    ffd = np.frombuffer(ff, np.uint8).reshape(-1, H, W, 3)[:N]
    df = int(np.abs(to_thwc(v, N, H, W) - ffd).max())
    print("%s: PSNR %.2f dB against the source (bound %.0f); max difference from ffmpeg's own "
          "decode %d/255" % (name, q, bound, df))
    check(q > bound, "%s: PSNR %.2f dB > %.0f" % (name, q, bound))
    check(df == 0, "%s: equal to ffmpeg's own RGB decode (max diff %d)" % (name, df))

# ---- frame sampling: indices and the frames taken ----
cases = [  # (source rate, source frames, --frames, --fps)
    ("24", 48, 8, 8), ("30", 41, 17, 12), ("25", 30, 10, 24.95), ("30000/1001", 40, 9, 10),
    ("12", 20, 10, 24), ("24", 20, 20, None), ("24", 49, 17, 8), ("60", 61, 5, 7.5)]
if SAN:
    cases = cases[:4]
for rate, nsrc, frames, fps in cases:
    fr = frames_of(nsrc, 24, 32, seed=1)
    path = os.path.join(T, "s.mkv")
    encode(path, fr, rate, ["-c:v", "ffv1", "-pix_fmt", "bgr0"])
    num, _, den = rate.partition("/")
    sfps = float(num) / float(den or 1)
    want = ref_indices(frames, sfps, fps)
    p, idx, v = decode(path, frames, (24, 32), fps)
    what = "%s fps x %d frames -> %d at %s fps" % (rate, nsrc, frames, fps)
    check(p.returncode == 0 and idx == want, "%s: indices %s, reference %s %s" %
          (what, idx, want, p.stderr.strip()))
    if v is not None:
        got = to_thwc(v, frames, 24, 32)
        check(all(np.array_equal(got[k], fr[want[k]]) for k in range(frames)),
              "%s: frame k is source frame idx[k]" % what)
        check(("%d source frames decoded" % (want[-1] + 1)) in p.stdout,
              "%s: decoding stopped after frame %d: %s" % (what, want[-1], p.stdout.strip()))
# one frame too few: 17 frames at 8 fps from 24 need source frame 48
fr = frames_of(48, 24, 32)
path = os.path.join(T, "short.mkv")
encode(path, fr, "24", ["-c:v", "ffv1", "-pix_fmt", "bgr0"])
p, idx, v = decode(path, 17, (24, 32), 8)
check(p.returncode == 1 and "short.mkv" in p.stderr and "frame 48" in p.stderr,
      "48 frames are too few for 17 at 8 fps from 24: %s" % p.stderr.strip())

# ---- buckets and crop/resize (PIL's bicubic) ----
buckets = [(32, 32), (24, 40), (40, 24), (16, 48)]
barg = ",".join("%dx%d" % b for b in buckets)
sizes = [(48, 64), (64, 48), (30, 90), (50, 50), (36, 50), (90, 31), (45, 80)]
if SAN:
    sizes = sizes[:3]
for h, w in sizes:
    fr = frames_of(3, h, w, seed=2)
    path = os.path.join(T, "b.mkv")
    encode(path, fr, "24", ["-c:v", "ffv1", "-pix_fmt", "bgr0"])
    r = math.log(w / h)
    bi = min(range(len(buckets)), key=lambda i: (abs(math.log(buckets[i][1] / buckets[i][0]) - r), i))
    BH, BW = buckets[bi]
    p, idx, v = decode(path, 3, None, None, ["--buckets", barg])
    check(p.returncode == 0 and ("(bucket %d)" % bi) in p.stdout and (", %dx%d (" % (BH, BW)) in p.stdout,
          "%dx%d: bucket %d (%dx%d): %s %s" % (w, h, bi, BW, BH, p.stdout.strip(), p.stderr.strip()))
    if v is None or v.size != 3 * 3 * BH * BW:
        check(False, "%dx%d: output size" % (w, h))
        continue
    got = to_thwc(v, 3, BH, BW)
    if h / w > BH / BW:
        ch, cw = int(w * BH / BW), w
    else:
        ch, cw = h, int(h * BW / BH)
    top, left = (h - ch) // 2, (w - cw) // 2
    d = 0
    for k in range(3):
        ref = np.asarray(Image.fromarray(fr[k]).crop((left, top, left + cw, top + ch))
                         .resize((BW, BH), Image.BICUBIC)).astype(np.int64)
        d = max(d, int(np.abs(got[k] - ref).max()))
    check(d == 0, "%dx%d -> %dx%d: crop + resize equal PIL's bicubic (max diff %d)" % (w, h, BW, BH, d))

# ---- the JSON dataset and --png-strip ----
os.makedirs(os.path.join(T, "ds", "clips"), exist_ok=True)
fa, fb = frames_of(30, 48, 64, seed=3), frames_of(30, 64, 48, seed=4)
encode(os.path.join(T, "ds", "clips", "a.mkv"), fa, "30", ["-c:v", "ffv1", "-pix_fmt", "bgr0"])
encode(os.path.join(T, "ds", "clips", "b.mkv"), fb, "30", ["-c:v", "ffv1", "-pix_fmt", "bgr0"])
good = [{"path": "clips/a.mkv", "cap": "a wave", "num_frames": 30, "fps": 30,
         "resolution": {"height": 48, "width": 64}, "aes": 5.1},
        {"path": "clips/b.mkv", "cap": ["a tall wave", "other"], "num_frames": 30, "fps": 30.0,
         "resolution": {"height": 64, "width": 48}}]
DJ = os.path.join(T, "ds", "data.json")
json.dump(good, open(DJ, "w"))
strip = os.path.join(T, "s.png")
p, idx, v = decode(DJ, 6, None, 10, ["--buckets", "24x32,32x24", "--png-strip", strip])
check(p.returncode == 0 and "entry 1: \"a tall wave\"" in p.stdout, "the JSON decodes: " + p.stderr)
if v is not None:
    n1 = 3 * 6 * 24 * 32
    ia = ref_indices(6, 30, 10)
    ga = to_thwc(v[:n1], 6, 24, 32)
    gb = to_thwc(v[n1:], 6, 32, 24)
    ra = [np.asarray(Image.fromarray(fa[i]).resize((32, 24), Image.BICUBIC)) for i in ia]
    rb = [np.asarray(Image.fromarray(fb[i]).resize((24, 32), Image.BICUBIC)) for i in ia]
    check(v.size == 2 * n1 and all(np.array_equal(ga[k], ra[k]) and np.array_equal(gb[k], rb[k])
                                   for k in range(6)), "JSON entries: both clips, their buckets")
    im = np.asarray(Image.open(strip))
    check(im.shape == (24 + 32, 6 * 32, 3) and np.array_equal(im[:24, 32:64], ga[1]) and
          np.array_equal(im[24:, 24:48], gb[1]) and not im[24:, 6 * 24:].any(),
          "--png-strip: a row of frames per clip")

# ---- bad input: exit 1 naming the file (entry, field), no --out ----
def refused(args, words, what):
    out = os.path.join(T, "bad.f32")
    if os.path.exists(out):
        os.remove(out)
    p = mmc(*(list(args) + ["--out", out]))
    ok = p.returncode == 1 and all(w in p.stderr for w in words) and not os.path.exists(out)
    check(ok, "%s: exit %d, %r (wanted %s)" % (what, p.returncode, p.stderr.strip(), words))


mp4 = os.path.join(T, "h264.mp4")
data = open(mp4, "rb").read()
fast = os.path.join(T, "fast.mp4")
encode(fast, src, "24", ["-c:v", "libx264", "-crf", "18", "-pix_fmt", "yuv420p", "-movflags", "+faststart"])
fdata = open(fast, "rb").read()
B = os.path.join(T, "bad")
os.makedirs(B, exist_ok=True)
bad_files = {"trunc.mp4": data[:len(data) // 2], "trunc_fast.mp4": fdata[:len(fdata) * 2 // 3],
             "text.mp4": b"this is not a video\n" * 10, "empty.mp4": b"",
             "head.webm": open(os.path.join(T, "vp9.webm"), "rb").read()[:200]}
for n, b in bad_files.items():
    open(os.path.join(B, n), "wb").write(b)
for n in bad_files:
    refused([os.path.join(B, n), "--frames", str(N)], [n], n)
refused([os.path.join(B, "missing.mp4")], ["missing.mp4"], "a missing file")
refused([B], ["bad"], "a directory")
z = os.path.join(B, "zero.mp4")
subprocess.run(["ffmpeg", "-v", "error", "-y", "-f", "lavfi", "-i", "testsrc=size=64x48:rate=24",
                "-frames:v", "0", "-c:v", "libx264", z], capture_output=True)
refused([z], ["zero.mp4"], "a zero-frame MP4")
zm = os.path.join(B, "zero.mkv")
subprocess.run(["ffmpeg", "-v", "error", "-y", "-f", "lavfi", "-i", "testsrc=size=64x48:rate=24",
                "-frames:v", "0", "-c:v", "ffv1", zm], capture_output=True)
refused([zm], ["zero.mkv"], "a zero-frame MKV")
refused([os.path.join(T, "h264.mp4"), "--max-pixels", "100"], ["h264.mp4", "100 pixels"], "--max-pixels")
# a good video first, then a bad one: still no --out
refused([os.path.join(T, "h264.mp4"), os.path.join(B, "text.mp4"), "--frames", "4"], ["text.mp4"],
        "good then bad")

def entry(**kw):
    e = dict(good[0])
    e.update(kw)
    return {k: v for k, v in e.items() if v is not None}


bad_json = [
    ("list.json", "{}", ["list.json", "JSON list"]),
    ("syntax.json", "[{\"path\": ", ["syntax.json", "not JSON"]),
    ("empty.json", "[]", ["empty.json", "empty"]),
    ("nothing.json", "", ["nothing.json", "not JSON"]),
    ("trail.json", json.dumps(good) + " []", ["trail.json", "more after"]),
    ("obj.json", [good[0], 3], ["obj.json", "entry 1", "object"]),
    ("nopath.json", [entry(path=None)], ["nopath.json", "entry 0", "\"path\""]),
    ("gone.json", [good[0], entry(path="clips/gone.mkv")], ["gone.json", "entry 1", "\"path\"", "gone.mkv"]),
    ("dir.json", [entry(path="clips")], ["dir.json", "entry 0", "\"path\"", "regular"]),
    ("cap.json", [entry(cap=7)], ["cap.json", "entry 0", "\"cap\""]),
    ("nf.json", [entry(num_frames="30")], ["nf.json", "entry 0", "\"num_frames\""]),
    ("fps.json", [entry(fps=-1)], ["fps.json", "entry 0", "\"fps\""]),
    ("res.json", [entry(resolution={"height": 48})], ["res.json", "entry 0", "\"resolution\""]),
    ("few.json", [good[0], good[1], entry(num_frames=15)], ["few.json", "entry 2", "\"num_frames\"", "too few"]),
    ("badvid.json", [good[0], entry(path="../bad/text.mp4")], ["badvid.json", "entry 1", "text.mp4"]),
]
for n, body, words in bad_json:
    jp = os.path.join(T, "ds", n)
    open(jp, "w").write(body if isinstance(body, str) else json.dumps(body))
    # 6 frames at 10 fps from 30: source frame 15 needed (num_frames 15 too few, 16 enough)
    refused([jp, "--frames", "6", "--fps", "10"], words, n)
ok16 = os.path.join(T, "ds", "ok16.json")
json.dump([entry(num_frames=16)], open(ok16, "w"))
check(mmc(ok16, "--frames", "6", "--fps", "10").returncode == 0, "num_frames 16 is enough for frame 15")

# ---- bad flags: exit 2 ----
for a in [["--frames", "0"], ["--frames", "x"], ["--fps", "0"], ["--fps", "nan"], ["--size", "10"],
          ["--size", "0x5"], ["--buckets", "10x10,"], ["--buckets", "10x10,5"], ["--size", "8x8", "--buckets", "8x8"],
          ["--bogus"], ["--out"], ["--max-pixels", "0"]]:
    p = mmc(*([mp4] + a))
    check(p.returncode == 2 and "usage" in p.stderr, "flags %s: exit %d" % (a, p.returncode))
check(mmc().returncode == 2, "no file: exit 2")

print("%d passed, %d failed" % (passed, failed))
