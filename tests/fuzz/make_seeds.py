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

# ---- trainer_args (fuzz_trainer_args.c: first byte mode | variant << 3) ----
def argv(mode, variant, args, file=None):
    b = bytes([mode | variant << 3]) + b"\0".join(a.encode() for a in args)
    return b + (b"\0\0" + file if file is not None else b"")


put("trainer_args", "train-flags", argv(0, 0, ["--steps", "5", "--lr", "0.1", "--seed", "7", "--ckpt", "c", "--keep", "2",
                                                "--resume", "--log", "l", "--quiet", "--profile", "--trace", "t"]))
put("trainer_args", "train-data", argv(0, 4, ["--data", "/d", "--eval-every", "2", "--eval-batches", "1", "--threads", "2",
                                               "--omp-wait", "spin", "--batch", "4", "--init-from", "/w", "--features", "/d"]))
put("trainer_args", "train-lora", argv(0, 1, ["--load-adapters", "a", "--save-adapters", "b", "--save-weights", "s",
                                               "--dump-logits", "x", "--dump-inputs", "y"]))
put("trainer_args", "train-mesh", argv(0, 2, ["--comm-timeout", "30", "--steps", "0"]))
put("trainer_args", "train-help", argv(0, 0, ["--help"]))
put("trainer_args", "train-bad-batch", argv(0, 0, ["--batch", "8"]))
put("trainer_args", "generate", argv(1, 8, ["--weights", "w", "--images", "a.png", "b.idx", "--out", "o", "--prompt",
                                            "what is this ?", "--limit", "3", "--seed", "1", "--no-cache", "--ids", "i"]))
put("trainer_args", "eval", argv(1, 0, ["--weights", "w", "--data", "/d", "--limit", "10", "--quiet"]))
put("trainer_args", "reconstruct", argv(2, 0, ["--weights", "w", "--data", "d", "--clips", "10", "--first", "2", "--out",
                                               "o", "--show", "1", "--no-chunks", "--dump", "f", "--quiet"]))
put("trainer_args", "sample", argv(3, 0, ["--weights", "w", "--weights", "v", "--prompt", "a sneaker moving left",
                                          "--prompts", "/f", "--clips", "2", "--guidance", "3.5", "--steps", "10",
                                          "--scheduler", "ddpm", "--seed", "3", "--out", "o", "--show", "1", "--raw",
                                          "r", "--dump", "d"], b"a bag moving up\n\n  \na coat moving right\r\n"))
put("trainer_args", "extract", argv(4, 0, ["--out", "o", "--init-from", "w", "--seed", "1", "--clips", "8", "--heldout",
                                           "4", "--shard", "4", "--data", "d", "--quiet"]))

K_FILE, K_GZIP, K_DIR, K_SYMLINK, K_IDX, K_IDX_GZIP = range(6)
N_ROOT, N_TRI, N_TRI_GZ, N_TRL, N_TRL_GZ, N_TEI, N_TEI_GZ, N_TEL, N_TEL_GZ, N_MANIFEST, N_TR0, N_TR1, N_HO0, N_NULL, \
    N_SUB, N_SUBX = range(16)


def rec(kind, name, content=b""):
    assert b"\n#!" not in content
    return b"\n#!" + bytes([kind, name]) + content


def idx_desc(magic, dims, adj=0, pattern=b"\x00\x80\x0c\x07"):
    return struct.pack(">I", magic) + b"".join(struct.pack(">I", d) for d in dims) + struct.pack("b", adj) + pattern


def fmnist(ntrain, ntest, kind=K_IDX, gz=False, adj=0):
    o = 1 if gz else 0
    return (rec(kind, N_TRI + o, idx_desc(0x803, [ntrain, 28, 28])) + rec(kind, N_TRL + o, idx_desc(0x801, [ntrain]))
            + rec(kind, N_TEI + o, idx_desc(0x803, [ntest, 28, 28])) + rec(kind, N_TEL + o, idx_desc(0x801, [ntest], adj)))


