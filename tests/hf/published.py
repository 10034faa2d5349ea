"""Published configurations as Hugging Face directories without weights:
config.json with the published values and a sparse model.safetensors whose
header lists every parameter of transformers' model (built on the meta
device: accelerate.init_empty_weights) in bf16, the data area a hole. mmc
import checks every header against the model it writes; the parameter
count is transformers' (unique parameters: a tied head once).
  published.py OUT  -> OUT/<name>/ and prints "<name> <count>" per line
(make_tiny.py calls make(): one Python start for the test)"""
import json
import os
import struct
import sys

import accelerate
import transformers as tf

PUBLISHED = {
    # Qwen/Qwen2-0.5B config.json
    "qwen2_0_5b": {
        "architectures": ["Qwen2ForCausalLM"], "attention_dropout": 0.0, "bos_token_id": 151643,
        "eos_token_id": 151643, "hidden_act": "silu", "hidden_size": 896,
        "initializer_range": 0.02, "intermediate_size": 4864, "max_position_embeddings": 131072,
        "max_window_layers": 24, "model_type": "qwen2", "num_attention_heads": 14,
        "num_hidden_layers": 24, "num_key_value_heads": 2, "rms_norm_eps": 1e-06,
        "rope_theta": 1000000.0, "sliding_window": 131072, "tie_word_embeddings": True,
        "torch_dtype": "bfloat16", "transformers_version": "4.40.1", "use_cache": True,
        "use_sliding_window": False, "vocab_size": 151936},
    # meta-llama/Llama-2-7b-hf config.json
    "llama_2_7b": {
        "_name_or_path": "meta-llama/Llama-2-7b-hf", "architectures": ["LlamaForCausalLM"],
        "bos_token_id": 1, "eos_token_id": 2, "hidden_act": "silu", "hidden_size": 4096,
        "initializer_range": 0.02, "intermediate_size": 11008, "max_position_embeddings": 4096,
        "model_type": "llama", "num_attention_heads": 32, "num_hidden_layers": 32,
        "num_key_value_heads": 32, "pretraining_tp": 1, "rms_norm_eps": 1e-05,
        "rope_scaling": None, "tie_word_embeddings": False, "torch_dtype": "float16",
        "transformers_version": "4.31.0.dev0", "use_cache": True, "vocab_size": 32000},
    # openai/clip-vit-large-patch14-336 config.json: its vision_config, as CLIPVisionModel
    "clip_vit_l_14_336": {
        "architectures": ["CLIPVisionModel"], "attention_dropout": 0.0, "dropout": 0.0,
        "hidden_act": "quick_gelu", "hidden_size": 1024, "image_size": 336,
        "initializer_factor": 1.0, "initializer_range": 0.02, "intermediate_size": 4096,
        "layer_norm_eps": 1e-05, "model_type": "clip_vision_model", "num_attention_heads": 16,
        "num_channels": 3, "num_hidden_layers": 24, "patch_size": 14, "projection_dim": 768,
        "torch_dtype": "float32"},
    # google/mt5-xxl config.json, its encoder (architectures: MT5EncoderModel)
    "mt5_xxl_encoder": {
        "architectures": ["MT5EncoderModel"], "d_ff": 10240, "d_kv": 64, "d_model": 4096,
        "decoder_start_token_id": 0, "dropout_rate": 0.1, "eos_token_id": 1,
        "feed_forward_proj": "gated-gelu", "initializer_factor": 1.0,
        "is_encoder_decoder": True, "layer_norm_epsilon": 1e-06, "model_type": "mt5",
        "num_decoder_layers": 24, "num_heads": 64, "num_layers": 24, "output_past": True,
        "pad_token_id": 0, "relative_attention_num_buckets": 32, "tie_word_embeddings": False,
        "tokenizer_class": "T5Tokenizer", "vocab_size": 250112},
    # llava-hf/llava-1.5-7b-hf config.json (CLIP ViT-L/14-336 + Vicuna-7B, the rest defaults)
    "llava_1_5_7b": {
        "architectures": ["LlavaForConditionalGeneration"], "ignore_index": -100,
        "image_token_index": 32000, "model_type": "llava", "pad_token_id": 32001,
        "projector_hidden_act": "gelu",
        "text_config": {
            "_name_or_path": "lmsys/vicuna-7b-v1.5", "architectures": ["LlamaForCausalLM"],
            "max_position_embeddings": 4096, "model_type": "llama", "rms_norm_eps": 1e-05,
            "torch_dtype": "float16", "vocab_size": 32064},
        "tie_word_embeddings": False, "torch_dtype": "float16",
        "transformers_version": "4.36.0.dev0",
        "vision_config": {
            "hidden_size": 1024, "image_size": 336, "intermediate_size": 4096,
            "model_type": "clip_vision_model", "num_attention_heads": 16,
            "num_hidden_layers": 24, "patch_size": 14, "projection_dim": 768,
            "vocab_size": 32000},
        "vision_feature_layer": -2, "vision_feature_select_strategy": "default",
        "vocab_size": 32064},
}


def make(out):
    """The directories; returns [(name, transformers' count)]."""
    counts = []
    for name, cfg in PUBLISHED.items():
        d = os.path.join(out, name)
        os.makedirs(d, exist_ok=True)
        json.dump(cfg, open(os.path.join(d, "config.json"), "w"), indent=2)
        config = tf.AutoConfig.from_pretrained(d)
        with accelerate.init_empty_weights():
            model = getattr(tf, cfg["architectures"][0])(config)
        model.tie_weights()  # under init_empty_weights the tie is not made at construction
        header, at, count = {}, 0, 0
        for k, p in model.named_parameters():  # a tied parameter once
            n = p.numel()
            header[k] = {"dtype": "BF16", "shape": list(p.shape), "data_offsets": [at, at + 2 * n]}
            at += 2 * n
            count += n
        h = json.dumps(header).encode()
        h += b" " * (-len(h) % 8)
        with open(os.path.join(d, "model.safetensors"), "wb") as f:
            f.write(struct.pack("<Q", len(h)) + h)
            f.truncate(8 + len(h) + at)  # a hole: no weights
        counts.append((name, count))
    return counts


if __name__ == "__main__":
    for name, count in make(sys.argv[1]):
        print(name, count)
