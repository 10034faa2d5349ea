#!/usr/bin/env bash
# hf_import: Hugging Face directories (runtime/io/mmrt_hf.c, the mapping
# runtime/io/mmrt_hf_map.def, `mmc import`, `mmc check --init-from`, the
# trainer's --init-from HF_DIR), against transformers (a test reference in
# the venv tools/test_venvs.sh makes, never a dependency of mmc):
# 1. tiny random GPT2LMHeadModel, LlamaForCausalLM, Qwen2ForCausalLM (tied,
#    random q/k/v biases), the same Qwen2 in bf16 in 3 shards and in fp16, a
#    T5EncoderModel, a UMT5EncoderModel (a relative bias per layer), a
#    CLIPVisionModel (quick-GELU ViT on the classification
#    task's images), a LlavaForConditionalGeneration (CLIP, projector, Llama on
#    the caption task; the loss only, and the export's loss at step 6 of a
#    6-step run; tests/hf/make_tiny.py): mmc import, compile, the first
#    step's loss on the trainer's batch within 1e-5 relative of
#    transformers', its logits within 1e-4 absolute (tests/hf/parity.py); the bf16 shards under tp = 2 give
#    the serial loss (1e-6 relative: the row-parallel sums' order);
# 2. published configurations (tests/hf/published.py: config.json values and
#    a weightless header of transformers' parameters): mmc import checks
#    every header and `mmc stats` counts transformers' parameters;
# 3. bad input, each with its message: an unknown architecture, config keys
#    that change the math (rope_scaling, sliding window, Llama's attention
#    bias, a gated T5 missing) or that mmc does not know, an index naming an
#    absent shard or the wrong shard, a header whose offsets lie or overlap,
#    a truncated shard, a missing, extra, misshapen or I32 tensor, a tied
#    head that differs; nothing written by a failed import;
# 4. --save-hf after 5 AdamW steps (serial, and tp = 2 gathered on rank 0):
#    transformers loads the directory with no missing or unexpected key and
#    its logits are mmc's trained ones (1e-4); --save-hf without a Hugging
#    Face --init-from refused before training;
# 4b. the evaluator's --weights HF_DIR (the generator's and evaluator's
#    loader, runtime/model/mmrt_model.c): the captions of the same weights saved
#    under mmc's names;
# 5. --init-from of mmc-named files: the parameters left at init named, a
#    tensor that matches no parameter refused, SUB= loading a sub-model.
. "$MMC_SOURCE_DIR/tests/tools/lib.sh"
set -u
PY=${MMC_HF_PYTHON:-/var/cache/mmc-venv-hf/bin/python}
H="$MMC_SOURCE_DIR/tests/hf"
if [ -z "${MMC_HF_PYTHON:-}" ] && ! bash "$MMC_SOURCE_DIR/tools/test_venvs.sh" hf; then
  echo "FAIL: cannot make the transformers venv (tools/test_venvs.sh hf: needs python3-venv, python3-torch and PyPI)"
  exit 1
fi
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
cd "$T"
fail=0 npass=0 nfail=0
ok() { echo "PASS: $1"; npass=$((npass + 1)); }
bad() { echo "FAIL: $1"; nfail=$((nfail + 1)); fail=1; }
# expect CODE REGEX CMD...: exit CODE and stderr matching REGEX
expect() {
  local code=$1 re=$2
  shift 2
  "$@" > out.txt 2> err.txt
  local rc=$?
  if [ $rc -eq "$code" ] && grep -Eq -- "$re" err.txt; then ok "$(echo "$re" | head -c 90)"
  else bad "$* -> exit $rc, expected $code and /$re/: $(head -c 400 err.txt)"; fi
}
export PYTHONWARNINGS=ignore TRANSFORMERS_VERBOSITY=error HF_HUB_OFFLINE=1
"$PY" "$H/make_tiny.py" . > make.log 2>&1 || { cat make.log; exit 1; }

