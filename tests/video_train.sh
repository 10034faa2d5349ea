#!/usr/bin/env bash
# WF-VAE trained from video files (docs/video.md "Training from video
# files"): the runtime's generated clips (mmc-clips' PNG strips) written by
# Debian's ffmpeg as H.264 RGB (lossless) and H.264 4:2:0 (near-lossless),
# listed in OpenSoraPlan's JSON (tests/video_ref/write_clips.py):
# 1. the clips the trainer decoded (--dump-inputs, 3 steps of B = 2: one
#    epoch of the 6 files) are the 6 clips, each once; lossless: equal to
#    the byte (PSNR inf), 4:2:0 CRF 12: PSNR above 40 dB (printed);
#    (under ASan the lossless run only);
#    --video-fps 16 from the 8 fps files: each row its clip's frames
#    0 0 1 1 2; the same from a data section's video_fps = 16 (no flags), and
#    --video-fps 8 over it gives every frame;
# 2. the JSONL list of the same files gives the JSON list's losses;
# 3. serial and dp = 2 (mpirun) give the same losses (1e-5);
# 4. 2 steps, a checkpoint, --resume to 4: the straight run's losses;
# 5. bad data, each an entry of a list of 6 (--bad-samples fail: exit 1, a
#    message naming the list, the entry (and the sample, once decoding),
#    the file; skip (the first two): the 3 steps run, skipped_samples 1 in
#    the log): a missing
#    file, a truncated MP4, a file of fewer frames than the model needs, a
#    file of another resolution than its entry says, one smaller than the
#    model; too few frames declared; a JSONL line that is not JSON.
set -uo pipefail
. "$MMC_SOURCE_DIR/tests/tools/lib.sh"
. "$MMC_SOURCE_DIR/tests/video_ref/setup.sh"
W="$MMC_SOURCE_DIR/stdlib_models/wfvae.mm"
# -O0: the compile takes 0.4 s, not 7 s; the kernels are oneDNN's either way
"$MMC" compile "$W" --model WFVAETiny --set F=5 -O0 -o wf > c.out 2>&1 || { echo "FAIL: compile: $(cat c.out)"; exit 1; }
videos_of 5 0
Q=(--eval-batches 1 --quiet)
losses() { "$PY" -c 'import json,sys; print(" ".join(repr(json.loads(l)["loss"]) for l in open(sys.argv[1]) if "\"loss\"" in l))' "$1"; }
same() { "$PY" -c 'import sys; a=[float(x) for x in sys.argv[1].split()]; b=[float(x) for x in sys.argv[2].split()]; sys.exit(not (a and len(a)==len(b) and all(abs(x-y)<=1e-5*max(1,abs(x)) for x,y in zip(a,b))))' "$1" "$2"; }

# ---- 1. the decoded clips ----
./wf --data v/rgb.json --steps 4 "${Q[@]}" --dump-inputs d1 --log s.log > o1 2>&1; a=$?
r=$("$PY" "$REF/check_rows.py" v/frames.npy inf d1/step-00000{1,2,3}.safetensors 2>&1); c=$?
[ $a = 0 ] && [ $c = 0 ] && ok "H.264 RGB -qp 0: $r" || bad "lossless: exit $a, $r $(tail -3 o1)"
if [ "$SAN" = 0 ]; then # under ASan (SAN=1): the same code as the lossless run, left out
./wf --data v/lossy.json --steps 3 "${Q[@]}" --dump-inputs d2 > o2 2>&1; a=$?
r=$("$PY" "$REF/check_rows.py" v/frames.npy 40 d2/step-00000{1,2,3}.safetensors 2>&1); c=$?
[ $a = 0 ] && [ $c = 0 ] && ok "H.264 4:2:0 CRF 12: $r" || bad "4:2:0: exit $a, $r $(tail -3 o2)"
fi

