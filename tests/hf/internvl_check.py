"""The comparisons of tests/hf_internvl.sh, in the test venv (safetensors, numpy;
no transformers: the references are committed in tests/hf/internvl/):
  internvl_check.py parity REF LOG LOGITS
      mmc's step-1 loss (LOG, its --log) within 1e-5 relative of transformers'
      (REF, e.g. tests/hf/internvl/ref.safetensors: "loss") and its logits of the test batch
      (LOGITS, --dump-logits, f32 [B * T, cols]; "-": none) within 1e-4 absolute
      of "logits"
  internvl_check.py export FIXTURE_DIR EXPORT_DIR
      the export holds the fixture's tensor names with their shapes and dtypes,
      and training moved every one of them
  internvl_check.py layouts IVL_EXPORT CHAT_EXPORT
      the two layouts' exports of the same training are the same weights: each
      chat attn.qkv the rows of q, k, v; every other tensor its renamed twin,
      bit for bit
Prints a PASS or FAIL line per check; exit 1 if any failed."""
import json
import sys

import numpy as np
from safetensors.numpy import load_file

bad = 0


def say(ok, msg):
    global bad
    bad += not ok
    print(f"{'PASS' if ok else 'FAIL'}: {msg}")


cmd = sys.argv[1]
if cmd == "parity":
    ref = load_file(sys.argv[2])
    got = next(json.loads(l)["loss"] for l in open(sys.argv[3])
               if '"step": 1, "loss"' in l)
    want = float(ref["loss"][0])
    rel = abs(got - want) / abs(want)
    say(rel <= 1e-5, f"step-1 loss {got:.9g}, transformers' {want:.9g}, relative {rel:.2e} "
                     f"(tolerance 1e-5)")
    lg = ref["logits"]
    if sys.argv[4] == "-":
        sys.exit(1 if bad else 0)
    mine = np.fromfile(sys.argv[4], dtype=np.float32).reshape(lg.shape[0], -1)[:, :lg.shape[1]]
    worst = float(np.abs(mine - lg).max())
    say(worst <= 1e-4, f"test-batch logits within {worst:.2e} of transformers' (tolerance 1e-4)")
elif cmd == "export":
    a = load_file(sys.argv[2] + "/model.safetensors")
    b = load_file(sys.argv[3] + "/model.safetensors")
    sig = {k: (v.shape, v.dtype) for k, v in a.items()}
    got = {k: (v.shape, v.dtype) for k, v in b.items()}
    say(sig == got, f"{sys.argv[3]}: the fixture's {len(sig)} tensor names, shapes and dtypes"
        + ("" if sig == got else f": missing {sorted(set(sig) - set(got))[:4]}, extra "
           f"{sorted(set(got) - set(sig))[:4]}, other shapes "
           f"{[k for k in sig if k in got and sig[k] != got[k]][:4]}"))
    same = [k for k in a if k in b and np.array_equal(a[k], b[k])]
    say(not same, f"{sys.argv[3]}: 5 steps moved every tensor" +
        (f"; unchanged: {same[:6]}" if same else ""))
elif cmd == "layouts":
    ivl = load_file(sys.argv[2] + "/model.safetensors")
    chat = load_file(sys.argv[3] + "/model.safetensors")
    ren = [("embeddings.cls_token", "embeddings.class_embedding"),
           ("embeddings.position_embeddings", "embeddings.position_embedding"),
           ("embeddings.patch_embeddings.projection.", "embeddings.patch_embedding."),
           ("encoder.layer.", "encoder.layers."), ("attention.", "attn."),
           ("attn.projection_layer.", "attn.proj."), ("lambda_1", "ls1"), ("lambda_2", "ls2"),
           ("layernorm_before.", "norm1."), ("layernorm_after.", "norm2."),
           ("multi_modal_projector.layer_norm.", "mlp1.0."),
           ("multi_modal_projector.linear_1.", "mlp1.1."),
           ("multi_modal_projector.linear_2.", "mlp1.3."), ("vision_tower.", "vision_model.")]
    wrong, used = [], set()
    for k, v in ivl.items():
        n = k
        for x, y in ren:
            n = n.replace(x, y)
        if n.split(".")[-2] in ("q_proj", "k_proj", "v_proj") and n.startswith("vision_model."):
            base, kind = n.rsplit(".", 2)[0], n.split(".")[-1]
            row = ("q_proj", "k_proj", "v_proj").index(n.split(".")[-2])
            n = f"{base}.qkv.{kind}"
            v0 = chat.get(n)
            ok = v0 is not None and np.array_equal(np.split(v0, 3)[row], v)
        else:
            ok = n in chat and np.array_equal(chat[n], v)
        used.add(n)
        if not ok:
            wrong.append(k)
    say(not wrong and used == set(chat),
        f"the chat layout's export is the transformers layout's, renamed and q/k/v fused "
        f"({len(chat)} tensors)" + (f"; differ: {wrong[:5]}" if wrong else "")
        + (f"; unaccounted: {sorted(set(chat) - used)[:5]}" if used != set(chat) else ""))
sys.exit(1 if bad else 0)
