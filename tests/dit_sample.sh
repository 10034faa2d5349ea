#!/usr/bin/env bash
# The text-to-video sampler (mmc compile --task sample, runtime/programs/mmrt_sample.c)
# on tests/dit/sample.mm (a 1-layer T5, a 1-layer VideoDiT, a tiny WF-VAE
# decoder; the trainer's initial weights, random and fixed by its seed):
# 1. the sampler's arithmetic against diffusers' DDIM and DDPM v-prediction
#    steps in numpy (tests/torch/sample_ref.py) on the dumped model
#    outputs: the trailing timesteps, the schedule rows against the
#    zero-SNR formula (1e-6), every single step and the whole chain from the
#    same noise (1e-5), for DDIM 1 and 4 steps and DDPM 5 steps at
#    different guidance scales; for flow matching (T2VSampleFlowTest, the
#    same weights) Euler against x' = x + (sigma_p - sigma_t) v over the
#    uniform times sigma_i = 1 - i / N, 3 steps;
# 2. --seed: the same seed gives the same GIF, PNG and latents twice, another
#    seed other ones; a clip does not depend on the other prompts of the run
#    (--prompts, --clips: clip 1 of a 2-prompt run = the 1-prompt run's);
#    --raw holds every clip, --show 0 writes no GIF; @classify (a tiny frame
#    classifier) names every decoded frame (17 a clip, tallied by the
#    prompt's class); every clip of one @decode call (T2VSampleStandInTest,
#    B = 4: two clips a call, each classified in turn) against numpy's
#    inverse of the downsample on its --dump latents;
# 3. bad inputs exit 1 with a message naming the flag or file: a prompt word
#    outside the vocabulary, a prompt that is not a caption (with classify), --guidance abc, missing weights (a file that is
#    not there, and a weights file without the decoder), --steps above the
#    schedule's, a model without the sampler's forwards (mmc compile).
set -euo pipefail
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
cd "$T"
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-2}
MM="$MMC_SOURCE_DIR/tests/dit/sample.mm"
fail=0
bad() { echo "FAIL: $*"; fail=1; }

"$MMC" compile "$MM" --model T2VSampleTest -o trainer
./trainer --steps 0 --save-weights w.st --eval-batches 1 --quiet > /dev/null
"$MMC" compile "$MM" --model T2VSampleTest --task sample -o sampler
P=(--weights w.st --prompt "a sneaker moving left" --quiet)

# 1. the arithmetic against numpy (latents [8, 5, 8, 8]: 2560 values a clip)
ref() { /usr/bin/python3 "$MMC_SOURCE_DIR/tests/torch/sample_ref.py" "$@" || fail=1; }
./sampler "${P[@]}" --steps 4 --guidance 3.5 --seed 3 --out a --dump a.bin > a.txt
ref a.bin 4 1 2560 ddim 3.5
./sampler "${P[@]}" --steps 1 --seed 3 --out o1 --dump o1.bin > /dev/null
ref o1.bin 1 1 2560 ddim 4
./sampler --weights w.st --prompt "a bag moving up-right" --quiet --steps 5 --scheduler ddpm \
  --guidance 2 --seed 5 --out p --dump p.bin > /dev/null
ref p.bin 5 1 2560 ddpm 2
"$MMC" compile "$MM" --model T2VSampleFlowTest --task sample -O0 -o fsampler  # the loop is libmmrt's
./fsampler "${P[@]}" --steps 3 --guidance 2.5 --seed 3 --out fl --dump fl.bin > /dev/null
ref fl.bin 3 1 2560 euler 2.5

# 2. seeds
./sampler "${P[@]}" --steps 4 --guidance 3.5 --seed 3 --out b --dump b.bin > /dev/null
./sampler "${P[@]}" --steps 4 --guidance 3.5 --seed 4 --out c --dump c.bin > /dev/null
if cmp -s a/sample_00000.gif b/sample_00000.gif && cmp -s a/sample_00000.png b/sample_00000.png &&
  cmp -s a.bin b.bin; then
  echo "ok: --seed 3 twice: the same GIF, PNG strip and latents"
