"""The --save-hf directories of one model trained under several plans give
the same outputs in transformers as the serial run's (tests/hf_parallel.sh).
  same_export.py TOL INIT_DIR SERIAL_DIR NAME=DIR [NAME=DIR ...]
Each directory is loaded with its architecture's transformers class (no
missing, unexpected or misshapen key) and run in float32 on one fixed input
(seeded: ids, or pixels, or both for LLaVA): the output (LMs' and LLaVA's
logits, the encoders' last_hidden_state) of each NAME=DIR must be within TOL
(absolute, scaled by max(1, the largest |output|)) of SERIAL_DIR's, and the
serial one must differ from INIT_DIR's (the imported weights) by more than
10 TOL, so that training moved what is compared. Prints one PASS or FAIL line
each; exit 1 if any failed."""
import json
import sys

import torch
import transformers as tf

tol, init, serial, rest = float(sys.argv[1]), sys.argv[2], sys.argv[3], sys.argv[4:]
bad = 0


def load(d):
    arch = json.load(open(d + "/config.json"))["architectures"][0]
    cls = getattr(tf, arch)
    m, info = cls.from_pretrained(d, torch_dtype=torch.float32, output_loading_info=True)
    m.eval()
    keys = {k: v for k, v in info.items() if v}
    return arch, m, keys


def run(arch, m):
    g = torch.Generator().manual_seed(1)
    c = m.config
    with torch.no_grad():
        if arch == "CLIPVisionModel":
            px = torch.randn(2, c.num_channels, c.image_size, c.image_size, generator=g)
            return m(pixel_values=px).last_hidden_state
        if arch == "LlavaForConditionalGeneration":
            v = c.vision_config
            px = torch.randn(2, v.num_channels, v.image_size, v.image_size, generator=g)
            n = (v.image_size // v.patch_size) ** 2  # the image's tokens
            ids = torch.randint(4, c.text_config.vocab_size, (2, 12), generator=g)
            ids = torch.cat([ids[:, :1], torch.full((2, n), c.image_token_index), ids[:, 1:]], 1)
            return m(input_ids=ids, pixel_values=px).logits
        ids = torch.randint(0, c.vocab_size, (2, 16), generator=g)
        if arch.endswith("EncoderModel"):
            return m(input_ids=ids).last_hidden_state
        return m(input_ids=ids).logits


arch, m, keys = load(serial)
ref = run(arch, m)
scale = max(1.0, ref.abs().max().item())
_, m0, _ = load(init)
moved = (run(arch, m0) - ref).abs().max().item() / scale
if keys or moved <= 10 * tol:
    bad += 1
    print(f"FAIL: {arch} {serial}: loaded with {keys}; 5 steps moved the output by {moved:.2e}")
for spec in rest:
    name, d = spec.split("=", 1)
    a, m, keys = load(d)
    diff = (run(a, m) - ref).abs().max().item() / scale if a == arch else float("inf")
    ok = not keys and diff <= tol
    bad += not ok
    print(f"{'PASS' if ok else 'FAIL'}: {arch} {name}: transformers loads --save-hf"
          f"{' with ' + str(keys) if keys else ''}; its output within {diff:.2e} of the serial "
          f"export's (tolerance {tol:g}; training moved it {moved:.2e})")
sys.exit(1 if bad else 0)
