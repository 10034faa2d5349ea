#!/usr/bin/env bash
# hf_parallel: imported Hugging Face models under tp and pp (docs/huggingface.md).
# For tiny random GPT2LMHeadModel, LlamaForCausalLM, Qwen2ForCausalLM (tied
# head), T5EncoderModel, UMT5EncoderModel (a relative bias per layer),
# CLIPVisionModel and LlavaForConditionalGeneration made with transformers
# (tests/hf/make_tiny.py, the venv of tools/test_venvs.sh): `mmc import`,
# then 5 AdamW steps from the same HF weights (--init-from) serially, with
# --tp 2 and with --pp 2 (1F1B, 2 micro-batches of the serial batch) on 2
# mpirun ranks (Qwen2 also with 2 micro-batches on one rank):
# 1. every step's loss of the tp and pp runs equals the serial run's (1e-5
#    relative; tests/hf/same_losses.py);
# 2. --save-hf of each run: transformers loads the tp and pp directories with
#    no missing or unexpected key and their outputs (logits; the encoders'
#    last_hidden_state) equal the serial export's on a fixed input (1e-5 of
#    the largest output: float32 rounding of 5 updates), while the serial
#    export's differ from the imported weights' by more than ten times that
#    (tests/hf/same_export.py).
# The imported models have no clip (no train section): before the fix in
# ir_update_part, every one of them failed to compile under pp (and
# micro-batches) with "the update reads a value of the backward that is not
# a parameter's gradient". Under the sanitizers: Qwen2 and CLIP only.
# InternVL (no transformers class in this venv) is tests/hf_internvl.sh's.
. "$MMC_SOURCE_DIR/tests/tools/lib.sh"
o0_compiles
set -u
PY=${MMC_HF_PYTHON:-/var/cache/mmc-venv-hf/bin/python}
H="$MMC_SOURCE_DIR/tests/hf"
if [ -z "${MMC_HF_PYTHON:-}" ] && ! bash "$MMC_SOURCE_DIR/tools/test_venvs.sh" hf; then
  echo "FAIL: cannot make the transformers venv (tools/test_venvs.sh hf)"
  exit 1
fi
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
cd "$T"
export PYTHONWARNINGS=ignore TRANSFORMERS_VERBOSITY=error HF_HUB_OFFLINE=1
export OMP_NUM_THREADS=1 OMP_WAIT_POLICY=passive
MPIRUN=(timeout 300 mpirun --oversubscribe -x OMP_NUM_THREADS -x OMP_WAIT_POLICY -x LSAN_OPTIONS -np 2)
fail=0 npass=0
ok() { echo "PASS: $1"; npass=$((npass + 1)); }
bad() { echo "FAIL: $1"; fail=1; }
"$PY" "$H/make_tiny.py" . > make.log 2>&1 || { cat make.log; exit 1; }

cells="gpt2:HfGPT2 llama:HfLlama qwen2:HfQwen2 t5:HfT5Encoder umt5:HfUMT5Encoder clip:HfCLIPVision llava:HfLlava"
[ "$SAN" = 1 ] && cells="qwen2:HfQwen2 clip:HfCLIPVision" # the slow build: the tied LLM and a ViT
for c in $cells; do
  d=${c%%:*} model=${c#*:}
  "$MMC" import $d -o hf_$d.mm 2> imp_$d.err || { bad "import $d: $(cat imp_$d.err)"; continue; }
  t=(--set T=16); grep -q "let T =" hf_$d.mm || t=() # a vision tower has no text length
  run=(--steps 5 --init-from $d --eval-batches 1 --quiet)
  "$MMC" compile hf_$d.mm --model $model --set B=2 "${t[@]}" -o $d.s 2> $d.cc &&
    ./$d.s "${run[@]}" --log $d.s.jsonl --save-hf ex_$d.s > $d.s.out 2>&1 ||
    { bad "$d serial: $(tail -3 $d.cc $d.s.out)"; continue; }
  specs=()
  plans="tp pp"; [ $d = qwen2 ] && plans="tp pp mb" # mb: micro-batches on one rank (cg_mb_build)
  for p in $plans; do
    plan=(--tp 2) mpi=("${MPIRUN[@]}")
    [ $p = pp ] && plan=(--pp 2 --micro-batches 2)
    [ $p = mb ] && plan=(--micro-batches 2) mpi=()
    if ! "$MMC" compile hf_$d.mm --model $model --set B=2 "${t[@]}" "${plan[@]}" -o $d.$p 2> $d.$p.cc; then
      bad "$d: compile ${plan[*]}: $(head -3 $d.$p.cc)"
      continue
    fi
    if ! "${mpi[@]}" ./$d.$p "${run[@]}" --log $d.$p.jsonl --save-hf ex_$d.$p > $d.$p.out 2>&1; then
      bad "$d ${plan[*]}: $(tail -3 $d.$p.out)"
      continue
    fi
    w=$(/usr/bin/python3 "$H/same_losses.py" $d.s.jsonl $d.$p.jsonl) && ok "$model ${plan[*]}: 5 steps' losses the serial run's, relative $w" ||
      bad "$model ${plan[*]}: losses differ from serial: $w"
    specs+=("${plan[*]}=ex_$d.$p")
  done
  [ ${#specs[@]} = 0 ] && continue
  "$PY" "$H/same_export.py" 1e-5 $d ex_$d.s "${specs[@]}" > ex_$d.txt 2> ex_$d.err
  rc=$?
  cat ex_$d.txt
  n=$(grep -c ^PASS ex_$d.txt)
  npass=$((npass + n))
  [ $rc = 0 ] && [ "$n" = ${#specs[@]} ] || bad "$d: the exports differ: $(tail -3 ex_$d.err)"
done
echo "$npass passed"
exit $fail
