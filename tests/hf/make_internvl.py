"""The InternVL fixtures of tests/hf_internvl.sh (tests/hf/internvl/), made with
transformers >= 4.52 (InternVLForConditionalGeneration; a test reference, never
a dependency of mmc) in the venv /var/cache/mmc-venv-ivl, which is too big for
the test command: the fixtures are committed, and the test compares mmc with
them.  Three commands:

  make_internvl.py model OUT
      OUT/ivl: a tiny random InternVLForConditionalGeneration (InternVLVision
        tower with q/k norm and q/k/v biases, 28x28 one-channel images in 7x7
        patches, pixel shuffle 0.5 into 4 image tokens, a 2-layer Qwen2 over
        the caption task's 64-token vocabulary, image_token_id 3), saved by
        save_pretrained;
      OUT/chat: the same weights in the InternVLChatModel layout of the
        InternVL2 checkpoints (vision_model.*, a fused attn.qkv, mlp1.{0,1,3},
        language_model.*), its config.json written as InternVLChatConfig
        writes one and added_tokens.json naming <IMG_CONTEXT> = 3.  The
        layout is established from OpenGVLab/InternVL's modeling_intern_vit.py
        and modeling_internvl_chat.py (read, not run: the remote code needs
        flash-attn/timm/einops); chat_to_ivl() below is that reading.
      OUT/ivl_llama: the transformers layout with a Llama of the same shape
        (other random weights).
  make_internvl.py ref OUT [NAME]
      OUT/ref.safetensors (NAME ivl_llama: OUT/ref_ivl_llama.safetensors):
      transformers' loss on OUT/batch.safetensors (an mmc
        trainer's --dump-inputs of step 1: pixels, text, labels shifted by one)
        and its logits on OUT/eval.safetensors (the test batch of the
        trainer's --dump-logits), float64 loss, float32 logits [B * T, V].
  make_internvl.py published OUT
      OUT/internvl3_1b/config.json (InternVL3-1B's dimensions in transformers'
      layout) and OUT/internvl3_1b.json: transformers' parameter count and
      its parameters' names (as save_pretrained writes them) and shapes
  make_internvl.py check DIR LOGITS EVAL [DIR LOGITS EVAL ...]
      transformers loads each DIR (either layout; chat: renamed back) with no
      missing or unexpected key and its logits on EVAL's batch are LOGITS
      (mmc's --dump-logits) within 1e-4; prints PASS or FAIL."""
import importlib
import json
import os
import sys

import torch
import torch.nn.functional as F
import transformers as tf
from safetensors.torch import load_file, save_file

IMG = 3  # the caption tokenizer's <img>


def config(llama=False):
    vc = tf.InternVLVisionConfig(image_size=28, patch_size=7, num_channels=1, hidden_size=32,
                                 intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
                                 use_qk_norm=True, attention_bias=True)
    tc = tf.Qwen2Config(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                        num_attention_heads=4, num_key_value_heads=2, rope_theta=10000.0,
                        rms_norm_eps=1e-6, max_position_embeddings=64)
    if llama:  # the same shape as a Llama: no q/k/v biases
        tc = tf.LlamaConfig(**{k: getattr(tc, k) for k in (
            "vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers",
            "num_attention_heads", "num_key_value_heads", "rope_theta", "rms_norm_eps",
            "max_position_embeddings")})
    return tf.InternVLConfig(vision_config=vc, text_config=tc, image_token_id=IMG,
                             image_seq_length=4)


V, C = "vision_tower.", "vision_model."
RENAME = [  # transformers' vision and projector names -> InternVLChatModel's
    ("embeddings.cls_token", "embeddings.class_embedding"),
    ("embeddings.position_embeddings", "embeddings.position_embedding"),
    ("embeddings.patch_embeddings.projection.", "embeddings.patch_embedding."),
    ("encoder.layer.", "encoder.layers."),
    ("attention.projection_layer.", "attn.proj."),
    ("attention.q_norm.", "attn.q_norm."),
    ("attention.k_norm.", "attn.k_norm."),
    ("lambda_1", "ls1"),
    ("lambda_2", "ls2"),
    ("layernorm_before.", "norm1."),
    ("layernorm_after.", "norm2."),
]
PROJ = [("multi_modal_projector.layer_norm.", "mlp1.0."),
        ("multi_modal_projector.linear_1.", "mlp1.1."),
        ("multi_modal_projector.linear_2.", "mlp1.3.")]


