"""The Hugging Face directories of tests/hf_import.sh, made with transformers
(a test reference, never a dependency of mmc), in one Python start:
  make_tiny.py OUT
  OUT/gpt2, llama, qwen2 (tied, random q/k/v biases), qwen2_bf16 (the same
    weights in bf16, 3 shards), qwen2_f16 (in fp16), t5 (T5EncoderModel,
    gated-GELU), umt5 (UMT5EncoderModel: a bias table per layer), clip (CLIPVisionModel, 28x28 one-channel images), llava
    (LlavaForConditionalGeneration on the caption task): tiny, random
  OUT/pub/<name>: published configurations, weightless (published.py);
    OUT/pub.txt: "<name> <transformers' parameter count>" per line
  OUT/b_*: bad inputs, each a copy of one of the above with one fault"""
import json
import os
import shutil
import struct
import sys

import torch
import transformers as tf
from safetensors.torch import load_file, save_file

sys.path.insert(0, os.path.dirname(__file__))
import published  # noqa: E402

out = sys.argv[1]
torch.manual_seed(0)


def save(model, name, **kw):
    model.save_pretrained(os.path.join(out, name), safe_serialization=True, **kw)


V = 256  # the pixel task's byte vocabulary
gpt2 = tf.GPT2LMHeadModel(tf.GPT2Config(vocab_size=V, n_positions=64, n_embd=32, n_layer=2,
                                        n_head=4))
llama = tf.LlamaForCausalLM(tf.LlamaConfig(vocab_size=V, hidden_size=32, intermediate_size=64,
                                           num_hidden_layers=2, num_attention_heads=4,
                                           num_key_value_heads=2, rope_theta=10000.0,
                                           rms_norm_eps=1e-6, max_position_embeddings=128))
qcfg = tf.Qwen2Config(vocab_size=V, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, rope_theta=1e6,
                      rms_norm_eps=1e-6, tie_word_embeddings=True, max_position_embeddings=128)
qwen = tf.Qwen2ForCausalLM(qcfg)
t5 = tf.T5EncoderModel(tf.T5Config(vocab_size=V, d_model=32, d_kv=8, d_ff=64, num_layers=2,
                                   num_heads=4, relative_attention_num_buckets=32,
                                   relative_attention_max_distance=20,
                                   feed_forward_proj="gated-gelu", is_encoder_decoder=False))
# CLIP's vision tower for the classification task's 28x28 one-channel images: 4x4 patches of 7
clip = tf.CLIPVisionModel(tf.CLIPVisionConfig(image_size=28, patch_size=7, num_channels=1,
                                              hidden_size=32, intermediate_size=64,
                                              num_hidden_layers=2, num_attention_heads=4))
# LLaVA on the caption task: CLIP (2x2 patches of 14, its first layer's features), a projector
# from width 32 to 48, a Llama over the caption vocabulary (64; <img> is token 3)
llava = tf.LlavaForConditionalGeneration(tf.LlavaConfig(
    vision_config=tf.CLIPVisionConfig(image_size=28, patch_size=14, num_channels=1,
                                      hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                      num_attention_heads=4),
    text_config=tf.LlamaConfig(vocab_size=64, hidden_size=48, intermediate_size=64,
                               num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                               rms_norm_eps=1e-6, initializer_range=0.2),
    image_token_index=3, image_seq_length=4))  # weights of 0.2: the image moves the captions
umt5 = tf.UMT5EncoderModel(tf.UMT5Config(vocab_size=V, d_model=32, d_kv=8, d_ff=64, num_layers=2,
                                         num_heads=4, relative_attention_num_buckets=32,
                                         relative_attention_max_distance=20,
                                         feed_forward_proj="gated-gelu", is_encoder_decoder=False))
with torch.no_grad():  # weights that are not ones or zeros: a dropped or swapped one shows
    for layer in qwen.model.layers:
        for m in (layer.self_attn.q_proj, layer.self_attn.k_proj, layer.self_attn.v_proj):
            m.bias.normal_(0, 0.1)
    for layer in llama.model.layers:
        layer.input_layernorm.weight.normal_(1, 0.1)
    for b in list(t5.encoder.block) + list(umt5.encoder.block):
        b.layer[0].layer_norm.weight.normal_(1, 0.1)
    for n, p in list(clip.named_parameters()) + list(llava.named_parameters()):
        if "norm" in n or ("projector" in n and n.endswith("bias")):
            p.normal_(1 if n.endswith("weight") else 0, 0.1)
    for b in gpt2.transformer.h:
        b.attn.c_attn.bias.normal_(0, 0.1)
