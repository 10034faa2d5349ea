#!/usr/bin/env python3
"""Writes the seed files of the safetensors, IDX and PNG fuzz corpora
(tests/fuzz/corpus/<target>/seed-*): small valid files of each form the
readers accept, so the fuzzers start from inputs that reach deep code.
Run once; the outputs are kept in the repository."""
import gzip, json, os, struct, zlib

here = os.path.join(os.path.dirname(os.path.abspath(__file__)), "corpus")


def put(target, name, data):
    with open(os.path.join(here, target, "seed-" + name), "wb") as f:
        f.write(data)


# ---- safetensors ----
def safetensors(tensors, meta=None):
    hdr, blobs, off = {}, b"", 0
    if meta is not None:
        hdr["__metadata__"] = meta
    for name, dt, shape, raw in tensors:
        hdr[name] = {"dtype": dt, "shape": shape, "data_offsets": [off, off + len(raw)]}
        blobs += raw
        off += len(raw)
    j = json.dumps(hdr, separators=(",", ":")).encode()
    j += b" " * (-len(j) % 8)
    return struct.pack("<Q", len(j)) + j + blobs


f32 = lambda *v: struct.pack("<%df" % len(v), *v)
put("safetensors", "two-f32", safetensors(
    [("w", "F32", [2, 3], f32(1, 2, 3, 4, 5, 6)), ("b", "F32", [3], f32(0.5, -1, 2))],
    {"step": "7", "rank": "0", "world_size": "1", "fingerprint": "abc"}))
put("safetensors", "dtypes", safetensors([
    ("a", "I64", [2], struct.pack("<2q", 1, -2)),
    ("b", "I32", [1, 2], struct.pack("<2i", 3, 4)),
    ("c", "BF16", [2], b"\x80\x3f\x00\x40"),
    ("d", "F16", [2], b"\x00\x3c\x00\x40"),
    ("e", "U8", [3], b"\x01\x02\x03")], {"data_iter": "mmrt-iter v1 n=10 batch=2 shuffle=1 seed=42 epoch=0 pos=2"}))
put("safetensors", "scalar-empty", safetensors(
    [("s", "F32", [], f32(3.0)), ("z", "F32", [0, 4], b"")]))
crc_t = [("w", "F32", [2, 2], f32(1, 2, 3, 4)), ("n", "I32", [3], struct.pack("<3i", 5, 6, 7))]
put("safetensors", "crc32", safetensors(crc_t, dict({"step": "3"}, **{"crc32:" + n: "%08x" % zlib.crc32(raw) for n, _, _, raw in crc_t})))
put("safetensors", "no-meta", safetensors([("x", "F32", [1, 1, 1, 1, 1, 1, 1, 1], f32(9))]))

# ---- IDX ----
def idx(magic, dims, payload):
    return struct.pack(">I", magic) + b"".join(struct.pack(">I", d) for d in dims) + payload


img = idx(0x803, [2, 3, 3], bytes(range(18)))
lab = idx(0x801, [5], bytes([0, 1, 9, 3, 4]))
put("idx", "images-raw", img)
put("idx", "labels-raw", lab)
put("idx", "images-gz", gzip.compress(img, mtime=0))
put("idx", "labels-gz", gzip.compress(lab, mtime=0))
put("idx", "empty-dims", idx(0x803, [0, 28, 28], b""))

# ---- PNG ----
def chunk(typ, data):
    return struct.pack(">I", len(data)) + typ + data + struct.pack(">I", zlib.crc32(typ + data))


def png(w, h, depth, ctype, rows, extra=b"", interlace=0):
    raw = b"".join(b"\x00" + r for r in rows)
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, depth, ctype, 0, 0, interlace))
            + extra + chunk(b"IDAT", zlib.compress(raw)) + chunk(b"IEND", b""))


W = H = 28
put("png", "gray8", png(W, H, 8, 0, [bytes((x * 9 + y) & 255 for x in range(W)) for y in range(H)]))
put("png", "gray16", png(W, H, 16, 0, [b"".join(struct.pack(">H", x * 2000 + y) for x in range(W)) for y in range(H)]))
put("png", "gray1", png(W, H, 1, 0, [bytes([0xA5, 0x5A, 0xFF, 0x00]) for y in range(H)]))
put("png", "gray-alpha", png(W, H, 8, 4, [bytes((x * 5) & 255 for x in range(2 * W)) for y in range(H)]))
put("png", "rgb8", png(W, H, 8, 2, [bytes((x * 3 + y) & 255 for x in range(3 * W)) for y in range(H)],
                       extra=chunk(b"gAMA", struct.pack(">I", 45455))))
put("png", "rgba8", png(W, H, 8, 6, [bytes((x * 7 + y) & 255 for x in range(4 * W)) for y in range(H)]))
put("png", "palette-trns", png(W, H, 4, 3, [bytes(((x * 3) & 15) << 4 | (x & 15) for x in range(W // 2)) for y in range(H)],
                               extra=chunk(b"PLTE", bytes(range(48))) + chunk(b"tRNS", bytes([255, 0, 128]))))
put("png", "interlaced", png(W, H, 8, 0, [bytes((x + y) & 255 for x in range(W)) for y in range(H)], interlace=1))
put("png", "small-3x2", png(3, 2, 8, 0, [b"\x00\x80\xff", b"\x10\x20\x30"]))