def ivl_to_chat(t):
    out = {}
    for k, v in t.items():
        if k.startswith(V):
            n = k[len(V):]
            if ".attention." in n and n.split(".")[-2] in ("q_proj", "k_proj", "v_proj"):
                if n.split(".")[-2] != "q_proj":
                    continue  # fused below, rows q, k, v (modeling_intern_vit.py's reshape)
                base, kind = n.rsplit(".", 2)[0], n.split(".")[-1]
                fused = torch.cat([t[V + base + f".{p}.{kind}"] for p in ("q_proj", "k_proj",
                                                                         "v_proj")])
                n = base.replace("attention", "attn") + ".qkv." + kind
                out[C + n.replace("encoder.layer.", "encoder.layers.")] = fused
                continue
            out[C + renamed(n, RENAME)] = v
        else:
            out[renamed(k, PROJ)] = v
    return out


def renamed(k, pairs, back=False):
    for a, b in pairs:
        k = k.replace(b, a) if back else k.replace(a, b)
    return k


def chat_to_ivl(t):
    out = {}
    for k, v in t.items():
        if k.startswith(C):
            n = k[len(C):]
            if n.endswith((".attn.qkv.weight", ".attn.qkv.bias")):
                base, kind = n.rsplit(".", 2)[0], n.split(".")[-1]
                base = base.replace("encoder.layers.", "encoder.layer.").replace("attn",
                                                                                 "attention")
                for p, part in zip(("q_proj", "k_proj", "v_proj"), v.chunk(3)):
                    out[V + f"{base}.{p}.{kind}"] = part.clone()
                continue
            out[V + renamed(n, RENAME, back=True)] = v
        else:
            out[renamed(k, PROJ, back=True)] = v
    return out


def chat_config(c):
    vc, tc = c.vision_config.to_dict(), c.text_config.to_dict()
    vision = {k: vc[k] for k in ("hidden_size", "intermediate_size", "num_hidden_layers",
                                 "num_attention_heads", "num_channels", "layer_norm_eps",
                                 "hidden_act", "norm_type", "initializer_range")}
    vision.update(architectures=["InternVisionModel"], model_type="intern_vit_6b",
                  image_size=vc["image_size"][0], patch_size=vc["patch_size"][0],
                  qkv_bias=vc["attention_bias"], qk_normalization=vc["use_qk_norm"],
                  use_flash_attn=False, dropout=0.0, drop_path_rate=0.0, attention_dropout=0.0,
                  initializer_factor=0.1)
    llm = dict(tc, architectures=["Qwen2ForCausalLM"])
    llm.pop("torch_dtype", None)
    return {"architectures": ["InternVLChatModel"], "model_type": "internvl_chat",
            "vision_config": vision, "llm_config": llm, "downsample_ratio": 0.5,
            "select_layer": -1, "ps_version": "v2", "template": "internvl2_5",
            "force_image_size": vision["image_size"], "dynamic_image_size": False,
            "use_thumbnail": False, "min_dynamic_patch": 1, "max_dynamic_patch": 6,
            "use_backbone_lora": 0, "use_llm_lora": 0, "pad2square": False,
            "torch_dtype": "float32", "transformers_version": tf.__version__}


def load(d):
    """A directory of either layout as InternVLForConditionalGeneration."""
    cfg = json.load(open(os.path.join(d, "config.json")))
    if cfg["architectures"] == ["InternVLForConditionalGeneration"]:
        return tf.InternVLForConditionalGeneration.from_pretrained(
            d, torch_dtype=torch.float32, output_loading_info=True)
    m = tf.InternVLForConditionalGeneration(config())
    t = chat_to_ivl(load_file(os.path.join(d, "model.safetensors")))
    # the legacy names transformers saves under, as the model's own
    info = m.load_state_dict({k.replace("language_model.model.", "model.language_model.")
                              .replace("language_model.lm_head.", "lm_head.")
                              .replace("vision_tower.", "model.vision_tower.")
                              .replace("multi_modal_projector.", "model.multi_modal_projector.")
                              : v for k, v in t.items()}, strict=False)
    return m, {"missing_keys": info.missing_keys, "unexpected_keys": info.unexpected_keys}


def randomized(m):
    with torch.no_grad():  # no ones, zeros or 0.1s: a dropped or swapped tensor shows
        for n, p in m.named_parameters():
            if "lambda" in n:
                p.normal_(0.5, 0.1)
            elif "norm" in n and n.endswith("weight"):
                p.normal_(1.0, 0.1)
            elif n.endswith("bias"):
                p.normal_(0.0, 0.1)
            elif "cls_token" in n or "position_embeddings" in n:
                p.normal_(0.0, 0.5)
            else:
                p.normal_(0.0, 0.2)
    return m


def logits(m, x):
    return m(input_ids=x["text"].long(), pixel_values=x["pixels"].float()).logits