# --video-fps 16 from 8 fps files: source frames 0 0 1 1 2 (the step rule)
./wf --data v/rgb.json --steps 1 "${Q[@]}" --video-fps 16 --dump-inputs d3 > o6 2>&1; a=$?
r=$("$PY" - v/frames.npy d3/step-000001.safetensors <<'PY' 2>&1
import json, struct, sys
import numpy as np
ref = np.load(sys.argv[1]).astype(np.float32) / np.float32(255)
b = open(sys.argv[2], "rb").read(); n = struct.unpack("<Q", b[:8])[0]; h = json.loads(b[8:8 + n])["video"]
v = np.frombuffer(b[8 + n + h["data_offsets"][0]:8 + n + h["data_offsets"][1]], np.float32).reshape(h["shape"])
for row in v[:, 0]:
    hits = [i for i in range(len(ref)) if np.array_equal(row, ref[i][[0, 0, 1, 1, 2]])]
    assert len(hits) == 1, "a row is no clip's frames 0 0 1 1 2"
print("rows are their clips' frames 0 0 1 1 2")
PY
); c=$?
[ $a = 0 ] && [ $c = 0 ] && ok "--video-fps 16 from 8 fps: $r" || bad "--video-fps: exit $a, $r $(tail -2 o6)"

# the same from a data section (data { source = ...; video_fps = 16 }, no flags): the same
# rows; --video-fps 8 over the section's 16: the rows of every frame (step 1 of d1)
printf 'import "wfvae.mm"\nmodel WS extends WFVAETiny {\n  data { format = clips_video; source = "v/rgb.json"; video_fps = 16 }\n}\n' > ws.mm
"$MMC" compile ws.mm --model WS --set F=5 -O0 -o ws > c2.out 2>&1 &&
  ./ws --steps 1 "${Q[@]}" --dump-inputs d4 > o7 2>&1 && cmp -s d3/step-000001.safetensors d4/step-000001.safetensors &&
  ok "data { video_fps = 16 }: the rows of --video-fps 16" || bad "the data section's video_fps: $(tail -2 c2.out o7)"
./ws --steps 1 "${Q[@]}" --video-fps 8 --dump-inputs d5 > o8 2>&1 && cmp -s d1/step-000001.safetensors d5/step-000001.safetensors &&
  ! cmp -s d4/step-000001.safetensors d5/step-000001.safetensors &&
  ok "--video-fps 8 over the section's 16" || bad "--video-fps over the section: $(tail -2 o8)"

# ---- 2. JSONL ----
./wf --data v/rgb.jsonl --steps 4 "${Q[@]}" --log jl.log > o3 2>&1; a=$?
same "$(losses s.log)" "$(losses jl.log)" && ok "JSONL list: the JSON list's losses ($(losses jl.log))" \
  || bad "JSONL: exit $a, $(losses jl.log) against $(losses s.log); $(tail -2 o3)"

# ---- 3. dp = 2 ----
MPIRUN=(timeout 300 mpirun --oversubscribe -x OMP_NUM_THREADS -x OMP_WAIT_POLICY -x LSAN_OPTIONS -np 2)
if command -v mpirun > /dev/null && "$MMC" compile "$W" --model WFVAETiny --set F=5 --dp 2 -O0 -o wf2 > c2.out 2>&1; then
  "${MPIRUN[@]}" ./wf2 --data v/rgb.json --steps 4 "${Q[@]}" --log d.log > o4 2>&1; a=$?
  same "$(losses s.log)" "$(losses d.log)" && ok "dp = 2: the serial losses ($(losses d.log))" \
    || bad "dp = 2: exit $a, $(losses d.log) against $(losses s.log); $(tail -3 o4)"
else
  bad "dp = 2 compile: $(tail -3 c2.out)"
fi

# ---- 4. resume ----
{
  ./wf --data v/rgb.json --steps 2 "${Q[@]}" --ckpt ck --log r.log > /dev/null 2>&1 &&
    ./wf --data v/rgb.json --steps 4 "${Q[@]}" --ckpt ck --resume --log r.log > o5 2>&1
  a=$?
  same "$(losses s.log)" "$(losses r.log)" && ok "2 steps, resumed to 4: the straight run's losses" \
    || bad "resume: exit $a, $(losses r.log) against $(losses s.log); $(tail -2 o5)"
}

