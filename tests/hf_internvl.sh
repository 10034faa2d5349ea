#!/usr/bin/env bash
# hf_internvl: InternVL checkpoints in and out (runtime/io/mmrt_hf_map.def's
# InternVLForConditionalGeneration and InternVLChatModel rows, mmc import, the
# trainer's --init-from and --save-hf) against committed references
# (tests/hf/internvl/, made by tests/hf/make_internvl.py with transformers
# 4.52 in /var/cache/mmc-venv-ivl, a venv too big for the test command):
# 1. both layouts of the same tiny random weights (transformers' own, and
#    InternVL2's with the fused qkv) import into the same model, every
#    parameter from a tensor; and transformers' layout with a Llama (other
#    weights, its own reference) goes through 1-4 too;
# 2. the trainer's step-1 batch and test batch are the committed ones (byte
#    for byte), its step-1 loss is transformers' within 1e-5 relative and its
#    test-batch logits within 1e-4 absolute;
# 3. --save-hf of the loaded weights (no step) rewrites the fixture's
#    model.safetensors byte for byte; after 5 AdamW steps the export holds
#    the fixture's names, shapes and dtypes, every tensor moved, and the two
#    layouts' exports are the same weights (qkv = the rows of q, k, v);
# 3b. both layouts' 5 steps under tp = 2 and pp = 2 (1F1B, 2 micro-batches;
#    2 mpirun ranks): each step's loss the serial run's (1e-5 relative), the
#    chat layout's step 1 under tp = 2 the reference's, and each --save-hf
#    directory the serial one's files, tensor names, shapes and dtypes, values
#    within 1e-5 of the export's largest (tests/hf/same_tensors.py);
# 4. with /var/cache/mmc-venv-ivl present: transformers loads each 5-step
#    export, serial, tp and pp (no missing or unexpected key) and gives mmc's
#    serially trained logits;
# 4b. InternVL3-1B's dimensions: mmc's parameter count is transformers';
# 5. bad input, each with its message.
. "$MMC_SOURCE_DIR/tests/tools/lib.sh"
set -u
PY=${MMC_HF_PYTHON:-/var/cache/mmc-venv-hf/bin/python}
IVL=${MMC_IVL_PYTHON:-/var/cache/mmc-venv-ivl/bin/python}
H="$MMC_SOURCE_DIR/tests/hf"
F="$H/internvl"
if [ -z "${MMC_HF_PYTHON:-}" ] && ! bash "$MMC_SOURCE_DIR/tools/test_venvs.sh" hf; then
  echo "FAIL: cannot make the test venv (tools/test_venvs.sh hf)"
  exit 1
fi
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
cd "$T"
fail=0 npass=0 nfail=0 reload=()
run=(--steps 5 --eval-batches 1 --quiet) # the 5-step runs, serial and parallel
ok() { echo "PASS: $1"; npass=$((npass + 1)); }
bad() { echo "FAIL: $1"; nfail=$((nfail + 1)); fail=1; }
expect() { # expect CODE REGEX CMD...: exit CODE and stderr matching REGEX
  local code=$1 re=$2
  shift 2
  "$@" > out.txt 2> err.txt
  local rc=$?
  if [ $rc -eq "$code" ] && grep -Eq -- "$re" err.txt; then ok "$(echo "$re" | head -c 90)"
  else bad "$* -> exit $rc, expected $code and /$re/: $(head -c 400 err.txt)"; fi
}
check() { # check WHAT ARGS...: internvl_check.py's PASS / FAIL lines counted (prefixed $pre)
  "$PY" "$H/internvl_check.py" "$@" 2>&1 | sed "s/^\(PASS\|FAIL\): /\1: ${pre:-}/" > chk.txt
  cat chk.txt
  npass=$((npass + $(grep -c ^PASS chk.txt)))
  grep -q ^FAIL chk.txt || ! grep -q ^PASS chk.txt && { nfail=$((nfail + 1)); fail=1; }
}
export PYTHONWARNINGS=ignore TRANSFORMERS_VERBOSITY=error HF_HUB_OFFLINE=1

