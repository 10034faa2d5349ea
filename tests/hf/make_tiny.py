"""Tiny random Hugging Face checkpoints for tests/hf_import.sh, made with
transformers (a test reference, never a dependency of mmc):
  make_tiny.py OUT   -> OUT/gpt2, OUT/llama, OUT/qwen2 (tied), OUT/qwen2_bf16
                        (bf16, 3 shards), OUT/t5 (T5EncoderModel, gated-gelu)"""
import os
import sys

import torch
import transformers as tf

out = sys.argv[1]
torch.manual_seed(0)


def save(model, name, **kw):
    d = os.path.join(out, name)
    model.save_pretrained(d, safe_serialization=True, **kw)
    return d


V = 256  # the pixel task's byte vocabulary
gpt2 = tf.GPT2LMHeadModel(tf.GPT2Config(vocab_size=V, n_positions=64, n_embd=32, n_layer=2, n_head=4))
save(gpt2, "gpt2")
llama = tf.LlamaForCausalLM(tf.LlamaConfig(vocab_size=V, hidden_size=32, intermediate_size=64,
                                           num_hidden_layers=2, num_attention_heads=4,
                                           num_key_value_heads=2, rope_theta=10000.0,
                                           rms_norm_eps=1e-6, max_position_embeddings=128))
save(llama, "llama")
qcfg = tf.Qwen2Config(vocab_size=V, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, rope_theta=1e6,
                      rms_norm_eps=1e-6, tie_word_embeddings=True, max_position_embeddings=128)
qwen = tf.Qwen2ForCausalLM(qcfg)
with torch.no_grad():  # random biases: a dropped one shows
    for layer in qwen.model.layers:
        for m in (layer.self_attn.q_proj, layer.self_attn.k_proj, layer.self_attn.v_proj):
            m.bias.normal_(0, 0.1)
    for layer in llama.model.layers:
        layer.input_layernorm.weight.normal_(1, 0.1)
    save(llama, "llama")
save(qwen, "qwen2")
qb = tf.Qwen2ForCausalLM(qcfg).to(torch.bfloat16)
qb.load_state_dict(qwen.state_dict())
save(qb, "qwen2_bf16", max_shard_size="20KB")
t5 = tf.T5EncoderModel(tf.T5Config(vocab_size=V, d_model=32, d_kv=8, d_ff=64, num_layers=2,
                                    num_heads=4, relative_attention_num_buckets=32,
                                    relative_attention_max_distance=20,
                                    feed_forward_proj="gated-gelu", is_encoder_decoder=False))
with torch.no_grad():
    for b in t5.encoder.block:
        b.layer[0].layer_norm.weight.normal_(1, 0.1)
save(t5, "t5")