# ---- 5. bad data ----
# a list of the 6 good files with entry 1 replaced by what is given
badlist() { # NAME 'python dict expression for entry 1'
  "$PY" - v/rgb.json "v/$1.json" "$2" <<'PY'
import json, sys
e = json.load(open(sys.argv[1])); e[1] = dict(e[1], **eval(sys.argv[3])); json.dump(e, open(sys.argv[2], "w"))
PY
}
head -c 3000 v/rgb_1.mp4 > v/cut.mp4
"$PY" - <<'PY' || bad "writing the bad videos"
import subprocess, numpy as np
f = np.load("v/frames.npy")[1]
def enc(frames, size, out):
    rgb = np.repeat(frames[..., None], 3, axis=3)
    subprocess.run(["ffmpeg", "-v", "error", "-y", "-f", "rawvideo", "-pix_fmt", "rgb24", "-s", size, "-r", "8",
                    "-i", "-", "-c:v", "libx264rgb", "-qp", "0", "v/" + out], input=rgb.tobytes(), check=True)
enc(f[:3], "64x64", "short.mp4")
enc(np.pad(f, ((0, 0), (0, 16), (0, 0))), "64x80", "tall.mp4")
enc(f[:, :48, :48], "48x48", "small.mp4")
PY
badlist missing '{"path": "nowhere.mp4"}'
badlist cut '{"path": "cut.mp4"}'
badlist short '{"path": "short.mp4", "num_frames": 3}'
badlist short2 '{"path": "short.mp4"}'
badlist tall '{"path": "tall.mp4"}'
badlist small '{"path": "small.mp4", "resolution": {"height": 48, "width": 48}}'
printf '{"path": "rgb_0.mp4", "cap": "a", "num_frames": 5, "fps": 8, "resolution": {"height": 64, "width": 64}}\n{"path": \n' > v/broken.jsonl
case_bad() { # LIST WHAT-THE-MESSAGE-HOLDS SKIPPABLE DESCRIPTION
  ./wf --data "v/$1" --steps 3 "${Q[@]}" > "b_$1.out" 2>&1; a=$?
  if [ $a = 1 ] && grep -Eq -- "$2" "b_$1.out"; then ok "$4: exit 1, $(grep -m1 error "b_$1.out" | sed "s|$T/||g")"
  else bad "$4: exit $a, $(tail -2 "b_$1.out")"; fi
  [ "$3" = 1 ] || return 0
  rm -f sk.log
  ./wf --data "v/$1" --steps 3 "${Q[@]}" --bad-samples skip --log sk.log > "s_$1.out" 2>&1; a=$?
  n=$("$PY" -c 'import json,sys; print([json.loads(l) for l in open(sys.argv[1]) if "\"loss\"" in l][-1].get("skipped_samples"))' sk.log 2>/dev/null)
  [ $a = 0 ] && [ "$n" = 1.0 -o "$n" = 1 ] && ok "$4, --bad-samples skip: 3 steps, skipped_samples $n" \
    || bad "$4 skip: exit $a, skipped $n, $(tail -2 "s_$1.out")"
}
case_bad missing.json 'missing.json: entry 1: "path": .*nowhere.mp4: No such file' 1 "a missing file"
case_bad cut.json 'cut.json: entry 1 \(sample [0-9]+\): .*cut.mp4' 1 "a truncated MP4"
case_bad short.json 'short.json: entry 1: "num_frames": 3 frames at 8 fps are too few' 0 "too few frames declared"
case_bad short2.json 'short2.json: entry 1 \(sample [0-9]+\): .*short.mp4.*frame' 0 "a file of 3 frames declared 5"
case_bad tall.json 'tall.json: entry 1 \(sample [0-9]+\): .*tall.mp4: the frames are 64x80 .*says 64x64' 0 "another resolution than declared"
case_bad small.json 'small.json: entry 1 \(sample [0-9]+\): .*small.mp4: 48x48 frames are smaller than the model.s 64x64' 0 "smaller than the model"
case_bad broken.jsonl 'broken.jsonl:2: not JSON' 0 "a JSONL line that is not JSON"

echo "video_train: $pass passed, $fail failed"
[ $fail = 0 ]
