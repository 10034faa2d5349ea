"""Writes the seeds of the image fuzz corpus (tests/fuzz/corpus/image/seed-*):
tiny JPEG, PNG and WebP files of each form mmrt_image reads (grey, palette,
alpha, 16-bit, interlaced, CMYK, progressive, EXIF-rotated, lossless and
lossy WebP).  Needs PIL: run once with the hf venv's python
(/var/cache/mmc-venv-hf/bin/python tests/fuzz/make_image_seeds.py); the
outputs are kept in the repository."""
import io, os, struct, zlib

from PIL import Image

here = os.path.join(os.path.dirname(os.path.abspath(__file__)), "corpus", "image")
os.makedirs(here, exist_ok=True)


def put(name, im, fmt, **kw):
    b = io.BytesIO()
    im.save(b, fmt, **kw)
    open(os.path.join(here, "seed-" + name), "wb").write(b.getvalue())


def grad(w, h, mode="RGB"):
    im = Image.new("RGB", (w, h))
    im.putdata([((x * 37) % 256, (y * 53) % 256, (x * y * 11) % 256) for y in range(h) for x in range(w)])
    return im.convert(mode)


put("rgb.png", grad(5, 3), "PNG")
put("rgba.png", grad(3, 4, "RGBA"), "PNG")
put("la.png", grad(4, 2, "LA"), "PNG")
put("grey16.png", Image.new("I;16", (3, 3), 40000), "PNG")
put("pal.png", grad(6, 5).quantize(4), "PNG", transparency=1)
put("bits1.png", grad(9, 2, "1"), "PNG")
put("rgb.jpg", grad(9, 7), "JPEG", quality=70)
put("grey.jpg", grad(5, 9, "L"), "JPEG", quality=70)
put("cmyk.jpg", grad(4, 4, "CMYK"), "JPEG", quality=70)
put("prog.jpg", grad(17, 9), "JPEG", quality=60, progressive=True)
e = Image.Exif()
e[0x0112] = 6
put("exif6.jpg", grad(3, 5), "JPEG", quality=60, exif=e.tobytes())
e3 = Image.Exif()
e3[0x0112] = 3
put("exif3.png", grad(4, 3), "PNG", exif=e3.tobytes())
put("ll.webp", grad(5, 4), "WEBP", lossless=True)
put("lla.webp", grad(4, 3, "RGBA"), "WEBP", lossless=True)
put("lossy.webp", grad(7, 5), "WEBP", quality=50)
put("lossya.webp", grad(5, 5, "RGBA"), "WEBP", quality=50)


def chunk(k, d):
    return struct.pack(">I", len(d)) + k + d + struct.pack(">I", zlib.crc32(k + d))


# an interlaced 16-bit RGB PNG (PIL writes neither)
w, h = 5, 5
rows = {y: bytes((x * 50 + y * 9 + c) % 256 for x in range(w) for c in range(6)) for y in range(h)}
raw = b""
for x0, y0, dx, dy in [(0, 0, 8, 8), (4, 0, 8, 8), (0, 4, 4, 8), (2, 0, 4, 4), (0, 2, 2, 4), (1, 0, 2, 2), (0, 1, 1, 2)]:
    for y in range(y0, h, dy):
        xs = range(x0, w, dx)
        if len(xs):
            raw += b"\0" + b"".join(rows[y][6 * x:6 * x + 6] for x in xs)
open(os.path.join(here, "seed-adam7-16.png"), "wb").write(
    b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, 16, 2, 0, 0, 1))
    + chunk(b"IDAT", zlib.compress(raw)) + chunk(b"IEND", b""))
