"""The references of tests/images.sh: images made here with PIL, `mmc image`
run on them, and its output compared with
  - PIL's decoding (Image.open + ImageOps.exif_transpose + convert("RGB")):
    lossless PNG/WebP exactly, JPEG and lossy WebP within the measured
    decoder difference;
  - transformers' CLIPImageProcessor (--mode clip);
  - InternVL2's dynamic_preprocess + load_image transform rewritten here
    with PIL (resize BICUBIC, crops, ToTensor and Normalize as numpy)
    (--mode internvl), and its tile grid for every aspect ratio 1:8..8:1
    and sizes around the area thresholds.
Prints a FAIL line per failed check and "N passed, M failed".
usage: ref.py MMC TMPDIR [SAN]"""
import io
import os
import struct
import subprocess
import sys
import zlib

import numpy as np
from PIL import Image, ImageOps

MMC, T = sys.argv[1], sys.argv[2]
SAN = len(sys.argv) > 3 and sys.argv[3] == "1"
passed, failed = 0, 0


def check(name, cond, detail=""):
    global passed, failed
    if cond:
        passed += 1
    else:
        failed += 1
        print(f"FAIL {name}{': ' + detail if detail else ''}")


def pattern(w, h, seed):
    """Smooth gradients plus noise: something for JPEG to lose and resizing to mix."""
    rng = np.random.default_rng(seed)
    y, x = np.mgrid[0:h, 0:w]
    img = np.stack([x * 255 // max(w - 1, 1), y * 255 // max(h - 1, 1), (x + y) * 7 % 256], -1)
    img = img + rng.integers(-40, 41, size=(h, w, 3))
    return np.clip(img, 0, 255).astype(np.uint8)


def png_chunk(kind, data):
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))


def png16_rgb(path, arr16):
    """A 16-bit RGB PNG (PIL writes no 16-bit colour)."""
    h, w, _ = arr16.shape
    raw = b"".join(b"\0" + arr16[y].astype(">u2").tobytes() for y in range(h))
    with open(path, "wb") as f:
        f.write(b"\x89PNG\r\n\x1a\n" + png_chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, 16, 2, 0, 0, 0))
                + png_chunk(b"IDAT", zlib.compress(raw)) + png_chunk(b"IEND", b""))


def exif_bytes(orientation):
    e = Image.Exif()
    e[0x0112] = orientation
    return e.tobytes()


# ---- the images ----
D = os.path.join(T, "img")
os.makedirs(D, exist_ok=True)
files = {}  # name -> (path, lossless)


def save(name, im, same, **kw):
    p = os.path.join(D, name)
    im.save(p, **kw)
    files[name] = (p, same)


rgb = Image.fromarray(pattern(97, 61, 1))
save("rgb_97x61.png", rgb, True)
rgba = Image.fromarray(np.dstack([pattern(53, 89, 2), pattern(53, 89, 3)[..., 0]]))
save("rgba_53x89.png", rgba, True)
save("grey_77x33.png", Image.fromarray(pattern(77, 33, 4)[..., 0]), True)
save("la_41x59.png", Image.fromarray(np.dstack([pattern(41, 59, 5)[..., :2]])), True)
pal = Image.fromarray(pattern(65, 45, 6)).quantize(37)
pal.info["transparency"] = 3
save("pal_65x45.png", pal, True, transparency=3)
save("pal2_19x23.png", Image.fromarray(pattern(19, 23, 7)).quantize(4), True, bits=2)
g16 = (pattern(37, 51, 8)[..., 0].astype(np.uint16) * 257 + np.arange(37, dtype=np.uint16)) % 65536
save("grey16_37x51.png", Image.fromarray(g16.astype(np.uint16)), True)
r16 = pattern(45, 29, 9).astype(np.uint16) * 257 + 123
png16_rgb(os.path.join(D, "rgb16_45x29.png"), r16)
files["rgb16_45x29.png"] = (os.path.join(D, "rgb16_45x29.png"), True)
save("interlaced_33x21.png", Image.fromarray(pattern(33, 21, 10)), True)  # rewritten below
save("rgb_101x67.jpg", Image.fromarray(pattern(101, 67, 11)), False, quality=90)
save("rgb444_59x83.jpg", Image.fromarray(pattern(59, 83, 12)), False, quality=95, subsampling=0)
save("grey_63x95.jpg", Image.fromarray(pattern(63, 95, 13)[..., 1]), False, quality=85)
save("cmyk_57x43.jpg", Image.fromarray(pattern(57, 43, 14)).convert("CMYK"), False, quality=90)
save("prog_83x71.jpg", Image.fromarray(pattern(83, 71, 15)), False, quality=80, progressive=True)
for o in range(1, 9):
    save(f"exif{o}_31x19.jpg", Image.fromarray(pattern(31, 19, 20 + o)), False, quality=92,
         exif=exif_bytes(o))