# ---- 1. parity ----
tr() {
  local t=(--set T=16); grep -q "let T =" "$1" || t=() # a vision tower has no text length
  "$MMC" compile "$1" --model "$2" --set B=2 "${t[@]}" -o "$3" "${@:4}"
}
triples=() want=0 # PASS lines parity.py should print
for c in gpt2:HfGPT2 llama:HfLlama qwen2:HfQwen2 qwen2_bf16:HfQwen2 qwen2_f16:HfQwen2 t5:HfT5Encoder umt5:HfUMT5Encoder clip:HfCLIPVision llava:HfLlava; do
  d=${c%%:*} model=${c#*:}
  [ "$SAN" = 1 ] && [ $d != qwen2 ] && continue # the slow build: one (the tied, biased Qwen2)
  if ! "$MMC" import $d -o hf_$d.mm 2> imp_$d.err; then bad "import $d: $(cat imp_$d.err)"; continue; fi
  grep -q "^model $model {" hf_$d.mm && grep -q "give \([0-9]*\) of model $model's \1 parameters" imp_$d.err &&
    ok "import $d: model $model, every parameter from a tensor" || bad "import $d: $(cat imp_$d.err)"
  case $d in qwen2_*) cp qwen2.tr $d.tr ;; *) tr hf_$d.mm $model $d.tr || { bad "compile $d"; continue; } ;; esac
  save=(); [ $d = qwen2 ] && save=(--save-weights w.st)
  ./$d.tr --steps 1 --init-from $d --dump-inputs in_$d --log $d.jsonl --eval-batches 1 "${save[@]}" --quiet > $d.out 2> $d.err ||
    { bad "train $d: $(cat $d.err)"; continue; }
  if [ $d = llava ]; then
    # LLaVA: the loss (the caption task's test batch is not reproduced here); the export: a
    # 6-step run's step-6 loss (the weights after 5 steps) from the directory --save-hf wrote
    # after 5 steps of the same run
    triples+=($d in_$d/step-000001.safetensors $d.jsonl -); want=$((want + 1))
    ./$d.tr --steps 5 --init-from $d --save-hf ex_$d --quiet > /dev/null 2> ex_$d.err &&
      ./$d.tr --steps 6 --init-from $d --dump-inputs in6_$d --log ex_$d.jsonl --quiet > /dev/null 2>&1 ||
      { bad "--save-hf $d: $(cat ex_$d.err)"; continue; }
    triples+=(ex_$d in6_$d/step-000006.safetensors ex_$d.jsonl -); want=$((want + 1))
    continue
  fi
  ./$d.tr --steps 1 --lr 1e-30 --init-from $d --dump-logits $d.logits --eval-batches 1 --quiet > /dev/null 2>&1 ||
    { bad "--dump-logits $d"; continue; }
  triples+=($d in_$d/step-000001.safetensors $d.jsonl $d.logits); want=$((want + 2))
  case $d in qwen2_f16) continue ;; esac # export: fp32 (the bf16 model's is its tp = 2 reference)
  # --save-hf after 5 AdamW steps: transformers loads it (no missing or unexpected key) and
  # gives mmc's trained logits
  ./$d.tr --steps 5 --init-from $d --save-hf ex_$d --dump-logits ex_$d.logits --eval-batches 1 --quiet > /dev/null 2> ex_$d.err ||
    { bad "--save-hf $d: $(cat ex_$d.err)"; continue; }
  cmp -s $d.logits ex_$d.logits && bad "$d: 5 steps changed no logit"
  triples+=(ex_$d - - ex_$d.logits); want=$((want + 1))
