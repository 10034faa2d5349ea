"""A reference for `mmc data conv` (hf venv: PIL for the image sizes,
`tokenizers` for the ids), written from the formats' descriptions, not from
mmc's code:
  python ref.py DATA.jsonl|DATA.json TOK.json IMGDIR FAMILY MODE [T POLICY]
MODE: "fixed:N" (N tokens an image) or "tiles:SIZE:MAX:PER" (InternVL2's
dynamic tiling with a thumbnail). FAMILY: internvl2 or chatml. T, POLICY:
the sequence length and truncate|drop. Prints the lines mmc prints (one JSON
object a sample) for the samples kept."""
import json
import sys

from PIL import Image, ImageOps
from tokenizers import Tokenizer

INTERNVL_SYSTEM = ("你是由上海人工智能实验室联合商汤科技开发的书生多模态大模型，英文名叫InternVL, "
                   "是一个有用无害的人工智能助手。")
ROLE = {"human": "user", "user": "user", "gpt": "assistant", "assistant": "assistant",
        "system": "system"}


def grid(w, h, size, most):
    """InternVL's find_closest_aspect_ratio: of the grids with 1..most tiles
    (by area), the aspect ratio closest to w/h; a tie goes to the larger
    grid when the image covers more than half of it."""
    cands = sorted({(c, r) for c in range(1, most + 1) for r in range(1, most + 1) if c * r <= most},
                   key=lambda g: g[0] * g[1])
    aspect, best, diff = w / h, (1, 1), float("inf")
    for c, r in cands:
        d = abs(aspect - c / r)
        if d < diff:
            diff, best = d, (c, r)
        elif d == diff and w * h > 0.5 * size * size * c * r:
            best = (c, r)
    n = best[0] * best[1]
    return n + (1 if n > 1 else 0)


def render(family, msgs):
    """The text and the character spans of the assistant replies (with their
    end token) the loss is taken on."""
    out, spans = "", []
    if family == "internvl2":
        sysmsg = msgs[0][1] if msgs and msgs[0][0] == "system" else INTERNVL_SYSTEM
        out = "<|im_start|>system\n" + sysmsg + "<|im_end|>"
        if msgs and msgs[0][0] == "system":
            msgs = msgs[1:]
        sep = ""
    else:
        sep = "\n"
    for role, text in msgs:
        out += "<|im_start|>" + role + "\n"
        a = len(out)
        out += text + "<|im_end|>"
        if role == "assistant":
            spans.append((a, len(out)))
        out += sep
    return out, spans


def main():
    data, tokp, imgdir, family, mode = sys.argv[1:6]
    limit = int(sys.argv[6]) if len(sys.argv) > 6 else 0
    policy = sys.argv[7] if len(sys.argv) > 7 else "fail"
    tok = Tokenizer.from_file(tokp)
    text = open(data, encoding="utf-8").read()
    samples = json.loads(text) if text.lstrip().startswith("[") else \
        [json.loads(l) for l in text.splitlines() if l.strip()]
    if family == "internvl2":
        start, ctx, end = "<img>", "<IMG_CONTEXT>", "</img>"
    else:
        start, ctx, end = "", "<image>", ""
    ctx_id, end_id = tok.token_to_id(ctx), tok.token_to_id(end) if end else None
    m = mode.split(":")
    for index, s in enumerate(samples):
        imgs = s.get("image") or []
        if isinstance(imgs, str):
            imgs = [imgs]
        tiles = []
        for name in imgs:
            if m[0] == "fixed":
                tiles.append(1)
            else:
                w, h = ImageOps.exif_transpose(Image.open(imgdir + "/" + name)).size
                tiles.append(grid(w, h, int(m[1]), int(m[2])))
        ntok = [int(m[1]) if m[0] == "fixed" else t * int(m[3]) for t in tiles]
        k, msgs = 0, []
        for turn in s["conversations"]:
            parts = turn["value"].split("<image>")
            v = parts[0]
            for p in parts[1:]:
                v += start + ctx * ntok[k] + end + p
                k += 1
            msgs.append((ROLE[turn["from"]], v))
        assert k == len(imgs)
        full, spans = render(family, msgs)
        enc = tok.encode(full, add_special_tokens=False)
        ids = enc.ids
        mask = "".join("1" if any(a < e and b > st for st, e in spans) else "0"
                       for a, b in enc.offsets)
        trunc = False
        if limit and len(ids) > limit:
            if policy == "drop":
                continue
            last = max([i + 1 for i, t in enumerate(ids) if t == ctx_id or t == end_id] or [0])
            if last > limit:
                continue
            ids, mask, trunc = ids[:limit], mask[:limit], True
        sid = s.get("id", index)
        print(json.dumps({"sample": index, "id": str(sid), "tiles": tiles, "image_tokens": ntok,
                          "truncated": trunc, "ids": ids, "mask": mask}, ensure_ascii=False))


if __name__ == "__main__":
    main()