# big-endian ("MM") TIFF, orientation 6, by hand; PNG eXIf chunks
save("exifmm6_23x13.jpg", Image.fromarray(pattern(23, 13, 40)), False, quality=92,
     exif=b"Exif\0\0MM\0*\0\0\0\x08\0\x01\x01\x12\0\x03\0\0\0\x01\0\x06\0\0\0\0\0\0")
for o in (3, 6, 7):
    save(f"exif{o}_29x17.png", Image.fromarray(pattern(29, 17, 40 + o)), True, exif=exif_bytes(o))
save("ll_79x53.webp", Image.fromarray(pattern(79, 53, 16)), True, lossless=True)
save("lla_47x35.webp", Image.fromarray(np.dstack([pattern(47, 35, 17), pattern(47, 35, 18)[..., 2]])), True, lossless=True, exact=True)
save("lossy_67x91.webp", Image.fromarray(pattern(67, 91, 19)), False, quality=80)
save("lossya_43x27.webp", Image.fromarray(np.dstack([pattern(43, 27, 30), pattern(43, 27, 31)[..., 0]])), False, quality=80)
# an interlaced (Adam7) PNG: PIL writes none, so libpng's own pngcp is not
# assumed; build it from PIL's rows with zlib
def adam7_png(path, arr):
    h, w, _ = arr.shape
    passes = [(0, 0, 8, 8), (4, 0, 8, 8), (0, 4, 4, 8), (2, 0, 4, 4), (0, 2, 2, 4), (1, 0, 2, 2), (0, 1, 1, 2)]
    raw = b""
    for x0, y0, dx, dy in passes:
        sub = arr[y0::dy, x0::dx]
        if sub.size == 0:
            continue
        raw += b"".join(b"\0" + sub[y].tobytes() for y in range(sub.shape[0]))
    with open(path, "wb") as f:
        f.write(b"\x89PNG\r\n\x1a\n" + png_chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, 8, 2, 0, 0, 1))
                + png_chunk(b"IDAT", zlib.compress(raw)) + png_chunk(b"IEND", b""))


adam7_png(files["interlaced_33x21.png"][0], pattern(33, 21, 10))
names = sorted(files)
paths = [files[n][0] for n in names]


def pil_rgb(path):
    im = Image.open(path)
    im = ImageOps.exif_transpose(im)
    if im.mode == "I;16":  # PIL clips 16-bit grey at 255; mmc takes the high byte
        return np.repeat((np.asarray(im).astype(np.uint16) >> 8).astype(np.uint8)[..., None], 3, -1)
    return np.asarray(im.convert("RGB"))


def run(args):
    r = subprocess.run([MMC, "image"] + args, capture_output=True, text=True)
    return r


def read_f32(path):
    return np.fromfile(path, dtype="<f4")


def lines(r):
    return r.stdout.strip().split("\n")


