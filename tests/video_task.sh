#!/usr/bin/env bash
# The video task end to end: a tiny Conv3d autoencoder with the input
# video f32[B, 1, 17, 64, 64] binds to it (mmrt_feed_video.c), trains on the
# moving Fashion-MNIST clips with a falling loss, evaluates on held-out
# clips (loss, no accuracy: the task has no labels); a model whose clips
# are not 1 + 4k frames is refused by the trainer with the reason; the
# mmc-clips tool's flags each take effect, bad ones are refused.
set -uo pipefail
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
export OMP_NUM_THREADS=1 OMP_WAIT_POLICY=passive
pass=0; fail=0
ok() { pass=$((pass+1)); }
bad() { echo "FAIL: $*"; fail=$((fail+1)); }
model() { # name frames
  cat <<MM
import "nn.mm"
model $1 {
  let B = 4
  enc = Conv3d(1, 4, kernel = 1)
  dec = Conv3d(4, 1, kernel = 1)
  forward(video: f32[B, 1, $2, 64, 64]) -> loss {
    return mse(dec(enc(video)), video)
  }
  train { optimizer = adamw(lr = 1e-2, betas = [0.9, 0.999], weight_decay = 0.0) }
}
MM
}
model ClipAE 17 > "$T/ae.mm"
model ClipAE16 16 > "$T/ae16.mm"
if "$MMC" compile "$T/ae.mm" --model ClipAE -o "$T/ae" 2> "$T/cerr"; then
  # the video-file decoder (FFmpeg) is linked into a trainer whose model
  # takes a video, and only there (codegen/cg_emit.c, mmrt_vfiles.h)
  ldd "$T/ae" | grep libavformat > /dev/null && ok || bad "the video trainer does not link libavformat"
  printf 'import "nn.mm"\nmodel Lin {\n  l = Linear(4, 2)\n  forward(x: f32[2, 4], labels: i32[2]) -> loss { return cross_entropy(l(x), labels) }\n}\n' > "$T/lin.mm"
  if "$MMC" compile "$T/lin.mm" --model Lin -o "$T/lin" 2> "$T/lerr"; then
    ! ldd "$T/lin" | grep libavformat > /dev/null && ok || bad "a trainer without a video input links libavformat"
  else bad "compile Lin: $(cat "$T/lerr")"; fi
  if "$T/ae" --steps 30 --eval-batches 3 --log "$T/ae.jsonl" > "$T/out" 2> "$T/err"; then
    grep -q "ClipAE, video data" "$T/err" && ok || bad "the trainer's start-up line names no video data: $(head -1 "$T/err")"
    grep -Eq '^eval: loss [0-9.]+ \(test split(: first [0-9]+ of [0-9]+ batches; --eval-batches all for the whole)?\)$' "$T/out" && ok || bad "eval line: $(grep eval: "$T/out")"
    /usr/bin/python3 - "$T/ae.jsonl" <<'PY' && ok || bad "the loss does not fall"
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
loss = [r["loss"] for r in rows if "loss" in r]
a, b = sum(loss[:5]) / 5, sum(loss[-5:]) / 5
print("video task: 30 steps, mean loss of the first 5 %.5f, of the last 5 %.5f, eval loss %.5f" % (a, b, rows[-1]["eval_loss"]))
sys.exit(0 if len(loss) == 30 and b < 0.5 * a and rows[-1]["eval_accuracy"] is None and rows[-1]["eval_loss"] < a else 1)
PY
  else bad "trainer failed: $(tail -3 "$T/err")"; fi
else bad "compile: $(cat "$T/cerr")"; fi
if "$MMC" compile "$T/ae16.mm" --model ClipAE16 -o "$T/ae16" 2> "$T/cerr"; then
  "$T/ae16" --steps 1 > "$T/out" 2> "$T/err"; rc=$?
  [ $rc = 1 ] && grep -q "input video has 16 frames; clips have 1 + 4k" "$T/err" && ok ||
    bad "16 frames: exit $rc, $(cat "$T/err")"
else bad "compile 16: $(cat "$T/cerr")"; fi
# mmc-clips: every flag changes what is written, bad ones are refused
C="$MMC_BINARY_DIR/mmc-clips"
run() { "$C" "$@" > "$T/cout" 2> "$T/cerr"; echo $?; }
[ "$(run "$T/a" 2)" = 0 ] && [ -s "$T/a/clip_00001.gif" ] && ok || bad "mmc-clips: $(cat "$T/cerr")"
width() { /usr/bin/python3 -c 'import struct,sys; print(struct.unpack(">I", open(sys.argv[1], "rb").read()[16:20])[0])' "$1"; }
[ "$(width "$T/a/clip_00000.png")" = 1088 ] && ok || bad "the strip of 17 frames is not 1088 wide"
run --frames 5 "$T/f" 1 > /dev/null; [ "$(width "$T/f/clip_00000.png")" = 320 ] && ok || bad "--frames 5 ignored"
run --seed 1 "$T/s" 2 > /dev/null; cmp -s "$T/a/captions.txt" "$T/s/captions.txt" && bad "--seed ignored" || ok
run --split test "$T/t" 2 > /dev/null; cmp -s "$T/a/captions.txt" "$T/t/captions.txt" && bad "--split ignored" || ok
run --first 1 "$T/i" 1 > /dev/null; [ -s "$T/i/clip_00001.png" ] && [ ! -e "$T/i/clip_00000.png" ] &&
  [ "$(cat "$T/i/captions.txt")" = "$(sed -n 2p "$T/a/captions.txt")" ] && ok || bad "--first 1 is not clip 1"
expect_rc() { # want text args...
  local want=$1 text=$2; shift 2
  local got; got=$(run "$@")
  [ "$got" = "$want" ] && grep -qF -- "$text" "$T/cerr" && ok || bad "mmc-clips $*: exit $got, $(cat "$T/cerr")"
}
expect_rc 2 "unknown or incomplete option --nope" --nope "$T/b" 1
expect_rc 2 "--split is train or test; got val" --split val "$T/b" 1
expect_rc 2 "N must be a count" "$T/b" 0
expect_rc 2 "usage: mmc-clips" "$T/b"
expect_rc 1 "1 + 4k frames" --frames 6 "$T/b" 1
expect_rc 1 "$T/none: Fashion-MNIST directory does not exist" --data "$T/none" "$T/b" 1
echo "video_task: $pass passed, $fail failed"
[ $fail = 0 ]