save(llama, "llama")
save(qwen, "qwen2")
save(t5, "t5")
save(umt5, "umt5")
qb = tf.Qwen2ForCausalLM(qcfg).to(torch.bfloat16)
qb.load_state_dict(qwen.state_dict())
save(qb, "qwen2_bf16", max_shard_size="20KB")
qh = tf.Qwen2ForCausalLM(qcfg).to(torch.float16)
qh.load_state_dict(qwen.state_dict())
save(qh, "qwen2_f16")
save(gpt2, "gpt2")
save(clip, "clip")
save(llava, "llava")

with open(os.path.join(out, "pub.txt"), "w") as f:
    for name, count in published.make(os.path.join(out, "pub")):
        f.write(f"{name} {count}\n")


# ---- bad inputs ----
def copy(src, dst):
    dst = os.path.join(out, dst)
    shutil.copytree(os.path.join(out, src), dst)
    return dst


def cfg(src, dst, edit):
    p = os.path.join(copy(src, dst), "config.json")
    c = json.load(open(p))
    edit(c)
    json.dump(c, open(p, "w"))


cfg("qwen2", "b_arch", lambda c: c.update(architectures=["MistralForCausalLM"]))
cfg("qwen2", "b_rope", lambda c: c.update(rope_scaling={"type": "linear", "factor": 2.0}))
cfg("qwen2", "b_slide", lambda c: c.update(use_sliding_window=True))
cfg("llama", "b_bias", lambda c: c.update(attention_bias=True))
cfg("llama", "b_hd", lambda c: c.update(head_dim=16))
cfg("t5", "b_relu", lambda c: [c.pop(k, None) for k in ("feed_forward_proj", "dense_act_fn",
                                                          "is_gated_act")])
cfg("qwen2", "b_key", lambda c: c.update(attn_logit_softcapping=50.0))
cfg("llava", "b_nested", lambda c: c["text_config"].update(rope_scaling={"type": "linear",
                                                                        "factor": 2.0}))
cfg("llava", "b_feat", lambda c: c.update(vision_feature_layer=-3))
os.remove(os.path.join(copy("qwen2_bf16", "b_absent"), "model-00002-of-00003.safetensors"))
p = os.path.join(copy("qwen2_bf16", "b_where"), "model.safetensors.index.json")
x = json.load(open(p))
k = next(k for k, f in x["weight_map"].items() if f.startswith("model-00001"))
x["weight_map"][k] = "model-00003-of-00003.safetensors"
json.dump(x, open(p, "w"))
p = os.path.join(copy("qwen2_bf16", "b_trunc"), "model-00003-of-00003.safetensors")
os.truncate(p, os.path.getsize(p) - 6)


def header(dst, edit):  # model.safetensors' header rewritten in place, the same length
    p = os.path.join(copy("qwen2", dst), "model.safetensors")
    b = open(p, "rb").read()
    n = struct.unpack("<Q", b[:8])[0]
    h = json.loads(b[8:8 + n])
    edit(h)
    s = json.dumps(h, separators=(",", ":")).encode()
    assert len(s) <= n
    open(p, "wb").write(b[:8] + s + b" " * (n - len(s)) + b[8 + n:])


def lie(h):  # a tensor 4 bytes longer than its shape
    a, e = h["model.norm.weight"]["data_offsets"]
    h["model.norm.weight"]["data_offsets"] = [a, e + 4]


def overlap(h):  # the third tensor moved 4 bytes back, over the second
    ks = sorted((v["data_offsets"][0], k) for k, v in h.items() if k != "__metadata__")
    k = ks[2][1]
    h[k]["data_offsets"] = [x - 4 for x in h[k]["data_offsets"]]


header("b_lie", lie)
header("b_overlap", overlap)


def tensors(dst, edit, src="qwen2"):
    p = os.path.join(copy(src, dst), "model.safetensors")
    t = load_file(p)
    edit(t)
    save_file(t, p, {"format": "pt"})


tensors("b_missing", lambda t: t.pop("model.layers.1.self_attn.k_proj.bias"))
tensors("b_extra", lambda t: t.update({"model.layers.0.self_attn.rotary.scale": torch.ones(4)}))
tensors("b_shape", lambda t: t.update({"model.layers.0.mlp.up_proj.weight": torch.zeros(48, 32)}))
tensors("b_i32", lambda t: t.update({"model.norm.weight": torch.zeros(32, dtype=torch.int32)}))
tensors("b_tie", lambda t: t.update({"lm_head.weight": t["model.embed_tokens.weight"] + 1}))
tensors("b_tie_ok", lambda t: t.update({"lm_head.weight": t["model.embed_tokens.weight"].clone()}))