put("trainer_args", "fmnist-raw", bytes([5 | 1 << 3]) + fmnist(3, 2))
put("trainer_args", "fmnist-gz", bytes([5 | 2 << 3]) + fmnist(4, 3, K_IDX_GZIP, gz=True))
put("trainer_args", "fmnist-slash", bytes([7]) + fmnist(1, 1))
put("trainer_args", "fmnist-bytes", bytes([5]) + rec(K_FILE, N_TRI, idx(0x803, [1, 28, 28], bytes(784)))
    + rec(K_FILE, N_TRL, idx(0x801, [1], b"\x03")) + rec(K_GZIP, N_TEI_GZ, idx(0x803, [1, 28, 28], bytes(range(256)) * 3 + bytes(16)))
    + rec(K_GZIP, N_TEL_GZ, idx(0x801, [1], b"\x09")))
put("trainer_args", "fmnist-truncated", bytes([5]) + fmnist(2, 1, adj=-1))
put("trainer_args", "fmnist-extra-byte", bytes([5]) + fmnist(2, 1, K_IDX_GZIP, gz=True, adj=1))
put("trainer_args", "fmnist-missing-labels", bytes([5]) + fmnist(2, 1)[: -len(rec(K_IDX, N_TEL, idx_desc(0x801, [1])))])
put("trainer_args", "fmnist-dir-for-file", bytes([5]) + fmnist(2, 1) + rec(K_DIR, N_TRI_GZ))
put("trainer_args", "fmnist-symlinks", bytes([5]) + rec(K_DIR, N_SUB) + rec(K_IDX, N_SUBX, idx_desc(0x803, [2, 28, 28]))
    + rec(K_SYMLINK, N_TRI, b"sub/x") + rec(K_SYMLINK, N_TRL, b"t10k-labels-idx1-ubyte") + rec(K_SYMLINK, N_TEL, b"train-labels-idx1-ubyte")
    + rec(K_IDX, N_TEI, idx_desc(0x803, [2, 28, 28])))
put("trainer_args", "fmnist-root-file", bytes([5]) + rec(K_FILE, N_ROOT, b"not a directory"))
put("trainer_args", "fmnist-root-symlink", bytes([5]) + rec(K_SYMLINK, N_ROOT, b"/nowhere"))
put("trainer_args", "fmnist-empty-and-bad-gz", bytes([5]) + rec(K_FILE, N_TRI) + rec(K_FILE, N_TRL_GZ, b"\x1f\x8b\x08\x00junk")
    + fmnist(1, 1)[len(rec(K_IDX, N_TRI, idx_desc(0x803, [1, 28, 28]))) + len(rec(K_IDX, N_TRL, idx_desc(0x801, [1]))):])

# a features directory for feat_model: latents [2, 1, 2, 2] and text_features [7, 2] per clip
def st_crc(tensors):
    meta = {"crc32:" + n: "%08x" % zlib.crc32(raw) for n, _, _, raw in tensors}
    return safetensors(tensors, meta), {n: meta["crc32:" + n] for n, _, _, _ in tensors}


def shard(first, n):
    ts = [("latents", "F32", [n, 2, 1, 2, 2], f32(*[first + i * 0.5 for i in range(8 * n)])),
          ("text_features", "F32", [n, 7, 2], f32(*[i * 0.25 for i in range(14 * n)])),
          ("text", "I32", [n, 7], struct.pack("<%di" % (7 * n), *[(i % 9) for i in range(7 * n)])),
          ("label", "I32", [n], struct.pack("<%di" % n, *[(first + i) % 10 for i in range(n)]))]
    return st_crc(ts)