done
"$PY" "$H/parity.py" 1e-5 "${triples[@]}" > parity.txt 2> parity.err; cat parity.txt
npass=$((npass + $(grep -c ^PASS parity.txt))); nf=$(grep -c ^FAIL parity.txt)
[ "$nf" = 0 ] && [ "$(grep -c ^PASS parity.txt)" = $want ] || { bad "parity: $(tail -3 parity.err)"; }
grep -q "tied = true" hf_qwen2.mm && ! grep -q "head.weight" qwen2.err && ok "Qwen2: the tie kept (tied = true, no head)" || bad "Qwen2 tie"
ls qwen2_bf16/model-0000?-of-00003.safetensors > /dev/null 2>&1 && ok "bf16 checkpoint in 3 shards" || bad "not 3 shards: $(ls qwen2_bf16)"
if [ "$SAN" = 0 ]; then
  tr hf_qwen2_bf16.mm HfQwen2 q2.tr --tp 2 &&
    mpirun -np 2 --oversubscribe ./q2.tr --steps 1 --init-from qwen2_bf16 --log q2.jsonl --eval-batches 1 --quiet > q2.out 2>&1
  # --save-hf under tp = 2 (gathered on rank 0) after 5 steps: the serial run's trained logits
  mpirun -np 2 --oversubscribe ./q2.tr --steps 5 --init-from qwen2_bf16 --save-hf ex_tp2 --eval-batches 1 --quiet > q2x.out 2>&1 ||
    bad "--save-hf under tp = 2: $(tail -3 q2x.out)"
  "$PY" "$H/parity.py" 1e-5 ex_tp2 - - ex_qwen2_bf16.logits 2> /dev/null | sed 's/^PASS: /PASS: tp = 2 export: /;s/^FAIL: /FAIL: tp = 2 export: /' > tp2.txt
  cat tp2.txt; grep -q ^PASS tp2.txt && npass=$((npass + 1)) || bad "tp = 2 export"
  a=$(grep -o '"step": 1, "loss": [0-9.e-]*' qwen2_bf16.jsonl | grep -o '[0-9.e-]*$')
  b=$(grep -o '"step": 1, "loss": [0-9.e-]*' q2.jsonl | grep -o '[0-9.e-]*$')
  /usr/bin/python3 -c "import sys; a, b = float(sys.argv[1]), float(sys.argv[2]); sys.exit(abs(a - b) > 1e-6 * a)" "$a" "$b" 2> /dev/null &&
    ok "bf16 shards under tp = 2 (each rank its slice): first loss $b, serial $a (1e-6 relative)" ||
    bad "tp = 2: '$b' against serial '$a' $(tail -3 q2.out)"
fi

# ---- 2. published configurations ----
while read -r name count; do
  if "$MMC" import pub/$name -o pub/$name.mm 2> pub_$name.err; then
    model=$(sed -n 's/^model \([A-Za-z0-9_]*\) {/\1/p' pub/$name.mm)
    got=$("$MMC" stats pub/$name.mm --model "$model" --json | /usr/bin/python3 -c 'import json,sys; print(json.load(sys.stdin)["total_params"])')
    [ "$got" = "$count" ] && ok "$name: mmc import + stats $got parameters = transformers' $count" ||
      bad "$name: mmc $got, transformers $count"
  else bad "import $name: $(cat pub_$name.err)"; fi
done < pub.txt