def main():
    cmd, out = sys.argv[1], sys.argv[2]
    if cmd == "model":
        torch.manual_seed(0)
        m = randomized(tf.InternVLForConditionalGeneration(config()))
        m.save_pretrained(os.path.join(out, "ivl"), safe_serialization=True)
        torch.manual_seed(1)  # the transformers layout with a Llama
        randomized(tf.InternVLForConditionalGeneration(config(llama=True))).save_pretrained(
            os.path.join(out, "ivl_llama"), safe_serialization=True)
        t = load_file(os.path.join(out, "ivl", "model.safetensors"))
        os.makedirs(os.path.join(out, "chat"), exist_ok=True)
        save_file(ivl_to_chat(t), os.path.join(out, "chat", "model.safetensors"),
                  {"format": "pt"})
        assert all(torch.equal(v, chat_to_ivl(ivl_to_chat(t))[k]) for k, v in t.items())
        json.dump(chat_config(m.config), open(os.path.join(out, "chat", "config.json"), "w"),
                  indent=2)
        json.dump({"<IMG_CONTEXT>": IMG}, open(os.path.join(out, "chat", "added_tokens.json"),
                                               "w"))
    elif cmd == "ref":
        name = sys.argv[3] if len(sys.argv) > 3 else "ivl"
        m, info = load(os.path.join(out, name))
        assert not info["missing_keys"] and not info["unexpected_keys"], info
        m.eval()
        with torch.no_grad():
            x = load_file(os.path.join(out, "batch.safetensors"))
            lg = logits(m, x)
            loss = F.cross_entropy(lg.reshape(-1, lg.shape[-1]).double(),
                                   x["labels"].long().reshape(-1), ignore_index=-100)
            e = logits(m, load_file(os.path.join(out, "eval.safetensors")))
        save_file({"loss": loss.reshape(1), "logits": e.reshape(-1, e.shape[-1]).contiguous()},
                  os.path.join(out, "ref.safetensors" if name == "ivl" else f"ref_{name}.safetensors"))
        print(f"loss {loss.item():.9g}, logits {tuple(e.shape)}")
    elif cmd == "published":
        # InternVL3-1B's dimensions (InternViT-300M-448px + Qwen2.5-0.5B's, vocabulary 151674)
        # in transformers' layout: config.json, and transformers' parameters (names as saved,
        # shapes; meta device) with their count, for a weightless header made by the test
        vc = tf.InternVLVisionConfig(image_size=[448, 448], patch_size=[14, 14], hidden_size=1024,
                                     intermediate_size=4096, num_hidden_layers=24,
                                     num_attention_heads=16, attention_bias=True)
        tc = tf.Qwen2Config(vocab_size=151674, hidden_size=896, intermediate_size=4864,
                            num_hidden_layers=24, num_attention_heads=14, num_key_value_heads=2,
                            rope_theta=1000000.0, rms_norm_eps=1e-6, tie_word_embeddings=False)
        c = tf.InternVLConfig(vision_config=vc, text_config=tc, image_token_id=151667,
                              image_seq_length=256, architectures=["InternVLForConditionalGeneration"])
        d = os.path.join(out, "internvl3_1b")
        os.makedirs(d, exist_ok=True)
        c.save_pretrained(d)
        importlib.import_module("torch._dynamo")  # before the meta device: circular there
        with torch.device("meta"):
            m = tf.InternVLForConditionalGeneration(c)
        back = {v.lstrip("^"): k.lstrip("^") for k, v in
                m._checkpoint_conversion_mapping.items()}  # the names save_pretrained writes
        params = []
        for k, p in m.named_parameters():
            for a, b in back.items():
                if k.startswith(a):
                    k = b + k[len(a):]
            params.append([k, list(p.shape)])
        count = sum(p.numel() for p in m.parameters())
        json.dump({"count": count, "params": params}, open(d + ".json", "w"), separators=(",", ":"))
        print(f"internvl3_1b {count}")
    elif cmd == "check":
        bad = 0
        for d, lfile, efile in zip(sys.argv[2::3], sys.argv[3::3], sys.argv[4::3]):
            m, info = load(d)
            m.eval()
            with torch.no_grad():
                e = logits(m, load_file(efile))
            mine = torch.frombuffer(bytearray(open(lfile, "rb").read()), dtype=torch.float32)
            V = e.shape[-1]
            worst = (e.reshape(-1, V) - mine.view(e.shape[0] * e.shape[1], -1)[:, :V]).abs().max()
            keys = {k: v for k, v in info.items() if v}
            ok = worst.item() <= 1e-4 and not keys
            bad += not ok
            print(f"{'PASS' if ok else 'FAIL'}: transformers {tf.__version__} loads {d} "
                  f"{'with ' + str(keys) if keys else '(no missing or unexpected key)'}; its "
                  f"logits within {worst.item():.2e} of mmc's trained ones (tolerance 1e-4)")
        sys.exit(1 if bad else 0)


main()
