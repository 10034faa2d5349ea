"""tests/text_data.sh's references, from the documents' ids as `tokenizers`
gives them (ids.txt): the rows the trainer's text task must feed, and the
comparison with what it fed (--dump-inputs safetensors, read here by hand).

  rows IDS T PACK DROP     -> the expected rows, one "ids | labels" line each
  dumped DIR STEPS         -> the dumped rows of steps 1..STEPS, same format
  losses A B               -> the "loss" of every step of two JSONL logs, equal bit for bit
"""
import json
import struct
import sys

IGNORE = -100


def rows(ids_file, T, pack, drop):
    docs = [list(map(int, l.split())) for l in open(ids_file)]
    out, cur = [], []

    def close():
        if cur:
            ids = [t for d in cur for t in d]
            lab = [x for d in cur for x in d[1:] + [IGNORE]]
            pad = T - len(ids)
            out.append((ids + [0] * pad, lab + [IGNORE] * pad))

    for d in docs:
        if len(d) < 2:
            continue
        if len(d) > T:
            if drop:
                continue
            d = d[:T]
        if not pack or sum(map(len, cur)) + len(d) > T:
            close()
            cur = []
        cur.append(d)
    close()
    return out


def st_read(path):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        head = json.loads(f.read(n))
        body = f.read()
    t = {}
    for k, v in head.items():
        if k == "__metadata__":
            continue
        a, b = v["data_offsets"]
        assert v["dtype"] == "I32", v
        t[k] = list(struct.unpack("<%di" % ((b - a) // 4), body[a:b]))
        t[k + ".shape"] = v["shape"]
    return t


def fmt(ids, lab):
    return " ".join(map(str, ids)) + " | " + " ".join(map(str, lab))


def main(a):
    if a[1] == "rows":
        for ids, lab in rows(a[2], int(a[3]), a[4] == "1", a[5] == "1"):
            print(fmt(ids, lab))
    elif a[1] == "dumped":
        for s in range(1, int(a[3]) + 1):
            t = st_read("%s/step-%06d.safetensors" % (a[2], s))
            B, T = t["ids.shape"]
            for r in range(B):
                print(fmt(t["ids"][r * T:(r + 1) * T], t["labels"][r * T:(r + 1) * T]))
    elif a[1] == "losses":
        la = [json.loads(l)["loss"] for l in open(a[2]) if '"loss"' in l]
        lb = [json.loads(l)["loss"] for l in open(a[3]) if '"loss"' in l]
        if not la or la != lb:
            print("losses differ:\n", la, "\n", lb)
            sys.exit(1)


if __name__ == "__main__":
    main(sys.argv)