# ---- 3. bad input (the directories: tests/hf/make_tiny.py) ----
expect 1 "b_arch/config.json: architecture 'MistralForCausalLM' is not one mmc maps \(it maps GPT2LMHeadModel, " "$MMC" import b_arch -o b.mm
[ ! -e b.mm ] && ok "a failed import writes nothing" || bad "b.mm written"
expect 1 'b_rope/config.json: rope_scaling is \{"type":"linear","factor":2.0\}; mmc.s LLM supports null only' "$MMC" import b_rope
expect 1 "use_sliding_window is true; mmc's LLM supports false only" "$MMC" import b_slide
expect 1 "attention_bias is true; mmc's LLM supports false only" "$MMC" import b_bias
expect 1 "head_dim is 16; mmc's LLM supports only hidden_size / num_attention_heads" "$MMC" import b_hd
expect 1 'feed_forward_proj is "relu" \(the default: the key is absent\); mmc.s T5Encoder supports "gated-gelu" only' "$MMC" import b_relu
expect 1 "key 'attn_logit_softcapping' is not known to mmc's mapping of Qwen2ForCausalLM" "$MMC" import b_key
expect 1 'b_nested/config.json: text_config.rope_scaling is \{"type":"linear","factor":2.0\}; mmc.s LLM supports null only' "$MMC" import b_nested
expect 1 "b_feat/config.json: vision_feature_layer -3: mmc takes the output of one of the tower's 2 layers" "$MMC" import b_feat
expect 1 "b_absent/model.safetensors.index.json names model-00002-of-00003.safetensors for tensor '[^']*': .*cannot open" "$MMC" import b_absent
expect 1 "weight_map puts tensor '[^']*' in model-00003-of-00003.safetensors, which does not hold it" "$MMC" import b_where
expect 1 "b_trunc/model-00003-of-00003.safetensors: tensor '[^']*': data_offsets .* extend past the [0-9]+-byte data area \(file truncated\?\)" "$MMC" import b_trunc
expect 1 "b_lie/model.safetensors: tensor 'model.norm.weight': F32 \[32\] needs 128 bytes, data_offsets \[[0-9]+, [0-9]+\) span 132" "$MMC" import b_lie
expect 1 "b_overlap/model.safetensors: tensor '[^']*' \[[0-9]+, [0-9]+\) overlaps tensor" "$MMC" import b_overlap
expect 1 "b_missing: no tensor for model parameter 'llm.blocks.1.attn.k_proj.bias' \[16\]" "$MMC" import b_missing
expect 1 "b_extra/model.safetensors: tensor 'model.layers.0.self_attn.rotary.scale' matches no rule of mmc's Qwen2ForCausalLM mapping" "$MMC" import b_extra
expect 1 "tensor 'model.layers.0.mlp.up_proj.weight' is F32 \[48, 32\]; model parameter 'llm.blocks.0.mlp.up_proj.weight' is \[64, 32\]" "$MMC" import b_shape
expect 1 "tensor 'model.norm.weight' is I32, expected F32, BF16 or F16" "$MMC" import b_i32
[ "$SAN" = 0 ] && expect 1 "b_missing: no tensor for model parameter 'llm.blocks.1.attn.k_proj.bias'" ./qwen2.tr --steps 1 --init-from b_missing --quiet
expect 1 "tensor 'lm_head.weight' differs from 'model.embed_tokens.weight' \(element 0\), to which mmc's Qwen2ForCausalLM ties it" ./qwen2.tr --steps 1 --init-from b_tie --quiet
if [ "$SAN" = 0 ]; then
  ./qwen2.tr --steps 1 --init-from b_tie_ok --log tie.jsonl --quiet > /dev/null 2>&1 &&
    [ "$(grep -o '"step": 1, "loss": [0-9.e-]*' tie.jsonl)" = "$(grep -o '"step": 1, "loss": [0-9.e-]*' qwen2.jsonl)" ] &&
    ok "an equal tied lm_head.weight in the file: used as the tie, the same loss" || bad "tied lm_head.weight present"
fi
# a model of another size: mmc check --init-from names the tensor and both shapes
sed 's/ffn = 64/ffn = 96/' hf_qwen2.mm > other.mm
expect 1 "tensor 'model.layers.0.mlp.[a-z]*_proj.weight' is F32 \[[0-9, ]*\]; model parameter 'llm.blocks.0.mlp.[a-z]*_proj.weight' is \[[0-9, ]*96[0-9, ]*\]" "$MMC" check other.mm --model HfQwen2 --init-from qwen2
expect 0 "give 26 of model HfQwen2's 26 parameters" "$MMC" check hf_qwen2.mm --model HfQwen2 --init-from qwen2

