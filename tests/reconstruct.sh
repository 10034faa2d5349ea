#!/usr/bin/env bash
# A video autoencoder's reconstruction (tests/video/clipvae.mm, forwards
# encode and decode): the one-rank trainer reports the PSNR of the held-out
# clips at every evaluation; `mmc compile --task reconstruct` builds the
# reconstructor, which loads the trainer's weights (--save-weights file and
# checkpoint folder), prints the same PSNR on the same clips, a PSNR that
# numpy recomputes from the clips and reconstructions it dumps, writes
# input | reconstruction as a PNG strip and an animated GIF, and shows the
# chunked encoder (first chunk 1 + C frames, then C, with the causal
# convolutions' caches) equal to the whole-clip encoder; bad weights, flags
# and models are refused with the reason.
set -uo pipefail
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
export OMP_NUM_THREADS=1 OMP_WAIT_POLICY=passive
pass=0; fail=0
ok() { pass=$((pass+1)); }
bad() { echo "FAIL: $*"; fail=$((fail+1)); }
M="$MMC_SOURCE_DIR/tests/video/clipvae.mm"
R="$T/rec"
if ! "$MMC" compile "$M" -o "$T/ae" 2> "$T/cerr"; then bad "compile: $(cat "$T/cerr")"; fi
if ! "$MMC" compile "$M" --task reconstruct -o "$R" 2> "$T/cerr"; then bad "compile --task reconstruct: $(cat "$T/cerr")"; fi
# the trainer: 12 steps, evaluations at 6 and at the end on 2 batches (4 clips)
if "$T/ae" --steps 12 --eval-every 6 --eval-batches 2 --log "$T/log" --save-weights "$T/w.safetensors" \
     --ckpt "$T/ck" > "$T/out" 2> "$T/err"; then
  grep -q "step 6: eval loss [0-9.]*, PSNR [0-9.]*" "$T/err" && ok || bad "no PSNR at step 6: $(grep eval "$T/err")"
  grep -Eq '^eval: loss [0-9.]+ PSNR [0-9.]+ \(test split(: first [0-9]+ of [0-9]+ batches; --eval-batches all for the whole)?\)$' "$T/out" && ok || bad "eval line: $(grep eval: "$T/out")"