# ---- 1. decoding: --mode none with mean 0, std 1 gives v / 255 ----
out = os.path.join(T, "none.f32")
r = run(paths + ["--mode", "none", "--mean", "0,0,0", "--std", "1,1,1", "--out", out])
check("decode run", r.returncode == 0, r.stderr[-400:])
if r.returncode == 0:
    f = read_f32(out)
    off = 0
    jpeg_max = webp_max = 0
    for name, line in zip(names, lines(r)):
        ref = pil_rgb(files[name][0])
        h, w, _ = ref.shape
        check(f"{name} size", f", {w}x{h} after" in line, f"{line} vs PIL {w}x{h}")
        n = 3 * w * h
        got = np.rint(f[off:off + n] * 255).astype(np.int64).reshape(3, h, w).transpose(1, 2, 0)
        off += n
        d = int(np.abs(got - ref.astype(np.int64)).max())
        if files[name][1]:
            check(f"{name} decoded exactly", d == 0, f"max difference {d}")
        elif name.endswith(".webp"):
            webp_max = max(webp_max, d)
        else:
            jpeg_max = max(jpeg_max, d)
        if name.startswith("exif"):
            o = int(name.split("_")[0][-1])
            check(f"{name} orientation reported", f"after orientation {o};" in line, line)
    check("float count", off == f.size, f"{off} vs {f.size}")
    # The measured figures (libjpeg-turbo 2.1.5 vs Pillow 11.3's bundled
    # libjpeg-turbo; libwebp 1.2.4 vs Pillow's 1.5.0): both 0 on this set.
    print(f"decoder difference: JPEG max {jpeg_max}, lossy WebP max {webp_max} (of 255)")
    check("JPEG within the decoder difference", jpeg_max <= 1, f"max {jpeg_max}")
    check("lossy WebP within the decoder difference", webp_max <= 2, f"max {webp_max}")

# ---- 2. CLIP mode against transformers' CLIPImageProcessor ----
from transformers import CLIPImageProcessor  # noqa: E402

TOL = 2 / 255
for size in ([224, 37] if not SAN else [37]):
    proc = CLIPImageProcessor(size={"shortest_edge": size}, crop_size={"height": size, "width": size})
    out = os.path.join(T, f"clip{size}.f32")
    r = run(paths + ["--mode", "clip", "--size", str(size), "--out", out])
    check(f"clip {size} run", r.returncode == 0, r.stderr[-400:])
    if r.returncode != 0:
        continue
    f = read_f32(out).reshape(len(names), 3, size, size)
    std = np.array(proc.image_std, dtype=np.float32)[:, None, None]
    worst = 0.0
    for k, name in enumerate(names):
        im = Image.fromarray(pil_rgb(files[name][0]))
        ref = proc(images=im, return_tensors="np")["pixel_values"][0]
        d = float((np.abs(f[k] - ref) * std).max())  # in units of v / 255
        worst = max(worst, d)
        check(f"clip {size} {name}", d <= TOL, f"max difference {d * 255:.3f}/255")
    print(f"clip {size}: max difference {worst * 255:.3g}/255 over {len(names)} images")

# ---- 3. InternVL mode against dynamic_preprocess + load_image's transform ----
MEAN, STD = np.array([0.485, 0.456, 0.406], np.float32), np.array([0.229, 0.224, 0.225], np.float32)


def closest_grid(aspect, ratios, w, h, size):
    best_diff, best = float("inf"), (1, 1)
    area = w * h
    for ratio in ratios:
        diff = abs(aspect - ratio[0] / ratio[1])
        if diff < best_diff:
            best_diff, best = diff, ratio
        elif diff == best_diff and area > 0.5 * size * size * ratio[0] * ratio[1]:
            best = ratio
    return best


def internvl_grid(w, h, size, max_num, min_num=1):
    ratios = set((i, j) for n in range(min_num, max_num + 1) for i in range(1, n + 1)
                 for j in range(1, n + 1) if min_num <= i * j <= max_num)
    ratios = sorted(ratios, key=lambda x: x[0] * x[1])
    return closest_grid(w / h, ratios, w, h, size)


