#!/usr/bin/env bash
# Features extracted from video files (--task extract --data LIST.json) and
# the text-to-video model trained from them (docs/video.md "Training from
# video files"). The runtime's training clips 0..5 under seed 42 (the
# extractor's own, mmc-clips --seed 42) written by ffmpeg as H.264 RGB
# (lossless) and 4:2:0 CRF 12 (tests/video_ref/write_clips.py):
# 1. lossless: the latents, text features and caption ids of the training
#    rows equal the in-memory route's (the generated clips) to the bit --
#    the same frames in the same batches through the same compiled encoder;
#    the held-out rows (entries 0 and 1 of the list) equal training rows 0
#    and 1; the labels are -1 (a file has no class); under mpirun -np 2
#    the directory is the one-rank run's byte for byte;
# 2. 4:2:0 CRF 12: the caption features and ids equal; the latents are
#    finite, their distance to the in-memory route's printed, not bounded:
#    the frames are within 52 dB PSNR (tests/video_train.sh; the codec
#    leaves errors of up to 3/255 on 2% of the black background), but
#    through this random, untrained encoder (per-position layer norms) the
#    latents move by 0.75 of their RMS (measured; why so much is not
#    established), so no bound on the latents follows from the codec's
#    error; equality is checked where it holds, on lossless files;
# 3. T2VTiny (online encoding) trains 3 steps from the lossless list: the
#    start line names the files, the losses are finite.
set -uo pipefail
. "$MMC_SOURCE_DIR/tests/tools/lib.sh"
. "$MMC_SOURCE_DIR/tests/video_ref/setup.sh"
M="$MMC_SOURCE_DIR/stdlib_models/t2v.mm"
"$MMC" compile "$M" --model T2VTiny --task extract -O0 -o t2vx > c.out 2>&1 || { echo "FAIL: compile extract: $(cat c.out)"; exit 1; }
videos_of 17 42

./t2vx --out Fmem --clips 6 --heldout 2 --quiet > x0 2>&1 || bad "in-memory extract: $(cat x0)"
./t2vx --out Frgb --data v/rgb.json --clips 6 --heldout 2 --quiet > x1 2>&1 || bad "extract from H.264 RGB: $(cat x1)"
./t2vx --out Flossy --data v/lossy.json --clips 6 --heldout 2 --quiet > x2 2>&1 || bad "extract from 4:2:0: $(cat x2)"
r=$("$PY" - <<'PY' 2>&1
import json, struct
import numpy as np
def load(p):
    b = open(p, "rb").read(); n = struct.unpack("<Q", b[:8])[0]; h = json.loads(b[8:8 + n]); z = b[8 + n:]
    dt = {"F32": np.float32, "I32": np.int32}
    return {k: np.frombuffer(z[v["data_offsets"][0]:v["data_offsets"][1]], dt[v["dtype"]]).reshape(v["shape"])
            for k, v in h.items() if k != "__metadata__"}
mem, rgb, lossy = (load(d + "/train-00000.safetensors") for d in ("Fmem", "Frgb", "Flossy"))
held = load("Frgb/heldout-00000.safetensors")
for k in ("latents", "text_features", "text"):
    assert np.array_equal(mem[k], rgb[k]), k
    assert np.array_equal(held[k], mem[k][:2]), "held-out " + k
assert (rgb["label"] == -1).all() and (mem["label"] >= 0).all()
for k in ("text_features", "text"):
    assert np.array_equal(mem[k], lossy[k]), k
d = lossy["latents"].astype(np.float64) - mem["latents"]
rel = float(np.sqrt((d ** 2).mean() / (mem["latents"].astype(np.float64) ** 2).mean()))
print("lossless: latents, text features and ids equal to the bit; 4:2:0 CRF 12: caption features equal, latents' max |diff| %.3g, relative RMS %.4f" % (abs(d).max(), rel))
assert np.isfinite(lossy["latents"]).all()
PY
)
[ $? = 0 ] && ok "$r" || bad "features: $r"

# under mpirun -np 2 (each rank its share of the batches, rank 0 writing):
# the one-rank directory byte for byte
if command -v mpirun > /dev/null; then
  timeout 300 mpirun --oversubscribe -x OMP_NUM_THREADS -x OMP_WAIT_POLICY -x LSAN_OPTIONS -np 2 \
    ./t2vx --out F2 --data v/rgb.json --clips 6 --heldout 2 --quiet > x3 2>&1; a=$?
  d=$(for f in Frgb/*; do cmp -s "$f" "F2/${f#Frgb/}" || echo "${f#Frgb/}"; done)
  [ $a = 0 ] && [ -z "$d" ] && ok "2 ranks from the files: the one-rank directory byte for byte" \
    || bad "2 ranks: exit $a, differ: $d $(tail -2 x3)"
fi

# the same from a data section (source and bad_samples, no --data): the features byte for
# byte (the manifest too, but for the model's name and fingerprint)
printf 'import "t2v.mm"\nmodel TX extends T2VTiny {\n  data { format = t2v_diffusion; source = "v/rgb.json"; bad_samples = skip }\n}\n' > tx.mm
"$MMC" compile tx.mm --model TX --task extract -O0 -o tx > c3.out 2>&1 &&
  ./tx --out Fsec --clips 6 --heldout 2 --quiet > x4 2>&1; a=$?
d=$(for f in Frgb/*; do [ "${f#Frgb/}" = manifest.json ] || cmp -s "$f" "Fsec/${f#Frgb/}" || echo "${f#Frgb/}"; done)
nm() { grep -v '"model"\|"fingerprint"' "$1"; }
[ $a = 0 ] && [ -z "$d" ] && [ -s Fsec/manifest.json ] && cmp -s <(nm Frgb/manifest.json) <(nm Fsec/manifest.json) &&
  ok "the data section's source: the --data directory's features byte for byte" ||
  bad "the data section's source: exit $a, differ: $d $(tail -2 c3.out x4)"

# ---- 3. the text-to-video model trains from the files ----
"$MMC" compile "$M" --model T2VTiny -O0 -o t2v > c2.out 2>&1 || bad "compile T2VTiny: $(tail -2 c2.out)"
./t2v --data v/rgb.json --steps 3 --eval-batches 1 --log t.log > t.out 2>&1; a=$?
l=$("$PY" -c 'import json,sys,math; v=[json.loads(l)["loss"] for l in open(sys.argv[1]) if "\"loss\"" in l]; assert len(v)==3 and all(math.isfinite(x) for x in v); print(" ".join("%.5f" % x for x in v))' t.log 2>&1)
if [ $a = 0 ] && [ -n "$l" ] && grep -q "trainer: video files: v/rgb.json, 6 entries; clips of 17 frames" t.out; then
  ok "T2VTiny from the files, 3 steps: losses $l"
else bad "T2VTiny from files: exit $a, $l $(tail -3 t.out)"; fi

echo "video_extract: $pass passed, $fail failed"
[ $fail = 0 ]
