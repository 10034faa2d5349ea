"""The first-step loss of mmc trainers loaded with --init-from HF_DIR
against transformers' on the same batch, in float32.
  parity.py TOL HF_DIR INPUTS.safetensors LOG.jsonl [HF_DIR INPUTS LOG]...
INPUTS: a trainer's --dump-inputs of step 1 (ids, labels [B, T], labels
already shifted, -100 not scored); LOG: its --log.  T5EncoderModel: the
loss of the imported model's stand-in head (the embedding, tied; mmc
import), padding (id pad_token_id) masked and zeroed as mmc's T5Encoder.
Prints one PASS or FAIL line per directory; exit 1 if any failed."""
import json
import sys

import torch
import torch.nn.functional as F
import transformers as tf
from safetensors.torch import load_file

tol, args, bad = float(sys.argv[1]), sys.argv[2:], 0
for d, inputs, log in zip(args[0::3], args[1::3], args[2::3]):
    x = load_file(inputs)
    ids, labels = x["ids"].long(), x["labels"].long()
    arch = json.load(open(d + "/config.json"))["architectures"][0]
    with torch.no_grad():
        if arch in ("T5EncoderModel", "MT5EncoderModel"):
            m = getattr(tf, arch).from_pretrained(d, torch_dtype=torch.float32).eval()
            keep = (ids != m.config.pad_token_id).long()
            h = m(input_ids=ids, attention_mask=keep).last_hidden_state * keep.unsqueeze(-1)
            logits = h @ m.shared.weight.T
        else:
            m = tf.AutoModelForCausalLM.from_pretrained(d, torch_dtype=torch.float32).eval()
            logits = m(input_ids=ids).logits
        ref = F.cross_entropy(logits.reshape(-1, logits.shape[-1]).double(), labels.reshape(-1),
                              ignore_index=-100).item()
    got = next(json.loads(l)["loss"] for l in open(log) if '"loss"' in l and '"step": 1,' in l)
    rel = abs(got - ref) / abs(ref)
    ok = rel <= tol
    bad += not ok
    print(f"{'PASS' if ok else 'FAIL'}: {arch} {d}: mmc's first-step loss {got:.9g}, "
          f"transformers' {ref:.9g}, relative {rel:.2e} (tolerance {tol:g})")
sys.exit(1 if bad else 0)