# bf16, in shards of at most 30,000 bytes: the index, every shard bf16, mmc import reads it
# back, and transformers loads it (logits to 1e-2: the weights' bf16 rounding)
./qwen2.tr --steps 5 --init-from qwen2 --save-hf ex_sh --save-hf-dtype bf16 --shard-size 30000 \
  --dump-logits ex_sh.logits --eval-batches 1 --quiet > /dev/null 2> ex_sh.err || bad "--save-hf bf16 shards: $(cat ex_sh.err)"
ns=$(ls ex_sh/model-0000?-of-0000?.safetensors 2> /dev/null | wc -l)
nb=$(grep -c '"dtype":"BF16"' ex_sh/model-0000?-of-0000?.safetensors 2> /dev/null | grep -c ':[1-9]')
[ "$ns" -ge 2 ] && [ "$nb" = "$ns" ] && [ -e ex_sh/model.safetensors.index.json ] &&
  "$MMC" import ex_sh -o rt.mm 2> rt.err && ok "--save-hf bf16 in $ns shards with the index: mmc import reads it back" ||
  bad "--save-hf bf16 shards: $ns shards, $nb in bf16, $(ls ex_sh) $(cat rt.err 2> /dev/null)"
MMC_LOGIT_TOL=1e-2 "$PY" "$H/parity.py" 1e-5 ex_sh - - ex_sh.logits 2> /dev/null > sh.txt; cat sh.txt
grep -q ^PASS sh.txt && npass=$((npass + 1)) || bad "bf16 export"
expect 1 "--save-hf-dtype takes f32 or bf16, not 'f16'" ./qwen2.tr --steps 1 --init-from qwen2 --save-hf x --save-hf-dtype f16
expect 1 "--shard-size goes with --save-hf" ./qwen2.tr --steps 1 --init-from qwen2 --shard-size 100
expect 1 "--save-hf x: needs --init-from a Hugging Face directory" ./qwen2.tr --steps 1 --init-from w.st --save-hf x
[ ! -e x ] && ok "--save-hf refused: nothing written" || bad "x written"

# ---- 4b. the evaluator's --weights HF_DIR: the same captions as from the mmc-named file the
# trainer saves after loading the directory; a directory of another model refused by tensor
if [ "$SAN" = 0 ]; then
  tr hf_llava.mm HfLlava llava.eval --task eval && ./llava.tr --steps 0 --init-from llava --save-weights llava.st --quiet > /dev/null 2>&1 &&
    ./llava.eval --weights llava --limit 8 --ids ev_hf.txt --quiet > ev_hf.out 2> ev_hf.err &&
    ./llava.eval --weights llava.st --limit 8 --ids ev_st.txt --quiet > ev_st.out 2>&1 &&
    [ -s ev_hf.txt ] && cmp -s ev_hf.txt ev_st.txt && cmp -s ev_hf.out ev_st.out &&
    ok "evaluator --weights HF_DIR: the captions of --weights FILE" || bad "evaluator --weights llava: $(cat ev_hf.err)"
  expect 1 "weights clip: clip/model.safetensors: tensor 'vision_model.embeddings.patch_embedding.weight' is F32 \[32, 1, 7, 7\]; model parameter 'vision.patch_embedding.weight' is \[32, 1, 14, 14\]" ./llava.eval --weights clip --limit 2
fi

# ---- 5. --init-from of mmc-named files ----
"$PY" -c '
import numpy as np; from safetensors.numpy import load_file, save_file
t = load_file("w.st"); del t["llm.norm.weight"]; save_file(t, "w_less.st")
t["other.weight"] = np.zeros(3, np.float32); save_file(t, "w_more.st")'
expect 0 "trainer: 1 parameter left at their init: llm.norm.weight" ./qwen2.tr --steps 0 --init-from w_less.st
expect 1 "w_more.st holds tensor 'other.weight' that matches no parameter of model HfQwen2" ./qwen2.tr --steps 0 --init-from w_more.st
expect 0 "trainer: 25 parameters loaded from w_more.st" ./qwen2.tr --steps 0 --init-from llm=w_more.st
echo "$npass passed, $nfail failed"
exit $fail
