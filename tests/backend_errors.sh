#!/usr/bin/env bash
# A trainer refuses bad input with exit status 1 and a message naming the
# flag or the file: unknown flags, bad values, a --batch other than the
# compiled one, a missing data folder, a truncated IDX file, a checkpoint of
# another model, a corrupted checkpoint, a model no data task takes; and mmc
# compile's own errors.
set -uo pipefail
S="$MMC_SOURCE_DIR/stdlib_models"
D=${MMC_FMNIST_DIR:-/usr/share/datasets/fashion-mnist}
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-2} OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-passive}
pass=0; fail=0
expect() { # name expected-status command...
  local name=$1 want=$2; shift 2
  "$@" > "$T/out" 2> "$T/err"; local got=$?
  if [ "$got" -eq "$want" ]; then pass=$((pass+1)); else echo "FAIL $name: exit $got, expected $want"; head -5 "$T/err"; fail=$((fail+1)); fi
}
says() { # name text: stderr of the last command names it
  if grep -qF -- "$2" "$T/err"; then pass=$((pass+1)); else echo "FAIL $1: '$2' not in: $(head -3 "$T/err")"; fail=$((fail+1)); fi
}

"$MMC" compile "$S/gpt2.mm" --model GPT2Tiny -o "$T/gpt" || { echo "FAIL: compile GPT2Tiny"; exit 1; }
"$MMC" compile "$S/vit_fashion.mm" -o "$T/vit" || { echo "FAIL: compile ViTFashion"; exit 1; }
G="$T/gpt"; V="$T/vit"; Q=(--quiet --eval-batches 1)

expect "help" 0 "$G" --help
expect "unknown flag" 1 "$G" --bogus;            says "unknown flag" "unknown option '--bogus'"
expect "bad steps" 1 "$G" --steps ten;           says "bad steps" "--steps takes a whole number"
expect "missing value" 1 "$G" --steps;           says "missing value" "--steps needs a value"
expect "bad lr" 1 "$G" --lr -1;                  says "bad lr" "--lr takes a positive number"
expect "wrong batch" 1 "$V" --batch 32;          says "wrong batch" "recompile with"; says "wrong batch names B" "--set B=32"
expect "resume without ckpt" 1 "$G" --resume;    says "resume without ckpt" "--resume needs --ckpt"
expect "missing data" 1 "$G" --data "$T/nowhere" "${Q[@]}"; says "missing data" "$T/nowhere"

# a truncated training image file (raw IDX: the .gz is absent)
mkdir -p "$T/trunc"
cp "$D"/t10k-* "$D"/train-labels-idx1-ubyte.gz "$T/trunc/"
gzip -dc "$D/train-images-idx3-ubyte.gz" | head -c 100000 > "$T/trunc/train-images-idx3-ubyte"
expect "truncated idx" 1 "$G" --data "$T/trunc" "${Q[@]}"; says "truncated idx" "train-images-idx3-ubyte"

# a checkpoint of another model
expect "gpt ckpt" 0 "$G" --steps 2 --ckpt "$T/ck" "${Q[@]}"
expect "other model" 1 "$V" --steps 3 --ckpt "$T/ck" --resume "${Q[@]}"; says "other model" "fingerprint"; says "other model dir" "$T/ck"

# a corrupted checkpoint: its header overwritten
cp -r "$T/ck" "$T/bad"
printf 'garbage!garbage!' | dd of="$T/bad/$(cat "$T/bad/latest")/rank-00000.safetensors" bs=1 seek=8 conv=notrunc 2> /dev/null
expect "corrupted ckpt" 1 "$G" --steps 3 --ckpt "$T/bad" --resume "${Q[@]}"; says "corrupted ckpt" "rank-00000.safetensors"
# and one cut short
cp -r "$T/ck" "$T/short"
truncate -s 4000 "$T/short/$(cat "$T/short/latest")/rank-00000.safetensors"
expect "short ckpt" 1 "$G" --steps 3 --ckpt "$T/short" --resume "${Q[@]}"; says "short ckpt" "rank-00000.safetensors"
# a resume with nothing there starts fresh; a finished run resumes to its end
expect "fresh resume" 0 "$G" --steps 2 --ckpt "$T/fresh" --resume "${Q[@]}"; says "fresh resume" "starting at step 0"

# a model whose inputs no task takes: the message lists them and what each task expects
cat > "$T/odd.mm" <<'MM'
import "llm.mm"
model Odd {
  let B = 2
  let T = 8
  llm = LLM(vocab = 256, dim = 16, depth = 1, heads = 2, kv_heads = 1, ffn = 32)
  forward(tokens: i32[B, T], targets: i32[B, T]) -> loss { return llm(tokens, targets) }
  train { optimizer = adamw(lr = 1e-3) }
}
MM
expect "compile odd" 0 "$MMC" compile "$T/odd.mm" -o "$T/odd"
expect "no feeder" 1 "$T/odd" --steps 1 --log "$T/odd.jsonl" "${Q[@]}"
says "no feeder" "cannot bind the inputs of model Odd (tokens I32[2, 8], targets I32[2, 8], lr F32[], step F32[]) to a data feeder"
says "no feeder lists the feeders" "expected ids and labels I32[B, T] (seg, pos: packed) with --data FILE.jsonl|PREFIX (text); pixels F32[B, 1, 28, 28] and labels I32[B] (classification); pixels F32[B, 1, 28, 28], text and labels I32[B, T] (captioning); ids and labels I32[B, T] (next-pixel); latents F32[B, 8, Fl, 8, 8], text I32[B, L] (or text_features F32[B, L, D] with forwards latents and text_features), noise (like latents), t_uniform or t_normal F32[B] (text-to-video diffusion); video F32[B, 1, 1 + 4k, 64, 64] (video); frames F32[B, 1, 64, 64] and labels I32[B] (clip-frame classification); or pixels F32[B, K, 3, S, S], text and labels I32[B, T] with --data FILE.jsonl --images DIR --tokenizer FILE (conversation); B = 2"
if [ -e "$T/odd.jsonl" ]; then echo "FAIL no feeder: the log was written"; fail=$((fail+1)); else pass=$((pass+1)); fi

# mmc compile: usage errors (exit 2) and an unwritable output (exit 1)
expect "emit kind" 2 "$MMC" compile "$S/gpt2.mm" --model GPT2Tiny --emit wasm
expect "opt level" 2 "$MMC" compile "$S/gpt2.mm" --model GPT2Tiny -O7
expect "bad output" 1 "$MMC" compile "$S/gpt2.mm" --model GPT2Tiny -o "$T/no/such/dir/trainer"
expect "no runtime" 1 env MMC_RUNTIME_LIB="$T/nothing.a" "$MMC" compile "$S/gpt2.mm" --model GPT2Tiny -o "$T/x"
says "no runtime" "$T/nothing.a"
echo "$pass passed, $fail failed"
[ $fail -eq 0 ]