def features(train_shards, heldout):
    recs, tr, first = b"", [], 0
    for k, n in enumerate(train_shards):
        data, crc = shard(first, n)
        recs += rec(K_FILE, N_TR0 + k, data)
        tr.append({"file": "train-%05d.safetensors" % k, "first": first, "clips": n, "crc32": crc})
        first += n
    hdata, hcrc = shard(0, heldout)
    ndata, ncrc = st_crc([("text_features", "F32", [1, 7, 2], f32(*[0.0] * 14)),
                          ("text", "I32", [1, 7], struct.pack("<7i", 1, 0, 0, 0, 0, 0, 0))])
    man = {"format": "mmc-features", "version": 1, "model": "FuzzDiT", "fingerprint": "@FP@", "seed": 42,
           "heldout_seed": 7, "frames": 1, "init_from": None, "encoder_crc32": "00000000",
           "tensors": {"latents": {"dtype": "F32", "shape": [2, 1, 2, 2]}, "text_features": {"dtype": "F32", "shape": [7, 2]},
                       "text": {"dtype": "I32", "shape": [7]}, "label": {"dtype": "I32", "shape": []}},
           "train": {"clips": first, "shards": tr},
           "heldout": {"clips": heldout, "shards": [{"file": "heldout-00000.safetensors", "first": 0, "clips": heldout, "crc32": hcrc}]},
           "null": {"file": "null.safetensors", "crc32": ncrc}}
    return rec(K_FILE, N_MANIFEST, json.dumps(man).encode()) + recs + rec(K_FILE, N_HO0, hdata) + rec(K_FILE, N_NULL, ndata)


put("trainer_args", "features", bytes([6 | 3 << 3]) + features([2], 3))
put("trainer_args", "features-two-shards", bytes([6 | 2 << 3]) + features([1, 2], 2))
put("trainer_args", "features-eval-batches", bytes([6 | 7 << 3]) + features([1], 2))
put("trainer_args", "features-no-manifest", bytes([6]) + rec(K_DIR, N_SUB))


# ---- indexed (fuzz_indexed): Megatron .idx/.bin pairs and JSONL files ----
# An indexed input: a byte whose bits 1-2 pick the layout, the .idx's length
# (u16), the .idx, the .bin. A JSONL input: an odd byte, then the file.
def megatron(seqs, docs, code=8, modes=None):
    fmt, size = {1: ("B", 1), 4: ("i", 4), 5: ("q", 8), 7: ("f", 4), 8: ("H", 2)}[code]
    lens = [len(s) for s in seqs]
    ptrs, p = [], 0
    for n in lens:
        ptrs.append(p)
        p += n * size
    idx = b"MMIDIDX\x00\x00" + struct.pack("<QBQQ", 1, code, len(seqs), len(docs))
    idx += struct.pack("<%di" % len(lens), *lens) + struct.pack("<%dq" % len(ptrs), *ptrs)
    idx += struct.pack("<%dq" % len(docs), *docs)
    if modes is not None:
        idx += struct.pack("<%db" % len(modes), *modes)
    binf = b"".join(struct.pack("<%d%s" % (len(s), fmt), *s) for s in seqs)
    return idx, binf


def indexed_input(layout, idx, binf):
    return bytes([layout << 1]) + struct.pack("<H", len(idx)) + idx + binf


os.makedirs(os.path.join(here, "indexed"), exist_ok=True)
for name, layout, (i, b) in [
        ("u16", 0, megatron([[1, 2, 3], [4], [], [65535, 0]], [0, 2, 2, 4])),
        ("i32", 1, megatron([[100000, -1], [7]], [0, 1, 2], code=4)),
        ("u8", 0, megatron([[1], [2, 3]], [0, 2], code=1)),
        ("i64", 0, megatron([[2 ** 40]], [0, 1], code=5)),
        ("f32", 0, megatron([[1.5, -2.0]], [0, 1], code=7)),
        ("modes", 2, megatron([[1, 2], [3]], [0, 1, 2], code=4, modes=[1, -3])),
        ("empty", 0, megatron([], [0]))]:
    put("indexed", name, indexed_input(layout, i, b))
put("indexed", "jsonl", b"\x01" + "\n".join(json.dumps(o, ensure_ascii=a) for o, a in [
    ({"text": "hello world"}, True), ({"text": "caf\u00e9 \u6570\u636e \U0001F600"}, False),
    ({"text": "esc \\\" \\n \ud83d\ude00"}, True), ({"text": ""}, True),
    ({"messages": [{"role": "user", "content": "hi"}]}, True), ({"id": 3}, True)]).encode() + b"\n")
put("indexed", "jsonl-bad", b"\x01" + b'{"text": "a"}\n{"text": "b\xff"}\n\n{"text": 3}\n{"text": "x"} 4\n{"text')