else
  bad "--seed 3 twice gave different clips"
fi
if cmp -s a/sample_00000.gif c/sample_00000.gif || cmp -s a.bin c.bin; then
  bad "--seed 4 gave the clip of --seed 3"
else echo "ok: --seed 4 gives another clip"; fi
# the decoded clips of one @decode call, each classified in turn: every clip
# of --raw is the decode of its --dump latents (T2VStandIn's inverse of the
# downsample, in numpy), not only the call's first
"$MMC" compile "$MM" --model T2VSampleStandInTest --task sample --set B=4 -o ssampler
./ssampler "${P[@]}" --clips 2 --steps 1 --seed 3 --show 0 --out s --dump s.bin --raw s.raw \
  > /dev/null
/usr/bin/python3 - << 'EOF' || fail=1
import sys
import numpy as np
n, P = 2, 2560
z = np.fromfile("s.bin", np.float32)[-n * P:].reshape(n, 8, 5, 8, 8).astype(np.float64)
raw = np.fromfile("s.raw", np.uint8).reshape(n, 17, 64, 64).astype(np.float64)
# channel c = 4 half + 2 sy + sx, frame 4 k + 2 half + e (e < 2), pixel (8 i + 4 sy + y, 8 j + 4 sx + x)
f = np.zeros((n, 20, 64, 64))
for c in range(8):
    half, sy, sx = c // 4, c // 2 % 2, c % 2
    for e in range(2):
        for y in range(4):
            for x in range(4):
                f[:, 4 * np.arange(5) + 2 * half + e, 4 * sy + y::8, 4 * sx + x::8] = z[:, c]
clip = np.concatenate([(f[:, 0:1] + f[:, 2:3]) * 0.5, f[:, 4:20]], axis=1)
want = np.clip(np.rint(255 * (clip + 1) * 0.25), 0, 255)
ok = True
for b in range(n):
    e = np.abs(want[b] - raw[b])
    inside = int(((want[b] > 0) & (want[b] < 255)).sum())
    print("clip %d: %d of %d pixels off by more than 1 (%d inside (0, 255))" % (b, (e > 1).sum(), e.size, inside))
    ok = ok and e.max() <= 1 and inside > e.size // 2
print(("ok" if ok else "FAIL") + ": the 2 clips of one @decode call (B = 4), each classified, are their latents' decode")
sys.exit(0 if ok else 1)
EOF
printf 'a bag moving up\n\na sneaker moving left\n' > prompts.txt
./sampler --weights w.st --prompts prompts.txt --clips 2 --steps 4 --guidance 3.5 --seed 3 \
  --show 3 --out d --raw d.raw --quiet > d.txt