def internvl_tiles(im, size, max_num):
    w, h = im.size
    c, r = internvl_grid(w, h, size, max_num)
    big = im.resize((c * size, r * size), Image.BICUBIC)
    tiles = [big.crop((i % c * size, i // c * size, (i % c + 1) * size, (i // c + 1) * size))
             for i in range(c * r)]
    if len(tiles) != 1:
        tiles.append(im.resize((size, size), Image.BICUBIC))
    return (c, r), [((np.asarray(t, np.float32) / 255 - MEAN) / STD).transpose(2, 0, 1) for t in tiles]


for size, mt in ([(28, 6), (448, 12)] if not SAN else [(28, 6)]):
    sel = names if size < 100 else names[:3]
    out = os.path.join(T, f"ivl{size}.f32")
    r = run([files[n][0] for n in sel] + ["--mode", "internvl", "--size", str(size), "--max-tiles", str(mt),
                                          "--out", out])
    check(f"internvl {size} run", r.returncode == 0, r.stderr[-400:])
    if r.returncode != 0:
        continue
    f = read_f32(out).reshape(-1, 3, size, size)
    k, worst = 0, 0.0
    for name, line in zip(sel, lines(r)):
        (c, rr), ref = internvl_tiles(Image.fromarray(pil_rgb(files[name][0])), size, mt)
        check(f"internvl {size} {name} grid", f"grid {c}x{rr}, thumbnail {int(len(ref) > 1)}, {len(ref)} tile"
              in line, f"{line} vs {c}x{rr}")
        got = f[k:k + len(ref)]
        k += len(ref)
        if got.shape[0] == len(ref):
            d = float((np.abs(got - np.stack(ref)) * STD[:, None, None]).max())
            worst = max(worst, d)
            check(f"internvl {size} {name} pixels", d <= TOL, f"max difference {d * 255:.3f}/255")
    check(f"internvl {size} tile count", k == f.shape[0], f"{k} vs {f.shape[0]}")
    print(f"internvl {size}/{mt}: max difference {worst * 255:.3g}/255 over {len(sel)} images, {k} tiles")

# ---- 4. the tile grid: every aspect ratio 1:8..8:1, sizes near the area thresholds ----
G = os.path.join(T, "grid")
os.makedirs(G, exist_ok=True)
sizes = set()
for a in range(1, 9):
    for b in range(1, 9):
        for base in (5, 23, 64):
            sizes.add((a * base, b * base))
        sizes.add((a * 17 + 1, b * 17))  # just off the ratio
        sizes.add((a * 17, b * 17 + 1))
S = 32
for (c, r) in [(1, 1), (2, 2), (3, 3), (2, 1), (1, 2), (3, 1), (4, 2), (2, 4), (6, 3)]:
    # area == 0.5 * S^2 * c * r at the ratio c / r, and the sizes around it
    import math
    hh = math.sqrt(0.5 * S * S * c * r * r / c)
    for dh in range(-2, 3):
        h0 = max(1, int(hh) + dh)
        sizes.add((h0 * c // r if (h0 * c) % r == 0 else h0 * c // r + 1, h0))
        if (h0 * c) % r == 0:
            sizes.add((h0 * c // r, h0))
for w0, h0 in [(5, 4), (4, 5), (10, 8), (8, 10), (40, 32), (45, 36), (3, 2), (2, 3), (1, 1), (1, 9), (9, 1)]:
    sizes.add((w0, h0))
sizes = sorted(sizes)
gpaths = []
for w0, h0 in sizes:
    p = os.path.join(G, f"{w0}x{h0}.png")
    Image.new("L", (w0, h0), 128).save(p)
    gpaths.append(p)
for mt in ([1, 2, 4, 6, 12] if not SAN else [6, 12]):
    r = run(gpaths + ["--mode", "internvl", "--size", str(S), "--max-tiles", str(mt)])
    check(f"grid run max {mt}", r.returncode == 0, r.stderr[-400:])
    if r.returncode != 0:
        continue
    bad = 0
    for (w0, h0), line in zip(sizes, lines(r)):
        c, rr = internvl_grid(w0, h0, S, mt)
        if f"grid {c}x{rr}," not in line:
            bad += 1
            if bad <= 5:
                print(f"  {w0}x{h0} max {mt}: {line.split('grid ')[-1]} vs {c}x{rr}")
    check(f"grid max {mt}: {len(sizes)} sizes", bad == 0, f"{bad} differ")

print(f"{passed} passed, {failed} failed")
sys.exit(1 if failed else 0)