else bad "trainer failed: $(tail -3 "$T/err")"; fi
psnr_log() { /usr/bin/python3 -c '
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if "eval_psnr" in l]
print(" ".join("%d:%r" % (r["step"], r["eval_psnr"]) for r in rows))' "$T/log"; }
P=$(psnr_log)
[ "$(echo "$P" | wc -w)" = 2 ] && ok || bad "expected eval_psnr at steps 6 and 12 in the log: $P"
final=${P##*:}
# the reconstructor on the same 4 clips, from the file and from the checkpoint
if "$R" --weights "$T/w.safetensors" --clips 4 --out "$T/img" --show 1 --dump "$T/dump" > "$T/rout" 2> "$T/rerr"; then
  got=$(sed -n 's/^reconstruct: 4 held-out clips .* PSNR \([0-9.]*\) dB.*/\1/p' "$T/rout")
  /usr/bin/python3 - "$T/dump" "$got" "$final" <<'PY' && ok || bad "PSNR: $(cat "$T/rout")"
import sys
import numpy as np
d = np.fromfile(sys.argv[1], dtype="<f4").reshape(4, 2, 1, 17, 64, 64).astype(np.float64)
x, y = d[:, 0], np.clip(d[:, 1], 0.0, 1.0)
mse = ((y - x) ** 2).reshape(4, -1).mean(axis=1)
ref = float(np.mean(10 * np.log10(1.0 / mse)))
got, trainer = float(sys.argv[2]), float(sys.argv[3])
print("reconstruct: PSNR %.4f dB, numpy %.6f, the trainer's final evaluation %.6f" % (got, ref, trainer))
assert 0.0 <= x.min() and x.max() <= 1.0 and x.max() > 0.5, "the dumped clips are not clips"
sys.exit(0 if abs(got - ref) < 1e-4 and abs(trainer - ref) < 1e-6 * abs(ref) else 1)
PY
  diff=$(sed -n 's/^chunked encoding: 5 + 3 x 4 frames, 2 caches: max |latent difference| \([^ ]*\) (max |latent| \([^)]*\))$/\1 \2/p' "$T/rout")
  /usr/bin/python3 -c 'import sys; d, z = map(float, sys.argv[1:3]); print("chunked: max diff %g of max |z| %g" % (d, z)); sys.exit(0 if d <= 1e-5 and z > 0.1 else 1)' $diff &&
    ok || bad "chunked encoding: $(grep chunked "$T/rout")"
  dims() { /usr/bin/python3 -c '
import struct, sys
b = open(sys.argv[1], "rb").read()
if b[:4] == b"\x89PNG": print("png", *struct.unpack(">II", b[16:24]))
else: print("gif", *struct.unpack("<HH", b[6:10]), b.count(b"\x21\xf9\x04"))' "$1"; }
  [ "$(dims "$T/img/recon_00000.png")" = "png 1088 128" ] && ok || bad "PNG strip: $(dims "$T/img/recon_00000.png")"
  [ "$(dims "$T/img/recon_00000.gif")" = "gif 128 64 17" ] && ok || bad "GIF: $(dims "$T/img/recon_00000.gif")"
  [ ! -e "$T/img/recon_00001.png" ] && ok || bad "--show 1 wrote a second clip"
else bad "reconstructor failed: $(cat "$T/rerr")"; fi
"$R" --weights "$T/ck" --clips 4 --no-chunks --show 0 > "$T/rout2" 2> "$T/rerr" &&
  [ "$(sed -n 's/.*PSNR \([0-9.]*\) dB.*/\1/p' "$T/rout2")" = "$got" ] && ! grep -q chunked "$T/rout2" &&
  ok || bad "from the checkpoint: $(cat "$T/rout2" "$T/rerr")"
# --first and --clips change the clips scored
"$R" --weights "$T/ck" --first 4 --clips 2 --no-chunks --show 0 > "$T/rout3" 2>&1 &&
  grep -q "2 held-out clips (test split, seed 12, from 4)" "$T/rout3" && ok || bad "--first: $(cat "$T/rout3")"
# bad weights: a clear message, exit 1
expect() { # want-rc text args...
  local want=$1 text=$2; shift 2
  "$R" "$@" > "$T/bout" 2> "$T/berr"; local rc=$?
  [ $rc = "$want" ] && grep -qF -- "$text" "$T/berr" && ok || bad "reconstructor $*: exit $rc, $(cat "$T/berr")"
}
head -c 200 "$T/w.safetensors" > "$T/short.safetensors"
echo '{}' > "$T/junk.safetensors"
expect 1 "--weights $T/short.safetensors: " --weights "$T/short.safetensors"
expect 1 "--weights $T/junk.safetensors: " --weights "$T/junk.safetensors"
expect 1 "--weights $T/none: " --weights "$T/none"
expect 1 "--weights FILE|DIR is required" --clips 2
expect 1 "--clips takes an integer >= 1, not '0'" --weights "$T/w.safetensors" --clips 0
expect 1 "unknown option '--nope'" --weights "$T/w.safetensors" --nope
# the trainer's executable is not a reconstructor, and a model without
# encode/decode cannot be compiled as one
"$T/ae" --weights x > /dev/null 2> "$T/berr"; [ $? = 1 ] && ok || bad "the trainer took --weights"
cat > "$T/plain.mm" <<'MM'
import "nn.mm"
model Plain {
  let B = 2
  c = Conv3d(1, 1, kernel = 1)
  forward(video: f32[B, 1, 17, 64, 64]) -> loss { return mse(c(video), video) }
}
MM
"$MMC" compile "$T/plain.mm" --task reconstruct -o "$T/p" 2> "$T/cerr"; rc=$?
[ $rc = 1 ] && grep -q "needs forwards named encode (the clips to latents) and decode" "$T/cerr" && ok ||
  bad "a model without encode: exit $rc, $(cat "$T/cerr")"
# --chunk-frames: 8 gives a first chunk of 9 frames and one of 8; 3 is refused
# by the model's own require() (a first chunk of 4 frames is no clip)
if "$MMC" compile "$M" --task reconstruct --chunk-frames 8 -o "$T/rec8" 2> "$T/cerr"; then
  "$T/rec8" --weights "$T/w.safetensors" --clips 2 --show 0 > "$T/out8" 2>&1
  grep -q "chunked encoding: 9 + 1 x 8 frames, 2 caches: max |latent difference| 0 " "$T/out8" && ok ||
    bad "--chunk-frames 8: $(cat "$T/out8")"
else bad "--chunk-frames 8: $(cat "$T/cerr")"; fi
"$MMC" compile "$M" --task reconstruct --chunk-frames 3 -o "$T/rec3" 2> "$T/cerr"; rc=$?
[ $rc = 1 ] && grep -q "clipvae.mm:.*error: the clips must have 1 + 4k frames" "$T/cerr" && ok ||
  bad "--chunk-frames 3: exit $rc, $(cat "$T/cerr")"
"$MMC" compile "$M" --chunk-frames 4 -o "$T/x" 2> "$T/cerr"; rc=$?
[ $rc = 2 ] && grep -q "chunk-frames goes with --task reconstruct only" "$T/cerr" && ok ||
  bad "--chunk-frames without reconstruct: exit $rc, $(cat "$T/cerr")"
# the WF-VAE of stdlib_models/wfvae.mm is a reconstruction model too: its
# encode gives [B, latent, 5, 8, 8], decode the clip, and the chunked
# encoder carries the caches of its 8 causal convolutions with time kernels
"$MMC" dump-ir "$MMC_SOURCE_DIR/stdlib_models/wfvae.mm" --model WFVAETiny --task reconstruct \
  --after lower > "$T/wf.ir" 2> "$T/cerr" && /usr/bin/python3 - "$T/wf.ir" <<'PY' && ok || bad "WFVAETiny --task reconstruct: $(cat "$T/cerr")"
import re, sys
ir = open(sys.argv[1]).read()
funcs = dict(re.findall(r"^func @(\w+)\((.*?)\) \{", ir, re.M))
rets = {}
for name, body in re.findall(r"^func @(\w+)\(.*?\{\n(.*?)^\}", ir, re.M | re.S):
    last = re.findall(r"^  return (.*)$", body, re.M)[-1].split(", ")
    types = dict(re.findall(r"^  (%\w+) = .*? : (f32\[[^\]]*\])", body, re.M))
    rets[name] = [types.get(v, v) for v in last]
print("WFVAETiny: encode ->", rets["encode"][0], "decode ->", rets["decode"][0],
      "encode_next caches:", len(rets["encode_next"]) - 1)
assert set(funcs) == {"forward", "encode", "decode", "encode_first", "encode_next"}, funcs.keys()
assert rets["encode"][0] == "f32[2, 4, 5, 8, 8]" and rets["decode"][0] == "f32[2, 1, 17, 64, 64]"
assert len(rets["encode_next"]) == len(rets["encode_first"]) == 9
assert funcs["encode_next"].count(".cache :") == 8
PY
# ... and its chunked encoder gives the whole clip's latents: the
# reconstructor of WFVAETiny on random weights by name (every parameter of
# the dump's list, normal(0, 0.2), written as safetensors by numpy)
/usr/bin/python3 - "$T/wf.ir" "$T/wfr.safetensors" <<'PY' || bad "random WFVAETiny weights"
import json, re, struct, sys
import numpy as np
rng = np.random.default_rng(5)
head, blobs, off = {}, [], 0
for name, dims in re.findall(r"^param @(\S+) : f32\[([^\]]*)\]", open(sys.argv[1]).read(), re.M):
    shape = [int(d) for d in dims.split(", ")]
    a = (rng.standard_normal(shape) * 0.2).astype("<f4").tobytes()
    head[name] = {"dtype": "F32", "shape": shape, "data_offsets": [off, off + len(a)]}
    blobs.append(a)
    off += len(a)
h = json.dumps(head).encode()
open(sys.argv[2], "wb").write(struct.pack("<Q", len(h)) + h + b"".join(blobs))
PY
if "$MMC" compile "$MMC_SOURCE_DIR/stdlib_models/wfvae.mm" --model WFVAETiny --task reconstruct \
     -o "$T/wfrec" 2> "$T/cerr"; then
  "$T/wfrec" --weights "$T/wfr.safetensors" --clips 2 --show 0 > "$T/wfout" 2> "$T/wferr"
  diff=$(sed -n 's/^chunked encoding: 5 + 3 x 4 frames, 8 caches: max |latent difference| \([^ ]*\) (max |latent| \([^)]*\))$/\1 \2/p' "$T/wfout")
  /usr/bin/python3 -c 'import sys; d, z = map(float, sys.argv[1:3]); print("WFVAETiny chunked: max diff %g of max |z| %g" % (d, z)); sys.exit(0 if d <= 1e-5 * max(1, z) and z > 0.1 else 1)' $diff &&
    ok || bad "WFVAETiny chunked encoding: $(cat "$T/wfout" "$T/wferr")"
else bad "WFVAETiny --task reconstruct: $(cat "$T/cerr")"; fi
echo "reconstruct: $pass passed, $fail failed"
[ $fail = 0 ]
