#!/usr/bin/env bash
# Text-to-video offline features (stdlib_models/t2v.mm T2VTiny: the WF-VAE
# encoder and T5, frozen; VideoDiT; DDPM), docs/design/t2v.md "Offline
# features":
# 1. WF-VAE encoder weights by name: a weights file holding only encoder.*
#    (random, fixed by a numpy seed; WFVAETiny's names and shapes) loads into
#    the extractor and the online trainer (--init-from);
# 2. the extractor (--task extract) writes the manifest and shards: the
#    manifest's CRC32s equal zlib's of the shard tensors read back by
#    Python, the clip count, seed and one-clip shapes are the run's, the
#    labels are the clips' classes and the text ids their captions; under
#    mpirun -np 2 (each rank its share of the batches, rank 0 writing) the
#    directory is the one-rank run's byte for byte (manifest and shards);
# 3. 10 DiT steps on the stored features (--features) give the online
#    run's losses and eval loss bit for bit (the same compiled @latents and
#    @text_features on the same batches of B, so the same floats), and
#    features extracted without the weights file give other losses;
# 4. bad features directories: a missing manifest, a manifest of another
#    model (fingerprint), a truncated shard, a flipped byte in a shard, too
#    few held-out clips: a message
#    naming the file, exit 1.
set -uo pipefail
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
cd "$T"
export OMP_NUM_THREADS=1 OMP_WAIT_POLICY=passive
S="$MMC_SOURCE_DIR/stdlib_models"
pass=0 fail=0
ok() { pass=$((pass + 1)); echo "ok: $1"; }
bad() { fail=$((fail + 1)); echo "FAIL: $1"; }
"$MMC" compile "$S/t2v.mm" --model T2VTiny -O1 -o t2v || { echo "FAIL: compile"; exit 1; }
"$MMC" compile "$S/t2v.mm" --model T2VTiny --task extract -O1 -o t2vx || { echo "FAIL: compile extract"; exit 1; }
Q=(--eval-batches 1 --quiet)  # -O1: the two compiles take 7 s, not 15 s, at -O3

# ---- 1. a WF-VAE weights file: encoder.* only, random by a fixed seed ----
./t2v --steps 0 --save-weights init.st "${Q[@]}" > /dev/null 2>&1
/usr/bin/python3 - init.st vae.st <<'PY' || bad "writing the WF-VAE weights"
import json, struct, sys
import numpy as np
src, dst = sys.argv[1], sys.argv[2]
b = open(src, "rb").read(); n = struct.unpack("<Q", b[:8])[0]; h = json.loads(b[8:8 + n]); d = b[8 + n:]
rng = np.random.RandomState(7)
out = {}
for k in sorted(h):
    if k == "__metadata__" or not k.startswith("encoder."): continue
    s, e = h[k]["data_offsets"]
    w = np.frombuffer(d[s:e], dtype=np.float32).reshape(h[k]["shape"])
    sd = float(w.std()) or 0.05
    out[k] = (w + 0.5 * sd * rng.standard_normal(w.shape)).astype(np.float32)
hdr, off, blob = {}, 0, b""
for k, w in out.items():
    hdr[k] = {"dtype": "F32", "shape": list(w.shape), "data_offsets": [off, off + w.nbytes]}
    off += w.nbytes; blob += w.tobytes()
js = json.dumps(hdr).encode(); js += b" " * (-len(js) % 8)
open(dst, "wb").write(struct.pack("<Q", len(js)) + js + blob)
print(len(out), "encoder tensors")
PY

# ---- 2. extract ----
./t2vx --out F --init-from vae.st --clips 40 --heldout 4 > x.out 2> x.err; a=$?
if [ $a = 0 ] && grep -q "^extractor: 60 parameters loaded from vae.st" x.err; then ok "extractor: 60 WF-VAE encoder tensors loaded by name"
else bad "extract: exit $a, $(cat x.err)"; fi
if /usr/bin/python3 - F <<'PY'; then ok "manifest: CRC32s, shapes, clip count, seed, labels and captions hold"
import json, struct, sys, zlib
import numpy as np
d = sys.argv[1]
m = json.load(open(d + "/manifest.json"))
def load(p):
    b = open(p, "rb").read(); n = struct.unpack("<Q", b[:8])[0]; h = json.loads(b[8:8 + n]); z = b[8 + n:]
    return {k: (v, z[v["data_offsets"][0]:v["data_offsets"][1]]) for k, v in h.items() if k != "__metadata__"}
assert m["format"] == "mmc-features" and m["model"] == "T2VTiny" and m["seed"] == 42, m
assert m["fingerprint"].startswith("T2VTiny-") and m["frames"] == 17 and m["init_from"] == "vae.st"
assert m["tensors"]["latents"] == {"dtype": "F32", "shape": [4, 5, 8, 8]}, m["tensors"]
assert m["tensors"]["text_features"] == {"dtype": "F32", "shape": [8, 32]}
assert m["train"]["clips"] == 40 and m["heldout"]["clips"] == 4
for split in ("train", "heldout"):
    for sh in m[split]["shards"]:
        t = load(d + "/" + sh["file"])
        for k, (v, raw) in t.items():
            assert "%08x" % zlib.crc32(raw) == sh["crc32"][k], (sh["file"], k)
            assert v["shape"][0] == sh["clips"]
