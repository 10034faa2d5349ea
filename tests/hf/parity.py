"""The first-step loss of an mmc trainer loaded with --init-from HF_DIR
against transformers' on the same batch, in float32.
  parity.py HF_DIR INPUTS.safetensors LOG.jsonl [rel_tol]
INPUTS: the trainer's --dump-inputs of step 1 (ids, labels [B, T], labels
already shifted, -100 not scored); LOG: its --log.  T5EncoderModel: the
loss of the imported model's stand-in head, the embedding tied (mmc import)."""
import json
import sys

import torch
import torch.nn.functional as F
import transformers as tf
from safetensors.torch import load_file

d, inputs, log = sys.argv[1:4]
tol = float(sys.argv[4]) if len(sys.argv) > 4 else 1e-5
x = load_file(inputs)
ids, labels = x["ids"].long(), x["labels"].long()
arch = json.load(open(d + "/config.json"))["architectures"][0]
with torch.no_grad():
    if arch in ("T5EncoderModel", "MT5EncoderModel"):
        m = getattr(tf, arch).from_pretrained(d, torch_dtype=torch.float32).eval()
        h = m(input_ids=ids, attention_mask=(ids != m.config.pad_token_id).long()).last_hidden_state
        h = h * (ids != m.config.pad_token_id).unsqueeze(-1)
        logits = h @ m.shared.weight.T
    else:
        m = tf.AutoModelForCausalLM.from_pretrained(d, torch_dtype=torch.float32).eval()
        logits = m(input_ids=ids).logits
    ref = F.cross_entropy(logits.reshape(-1, logits.shape[-1]).double(), labels.reshape(-1),
                          ignore_index=-100).item()
got = next(json.loads(l)["loss"] for l in open(log) if '"loss"' in l and '"step": 1' in l)
rel = abs(got - ref) / abs(ref)
print(f"{arch} {d}: mmc first-step loss {got:.9g}, transformers {ref:.9g}, relative {rel:.2e}")
sys.exit(0 if rel <= tol else 1)