n_gif=$(ls d/*.gif | wc -l)
raw=$(stat -c %s d.raw)
rows=$(tail -n +2 d/samples.tsv | wc -l)
if [ "$n_gif" = 3 ] && [ "$raw" = $((4 * 17 * 64 * 64)) ] && [ "$rows" = 4 ] &&
  grep -q "^2	0	a sneaker moving left$" d/samples.tsv; then
  echo "ok: --prompts (2) x --clips 2: 4 clips in --raw and samples.tsv, --show 3 GIFs"
  if grep -Eq "^classify: by prompted class .* 7 [0-9]+/34 8 [0-9]+/34$" d.txt &&
    grep -Eq "^classify: [0-9]+ of 68 frames" d.txt; then
    echo "ok: @classify named every frame: $(grep 'frames (' d.txt)"
  else bad "classify: expected 34 frames of class 7 and 34 of class 8: $(cat d.txt)"; fi
  # the confusion rows: classes 7 and 8 only, each summing to its 34 frames,
  # the diagonal the frames recognised
  if /usr/bin/python3 - d.txt << 'EOF'; then
import re, sys
t = open(sys.argv[1]).read()
hits = dict((int(a), int(b)) for a, b in re.findall(r" (\d) (\d+)/34", t))
rows = re.search(r"^classify: frames named as class 0 .. 9, by prompted class: (.*)$", t, re.M)
rows = dict((int(a), [int(v) for v in b.split(",")]) for a, b in re.findall(r"(\d):([\d,]+)", rows.group(1)))
ok = sorted(rows) == [7, 8] and all(len(r) == 10 and sum(r) == 34 and r[c] == hits[c] for c, r in rows.items())
print(("ok" if ok else "FAIL") + ": the confusion rows %s against the hits %s" % (rows, hits))
sys.exit(0 if ok else 1)
EOF
    :
  else bad "classify: the confusion rows do not match the frames and hits"; fi
else
  bad "--prompts/--clips/--show/--raw: $n_gif GIFs, $raw raw bytes, $rows rows"
fi
# the noise is drawn by clip index: clip 2 of that run (the sneaker's first
# copy) is clip 2 of a run of the sneaker alone (3 copies)
./sampler "${P[@]}" --clips 3 --steps 4 --guidance 3.5 --seed 3 --show 0 --out e --raw e.raw \
  > /dev/null
if [ -z "$(ls e/*.gif 2> /dev/null)" ] && cmp -s <(tail -c $((17 * 64 * 64)) e.raw) \
  <(head -c $((3 * 17 * 64 * 64)) d.raw | tail -c $((17 * 64 * 64))); then
  echo "ok: clip 2 is the same clip whatever the other prompts; --show 0 writes no GIF"
else
  bad "clip 2 depends on the other prompts of the run, or --show 0 wrote GIFs"
fi

# the frame classifier's task (runtime/feeders/mmrt_feed_frames.c): step 1's rows
# are frames of train clips 0..31 under the run seed with their classes, as
# mmc-clips writes those clips (PNG strips, captions.txt)
"$MMC" compile "$MMC_SOURCE_DIR/stdlib_models/frame_classifier.mm" --model FrameViT -o fvit
./fvit --steps 1 --eval-batches 1 --dump-inputs fin --quiet > /dev/null
"$MMC_BINARY_DIR/mmc-clips" --seed 42 clips 32 > /dev/null
/usr/bin/python3 - << 'EOF' || fail=1
import os, sys, zlib
import numpy as np
sys.path.insert(0, os.environ["MMC_SOURCE_DIR"] + "/tests/torch")
from mmtrain import st_load
def png_gray(path):  # 8-bit gray, non-interlaced (libpng's filters undone)
    b = open(path, "rb").read()
    i, idat, w, h = 8, b"", 0, 0
    while i < len(b):
        n = int.from_bytes(b[i:i + 4], "big"); kind = b[i + 4:i + 8]; d = b[i + 8:i + 8 + n]
        if kind == b"IHDR": w, h = int.from_bytes(d[0:4], "big"), int.from_bytes(d[4:8], "big")
        if kind == b"IDAT": idat += d
        i += 12 + n
    raw, out, prev = zlib.decompress(idat), np.zeros((h, w), np.int64), np.zeros(w, np.int64)
    for y in range(h):
        f, row = raw[y * (w + 1)], np.frombuffer(raw, np.uint8, w, y * (w + 1) + 1).astype(np.int64)
        cur = np.zeros(w, np.int64)
        for x in range(w):
            a = cur[x - 1] if x else 0; c = prev[x - 1] if x else 0; up = prev[x]
            p = a + up - c
            pr = a if abs(p - a) <= abs(p - up) and abs(p - a) <= abs(p - c) else (up if abs(p - up) <= abs(p - c) else c)
            cur[x] = (row[x] + [0, a, up, (a + up) // 2, pr][f]) & 255
        out[y], prev = cur, cur
    return out
x, _ = st_load("fin/step-000001.safetensors")
frames, labels = x["frames"].reshape(32, 64, 64), x["labels"]
caps = {int(l.split()[0]): int(l.split()[2]) for l in open("clips/captions.txt")}
bad, used = 0, set()
for r in range(32):
    strip = png_gray("clips/clip_%05d.png" % r) / 255.0
    d = [np.abs(strip[:, 64 * f:64 * f + 64] - frames[r]).max() for f in range(17)]
    f = int(np.argmin(d)); used.add(f)
    if d[f] > 1e-6 or labels[r] != caps[r]:
        bad += 1
        print(f"FAIL: row {r}: closest frame {f} off by {d[f]:.3g}, label {labels[r]} vs {caps[r]}")
print(("ok" if not bad and len(used) > 3 else "FAIL") +
      f": the clip-frame task's 32 rows are frames of their clips ({len(used)} frame indices) with their classes")
sys.exit(1 if bad or len(used) <= 3 else 0)
EOF

# 3. bad inputs: exit 1, a message naming the flag or file
expect() { # expect WHAT PATTERN -- command...
  local what=$1 pat=$2
  shift 3
  set +e
  "$@" > out.txt 2>&1
  local rc=$?
  set -e
  if [ $rc = 1 ] && grep -q -- "$pat" out.txt && ! grep -qi "sanitizer\|segmentation" out.txt; then
    echo "ok: $what: exit 1, $(head -c 150 out.txt | head -1)"
  else
    bad "$what: exit $rc, expected 1 and '$pat': $(cat out.txt)"
  fi
}
expect "a prompt word outside the vocabulary" '--prompt "a sneaker moving sideways": the word "sideways"' -- \
  ./sampler --weights w.st --prompt "a sneaker moving sideways"
expect "--guidance abc" "--guidance takes a number.*'abc'" -- \
  ./sampler --weights w.st --prompt "a bag moving up" --guidance abc
expect "missing weights file" "--weights: nope.st: cannot open" -- \
  ./sampler --weights nope.st --prompt "a bag moving up"
/usr/bin/python3 - << 'EOF'
import sys
sys.path.insert(0, __import__("os").environ["MMC_SOURCE_DIR"] + "/tests/torch")
from mmtrain import st_load, st_save
w, _ = st_load("w.st")
st_save("nodec.st", {k: v for k, v in w.items() if not k.startswith("decoder.")})
EOF
/usr/bin/python3 - << 'EOF'
import os, sys
sys.path.insert(0, os.environ["MMC_SOURCE_DIR"] + "/tests/torch")
from mmtrain import st_load, st_save
w, _ = st_load("w.st")
st_save("dec.st", {k: v for k, v in w.items() if k.startswith("decoder.")})
st_save("rest.st", {k: v for k, v in w.items() if not k.startswith("decoder.")})
EOF
./sampler --weights rest.st --weights dec.st --prompt "a sneaker moving left" --quiet --steps 4 \
  --guidance 3.5 --seed 3 --out f > /dev/null
if cmp -s a/sample_00000.gif f/sample_00000.gif; then
  echo "ok: --weights twice (the decoder from a file of its own) gives the one file's clip"
else bad "--weights rest.st --weights dec.st differs from --weights w.st"; fi
expect "weights without the decoder" "--weights nodec.st: no tensor 'decoder\." -- \
  ./sampler --weights nodec.st --prompt "a bag moving up"
expect "a prompt that is not a clip caption (the classifier needs its class)" \
  '--prompt "a bag": not a clip caption' -- ./sampler --weights w.st --prompt "a bag"
expect "--steps above the schedule" "--steps 1001: the schedule has 1000 steps" -- \
  ./sampler --weights w.st --prompt "a bag moving up" --steps 1001
expect "ddim on a flow-matching model" "--scheduler ddim: model T2VSampleFlowTest is a flow-matching" -- \
  ./fsampler --weights w.st --prompt "a bag moving up" --scheduler ddim
expect "euler on a DDPM model" "--scheduler euler: model T2VSampleTest is a DDPM" -- \
  ./sampler --weights w.st --prompt "a bag moving up" --scheduler euler
expect "no sampler forwards" "needs forwards named denoise" -- \
  "$MMC" compile "$MMC_SOURCE_DIR/stdlib_models/videodit.mm" --model VideoDiTTiny --task sample -o x
exit $fail