lab = np.frombuffer(load(d + "/train-00000.safetensors")["label"][1], np.int32)
ids = np.frombuffer(load(d + "/train-00000.safetensors")["text"][1], np.int32).reshape(40, 8)
assert lab.min() >= 0 and lab.max() <= 9 and len(set(lab.tolist())) > 3, lab
# a caption is 3-6 words, EOS (1), then PAD (0)
for r in ids:
    e = list(r).index(1)
    assert 3 <= e <= 6 and all(x >= 2 for x in r[:e]) and all(x == 0 for x in r[e + 1:]), r
# the same class gives the same class words (the caption's first words)
null = load(d + "/null.safetensors")
assert list(np.frombuffer(null["text"][1], np.int32)) == [1, 0, 0, 0, 0, 0, 0, 0]
PY
else bad "manifest checks"; fi
. "$MMC_SOURCE_DIR/tests/tools/lib.sh"
timeout 300 mpirun --oversubscribe -x OMP_NUM_THREADS -x OMP_WAIT_POLICY -x LSAN_OPTIONS -np 2 \
  ./t2vx --out F2 --init-from vae.st --clips 40 --heldout 4 > x2.out 2> x2.err; a=$?
same=1
for f in F/*; do cmp -s "$f" "F2/${f#F/}" || same=0; done
[ "$(ls F | wc -l)" = "$(ls F2 2> /dev/null | wc -l)" ] || same=0
if [ $a = 0 ] && [ $same = 1 ] && grep -q "into F2 (encoders crc32 [0-9a-f]*; 2 ranks)" x2.err; then
  ok "extractor under mpirun -np 2: the one-rank directory byte for byte ($(ls F2 | wc -l) files)"
else bad "extract on 2 ranks: exit $a, same $same, $(cat x2.err)"; fi

# ---- 3. online against offline, 10 steps ----
./t2v --steps 10 --init-from encoder=vae.st --log on.jsonl "${Q[@]}" > /dev/null 2> on.err || bad "online run: $(cat on.err)"
./t2v --steps 10 --features F --log off.jsonl "${Q[@]}" > /dev/null 2> off.err || bad "offline run: $(cat off.err)"
./t2vx --out F0 --clips 40 --heldout 4 --quiet 2> /dev/null
./t2v --steps 10 --features F0 --log f0.jsonl "${Q[@]}" > /dev/null 2>&1
if /usr/bin/python3 - <<'PY'; then ok "offline features = online encoding, 10 steps and the eval loss bit for bit; without the WF-VAE weights the losses differ"
import json
def losses(p):
    r = [json.loads(l) for l in open(p)]
    return [x["loss"] for x in r if "loss" in x], [x["eval_loss"] for x in r if "eval_loss" in x]
on, off, f0 = losses("on.jsonl"), losses("off.jsonl"), losses("f0.jsonl")
print("online", on[0], on[1]); print("offline", off[0], off[1])
assert len(on[0]) == 10 and on == off, (on, off)
assert max(abs(a - b) for a, b in zip(on[0][:1], f0[0][:1])) > 1e-4, f0
PY
else bad "online against offline"; fi

# ---- 4. bad features directories ----
expect() { # name, expected message (grep -E), dir or extra flags...
  local what=$1 pat=$2; shift 2
  ./t2v --steps 1 "${Q[@]}" "$@" > /dev/null 2> bad.err; local a=$?
  if [ $a = 1 ] && grep -Eq "^trainer: error: $pat" bad.err && ! grep -q "Sanitizer\|runtime error" bad.err; then ok "$what"
  else bad "$what: exit $a, $(cat bad.err)"; fi
}
cp -r F M && rm M/manifest.json
expect "a missing manifest" "M/manifest.json: cannot open: No such file" --features M
cp -r F O && sed -i 's/"fingerprint": "T2VTiny-[0-9a-f]*"/"fingerprint": "T2VOther-0123456789abcdef"/' O/manifest.json
expect "a manifest of another model" "O/manifest.json: features of model fingerprint 'T2VOther-0123456789abcdef', this model's is 'T2VTiny-" --features O
cp -r F R && truncate -s -100 R/train-00000.safetensors
expect "a truncated shard" "R/train-00000.safetensors: .*(truncated|short|size|end)" --features R
cp -r F X && /usr/bin/python3 -c "
import sys; p = 'X/heldout-00000.safetensors'; b = bytearray(open(p, 'rb').read()); b[-7] ^= 0x10; open(p, 'wb').write(b)"
expect "a flipped byte in a shard" "X/heldout-00000.safetensors: .*(CRC|crc)" --features X
expect "too few held-out clips for the evaluation" "--features F: 4 held-out clips stored, the evaluation takes 8" --features F --eval-batches 2

echo "t2v_features: $pass passed, $fail failed"
[ $fail -eq 0 ]
