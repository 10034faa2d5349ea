"""The first-step loss and the logits of mmc trainers loaded with
--init-from HF_DIR against transformers' on the same batches, in float32.
  parity.py TOL HF_DIR INPUTS.safetensors LOG.jsonl LOGITS [HF_DIR ...]...
INPUTS: a trainer's --dump-inputs of step 1 (ids, labels [B, T], labels
already shifted, -100 not scored); LOG: its --log; LOGITS: its
--dump-logits with --lr 1e-30 (the initial weights' logits of the first test
batch, f32 [B * T, vocab]): that batch is rows of T pixel bytes of test
images 0 .. B-1 from an offset drawn by the trainer, so every offset is
tried and the closest must be within 1e-4 absolute.  INPUTS "-": a
directory mmc's --save-hf wrote (after training; LOGITS its --dump-logits
of the trained weights): no loss compared, B and T from the logits' size
(B = 2, T = 16), and transformers must load it with no missing,
unexpected or misshapen key.  MMC_LOGIT_TOL overrides the logits'
tolerance (an export in bf16).  T5EncoderModel: the
loss of the imported model's stand-in head (the embedding, tied; mmc
import), padding (id pad_token_id) masked and zeroed as mmc's T5Encoder.
Prints one PASS or FAIL line per directory; exit 1 if any failed."""
import gzip
import json
import os
import re
import sys

import torch
import torch.nn.functional as F
import transformers as tf
from safetensors.torch import load_file

IMAGES = "/usr/share/datasets/fashion-mnist/t10k-images-idx3-ubyte.gz"
pixels = torch.frombuffer(bytearray(gzip.open(IMAGES).read()[16:]), dtype=torch.uint8)
pixels = pixels.view(-1, 784).long()
tol, args, bad = float(sys.argv[1]), sys.argv[2:], 0
MEAN, STD = 0.2860, 0.3530  # the classification task's normalisation (runtime/data/mmrt_data.h)


def report(arch, d, worst, info, inputs, log, ref):
    global bad
    ltol = float(os.environ.get("MMC_LOGIT_TOL", "1e-4"))
    if worst is not None:
        lok = worst <= ltol
        bad += not lok
        print(f"{'PASS' if lok else 'FAIL'}: {arch} {d}: mmc's logits of the first test batch "
              f"within {worst:.2e} of transformers' (tolerance {ltol:g})")
    keys = {k: v for k, v in info.items() if v and k != "error_msgs"}
    if keys or info.get("error_msgs"):
        bad += 1
        print(f"FAIL: {arch} {d}: transformers loads it with {keys} {info.get('error_msgs')}")
    if inputs == "-":
        return
    step = int(re.search(r"step-(\d+)", inputs).group(1))  # that step's loss in the log
    got = next(json.loads(l)["loss"] for l in open(log)
               if '"loss"' in l and f'"step": {step},' in l)
    rel = abs(got - ref) / abs(ref)
    ok = rel <= tol
    bad += not ok
    print(f"{'PASS' if ok else 'FAIL'}: {arch} {d}: mmc's step-{step} loss {got:.9g}, "
          f"transformers' {ref:.9g}, relative {rel:.2e} (tolerance {tol:g})")


for d, inputs, log, dumped in zip(args[0::4], args[1::4], args[2::4], args[3::4]):
    arch = json.load(open(d + "/config.json"))["architectures"][0]
    x = load_file(inputs) if inputs != "-" else None
    if arch not in ("CLIPVisionModel", "LlavaForConditionalGeneration"):
        ids = x["ids"].long() if x else torch.zeros(2, 16, dtype=torch.long)
        labels = x["labels"].long() if x else ids
        B, T = ids.shape
    with torch.no_grad():
        if arch == "LlavaForConditionalGeneration":  # the loss only (no test-batch logits)
            m, info = tf.LlavaForConditionalGeneration.from_pretrained(
                d, torch_dtype=torch.float32, output_loading_info=True)
            m.eval()
            lg = m(input_ids=x["text"].long(), pixel_values=x["pixels"].float()).logits
            ref = F.cross_entropy(lg.reshape(-1, lg.shape[-1]).double(),
                                  x["labels"].long().reshape(-1), ignore_index=-100).item()
            report(arch, d, None, info, inputs, log, ref)
            continue
        if arch == "CLIPVisionModel":
            m, info = tf.CLIPVisionModel.from_pretrained(d, torch_dtype=torch.float32,
                                                         output_loading_info=True)
            m.eval()
            B = 2  # the trainer's batch (mmc import's B = 1, compiled with --set B=2)
            ids = x["pixels"].float() if x else torch.zeros(B, 1, 28, 28)
            labels = x["labels"].long() if x else torch.zeros(B, dtype=torch.long)

            def run(px):  # the stand-in head of mmc import: the first 10 pooled features
                return m(pixel_values=px).pooler_output[:, :10]
            logits = run(ids)
            ref = F.cross_entropy(logits.double(), labels).item()
            # the first test batch: test images 0 .. B-1, normalised as the classification task
            px = (pixels[:B].float() / 255 - MEAN) / STD
            mine = torch.frombuffer(bytearray(open(dumped, "rb").read()), dtype=torch.float32)
            worst = (run(px.view(B, 1, 28, 28)) - mine.view(B, -1)[:, :10]).abs().max().item()
            report(arch, d, worst, info, inputs, log, ref)
            continue
        if arch in ("T5EncoderModel", "MT5EncoderModel", "UMT5EncoderModel"):
            m, info = getattr(tf, arch).from_pretrained(d, torch_dtype=torch.float32,
                                                        output_loading_info=True)
            m.eval()

            def run(ids):
                keep = (ids != m.config.pad_token_id).long()
                h = m(input_ids=ids, attention_mask=keep).last_hidden_state * keep.unsqueeze(-1)
                return h @ m.shared.weight.T
        else:
            m, info = tf.AutoModelForCausalLM.from_pretrained(d, torch_dtype=torch.float32,
                                                              output_loading_info=True)
            m.eval()

            def run(ids):
                return m(input_ids=ids).logits
        logits = run(ids)
        ref = F.cross_entropy(logits.reshape(-1, logits.shape[-1]).double(), labels.reshape(-1),
                              ignore_index=-100).item()
        V = logits.shape[-1]
        mine = torch.frombuffer(bytearray(open(dumped, "rb").read()), dtype=torch.float32)
        mine = mine.view(B, T, -1)[:, :, :V]
        worst = 0.0
        for b in range(B):  # every offset of image b; the closest
            offs = torch.arange(784 - T)
            seqs = pixels[b][offs.unsqueeze(1) + torch.arange(T)]
            diff = (run(seqs) - mine[b]).abs().amax(dim=(1, 2))
            worst = max(worst, diff.min().item())
    report(arch, d, worst, info, inputs, log, ref)
sys.exit(1 if bad else 0)