for c in ivl:HfInternVL chat:HfInternVLChat ivl_llama:HfInternVL; do
  d=${c%%:*} model=${c#*:} ref="$F/ref.safetensors"
  [ $d = ivl_llama ] && ref="$F/ref_ivl_llama.safetensors" # other weights, a Llama
  [ "$SAN" = 1 ] && [ $d != chat ] && continue # the slow build: the chat layout (its fused qkv)
  # ---- 1. import ----
  if ! "$MMC" import "$F/$d" -o hf_$d.mm 2> imp_$d.err; then bad "import $d: $(cat imp_$d.err)"; continue; fi
  grep -q "^model $model {" hf_$d.mm && grep -q "give \([0-9]*\) of model $model's \1 parameters" imp_$d.err &&
    ok "import $d: model $model, every parameter from a tensor ($(grep -o '[0-9]* tensors give' imp_$d.err))" ||
    bad "import $d: $(cat imp_$d.err)"
  "$MMC" compile hf_$d.mm --model $model --set B=2 --set T=16 -o $d.tr > /dev/null 2> cc_$d.err ||
    { bad "compile $d: $(head -5 cc_$d.err)"; continue; }
  # ---- 2. parity with the committed reference ----
  ./$d.tr --steps 1 --init-from "$F/$d" --dump-inputs in_$d --log $d.jsonl --quiet > /dev/null 2> $d.err ||
    { bad "train $d: $(cat $d.err)"; continue; }
  ./$d.tr --steps 0 --init-from "$F/$d" --dump-logits $d.logits --dump-inputs ev_$d --eval-batches 1 --quiet > /dev/null 2>&1 ||
    { bad "--dump-logits $d"; continue; }
  cmp -s in_$d/step-000001.safetensors "$F/batch.safetensors" && cmp -s ev_$d/eval.safetensors "$F/eval.safetensors" &&
    ok "$d: the trainer's step-1 batch and test batch are the reference's, byte for byte" ||
    bad "$d: the trainer's batches are not the committed ones (the caption task changed? remake the fixtures)"
  pre="$d: " check parity "$ref" $d.jsonl $d.logits
  # ---- 3. export ----
  ./$d.tr --steps 0 --init-from "$F/$d" --save-hf rt_$d --quiet > /dev/null 2> rt_$d.err &&
    cmp -s rt_$d/model.safetensors "$F/$d/model.safetensors" && cmp -s rt_$d/config.json "$F/$d/config.json" &&
    ok "$d: --save-hf of the loaded weights: model.safetensors and config.json byte for byte the fixture's" ||
    bad "$d: --save-hf round trip: $(cat rt_$d.err; ls rt_$d)"
  ./$d.tr "${run[@]}" --init-from "$F/$d" --save-hf ex_$d --dump-logits ex_$d.logits --log ex_$d.jsonl > /dev/null 2> ex_$d.err ||
    { bad "--save-hf $d: $(cat ex_$d.err)"; continue; }
  check export "$F/$d" ex_$d
  [ $d = chat ] && { [ -s ex_chat/added_tokens.json ] && ok "chat: added_tokens.json copied through" || bad "chat: no added_tokens.json"; }
  reload+=(ex_$d ex_$d.logits "$F/eval.safetensors")
done
# ---- 3b. tp = 2 and pp = 2 (1F1B, 2 micro-batches): the serial run's 5 losses and export ----
# (tp: the fused qkv split by heads, the all-heads q/k norm over the split; the chat layout's
# step 1 is also the reference's). Under the sanitizers: the chat layout's pp = 2 only.
MPIRUN=(timeout 300 mpirun --oversubscribe -x OMP_NUM_THREADS -x OMP_WAIT_POLICY -x LSAN_OPTIONS -np 2)
export OMP_NUM_THREADS=1 OMP_WAIT_POLICY=passive
cells="ivl:tp ivl:pp chat:tp chat:pp"
[ "$SAN" = 1 ] && cells="chat:pp"
for c in $cells; do
  d=${c%%:*} p=${c#*:}
  [ -s ex_$d.jsonl ] || continue # its serial run failed above
  plan=(--tp 2); [ $p = pp ] && plan=(--pp 2 --micro-batches 2)
  model=$(sed -n 's/^model \(.*\) {/\1/p' hf_$d.mm)
  if ! "$MMC" compile hf_$d.mm --model "$model" --set B=2 --set T=16 "${plan[@]}" -o $d.$p > /dev/null 2> $d.$p.cc; then
    bad "$d: compile ${plan[*]}: $(head -3 $d.$p.cc)"
    continue
  fi
  if ! "${MPIRUN[@]}" ./$d.$p "${run[@]}" --init-from "$F/$d" --save-hf ex_$d.$p --log ex_$d.$p.jsonl > $d.$p.out 2>&1; then
    bad "$d ${plan[*]}: $(tail -3 $d.$p.out)"
    continue
  fi
  w=$(/usr/bin/python3 "$H/same_losses.py" ex_$d.jsonl ex_$d.$p.jsonl) &&
    ok "$d ${plan[*]}: 5 steps' losses the serial run's, relative $w" || bad "$d ${plan[*]}: losses differ from serial: $w"
  [ $d.$p = chat.tp ] && pre="tp = 2: " check parity "$F/ref.safetensors" ex_chat.tp.jsonl -
  /usr/bin/python3 "$H/same_tensors.py" 1e-5 ex_$d "$d ${plan[*]}=ex_$d.$p" > st.txt 2>&1
  cat st.txt
  grep -q ^PASS st.txt && npass=$((npass + 1)) || bad "$d ${plan[*]}: the export differs from serial"
  reload+=(ex_$d.$p ex_$d.logits "$F/eval.safetensors") # transformers on it: the serial run's logits
done

# ---- 4. transformers reloads the exports (one Python start) ----
if [ -x "$IVL" ] && [ "$SAN" = 0 ]; then
  "$IVL" "$H/make_internvl.py" check "${reload[@]}" > tf.txt 2>&1
  grep -E "^(PASS|FAIL)" tf.txt || tail -3 tf.txt
  [ "$(grep -c ^PASS tf.txt)" = $((${#reload[@]} / 3)) ] && npass=$((npass + ${#reload[@]} / 3)) || bad "transformers on the exports"
fi
if [ "$SAN" = 0 ]; then
  diff <(sed '1,3d;/^model /d' hf_ivl.mm) <(sed '1,3d;/^model /d' hf_chat.mm) > /dev/null &&
    ok "both layouts import as the same model" || bad "the layouts' models differ: $(diff hf_ivl.mm hf_chat.mm | head)"
  check layouts ex_ivl ex_chat
fi

# ---- 4b. a published size: InternVL3-1B's dimensions in transformers' layout; the header of
# transformers' parameters (tests/hf/internvl/internvl3_1b.json, bf16, the data a hole) ----
cp -r "$F/internvl3_1b" pub
/usr/bin/python3 -c '
import json, struct, sys
h, at = {}, 0
for name, shape in json.load(open(sys.argv[1]))["params"]:
    n = 1
    for d in shape:
        n *= d
    h[name] = {"dtype": "BF16", "shape": shape, "data_offsets": [at, at + 2 * n]}
    at += 2 * n
b = json.dumps(h).encode()
b += b" " * (-len(b) % 8)
with open(sys.argv[2], "wb") as f:
    f.write(struct.pack("<Q", len(b)) + b)
    f.truncate(8 + len(b) + at)' "$F/internvl3_1b.json" pub/model.safetensors
want=$(/usr/bin/python3 -c 'import json, sys; print(json.load(open(sys.argv[1]))["count"])' "$F/internvl3_1b.json")
if "$MMC" import pub -o pub.mm 2> pub.err; then
  got=$("$MMC" stats pub.mm --model HfInternVL --json | /usr/bin/python3 -c 'import json,sys; print(json.load(sys.stdin)["total_params"])')
  [ "$got" = "$want" ] && ok "InternVL3-1B's dimensions: mmc import + stats $got parameters = transformers' $want" ||
    bad "InternVL3-1B: mmc $got, transformers $want"
else bad "import InternVL3-1B: $(cat pub.err)"; fi

# ---- 5. bad input ----
edit() { # edit SRC DST PYTHON: a copy of fixture SRC whose config c (or directory d) PYTHON edits
  cp -r "$F/$1" "$2"
  "$PY" -c "import json, os, sys; d = sys.argv[1]; p = d + '/config.json'; c = json.load(open(p)); $3; json.dump(c, open(p, 'w'))" "$2"
}
edit chat b_tok "os.remove(d + '/added_tokens.json')"
expect 1 "b_tok/added_tokens.json: cannot open" "$MMC" import b_tok -o b.mm
[ ! -e b.mm ] && ok "a failed import writes nothing" || bad "b.mm written"
edit chat b_ps "c.pop('ps_version')"
expect 1 'b_ps/config.json: ps_version is "v1" \(the default: the key is absent\); mmc.s PixelShuffleMLP supports "v2" only' "$MMC" import b_ps
edit chat b_rms "c['vision_config']['norm_type'] = 'rms_norm'"
expect 1 'vision_config.norm_type is "rms_norm"; mmc.s InternViT supports "layer_norm" only' "$MMC" import b_rms
edit chat b_force "c['force_image_size'] = 56"
expect 1 "b_force/config.json: force_image_size 56 differs from vision_config.image_size 28" "$MMC" import b_force
edit chat b_llm "c['llm_config'].update(architectures=['InternLM2ForCausalLM'], model_type='internlm2')"
expect 1 'llm_config.model_type is "internlm2"; mmc maps "qwen2" or "llama" only' "$MMC" import b_llm
edit ivl b_side "c['vision_config']['image_size'] = [28, 14]"
expect 1 "vision_config.image_size is \[28,14\]; mmc's InternViT supports equal sides only" "$MMC" import b_side
edit ivl b_text "c['text_config']['model_type'] = 'internlm2'"
expect 1 'b_text/config.json: text_config.model_type is "internlm2"; mmc maps "qwen2" or "llama" only' "$MMC" import b_text
edit ivl b_layer "c['vision_feature_layer'] = -2"
expect 1 "vision_feature_layer is -2; mmc's PixelShuffleMLP supports -1 only" "$MMC" import b_layer
echo "$npass passed, $nfail failed"
exit $fail
