#!/usr/bin/env bash
# Encoder balance over dp (issue 30 item 3; docs/conversations.md "Tile
# pools, buckets and encoder balance"): ConvHeavyPool (bench/conv_heavy.mm,
# a vision-heavy InternVL2 with a tile pool) at dp = 2 with tile buckets,
# on a skewed mix of resolutions: 3 samples in 4 one 28 x 28 image (1 tile),
# 1 in 4 three 168 x 28 images (7 tiles each at --max-tiles 6: 21 tiles).
# Each variant, the encoder balance on and off (--no-tile-balance), runs
# REPS times interleaved; per run, each rank's mean tiles a step and the
# mean gap between the ranks' tiles in a step, the time the ranks spent
# blocked in collectives (the gradient buckets' waits and the blocking
# all-reduces: in a step the less-loaded rank waits there for the other;
# the sum over both ranks), and the trainer's samples/s. Prints figures;
# does not fail on speed.
#   bench/encoder_balance.sh [STEPS=40] [REPS=3]
set -euo pipefail
SRC=$(cd "$(dirname "$0")/.." && pwd)
MMC=${MMC:-$SRC/build/mmc}
PY=${MMC_HF_VENV:-/var/cache/mmc-venv-hf}/bin/python
STEPS=${1:-40} REPS=${2:-3}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
W=$(mktemp -d)
trap 'rm -rf "$W"' EXIT
cd "$W"
"$PY" "$SRC/tests/conv_ref/make.py" "$W" > /dev/null # tok.json (and images we do not use)
"$PY" - <<'PY'
import json, random
from PIL import Image
rng = random.Random(7)
Image.new("RGB", (28, 28), (200, 30, 30)).save("img/small.png")
for k in range(3):
    im = Image.new("RGB", (168, 28))
    im.putdata([((x * 7 + k * 50) % 256, (y * 9) % 256, 90) for y in range(28) for x in range(168)])
    im.save("img/wide%d.png" % k)
with open("mix.jsonl", "w") as f:
    for i in range(400):
        big = rng.random() < 0.25
        imgs = ["wide0.png", "wide1.png", "wide2.png"] if big else ["small.png"]
        q = "<image>" * len(imgs) + "\nwhat colour is it?"
        f.write(json.dumps({"id": i, "image": imgs, "conversations": [
            {"from": "human", "value": q}, {"from": "gpt", "value": rng.choice(["red", "blue", "dark"])}]}) + "\n")
PY
"$MMC" compile "$SRC/bench/conv_heavy.mm" --model ConvHeavyPool --tile-buckets 2,4,6,8,12,16 -o tr > /dev/null
CPU=$(grep -m1 "model name" /proc/cpuinfo | cut -d: -f2 | sed 's/^ *//')
echo "encoder balance: ConvHeavyPool, dp = 2 (mpirun -np 2), B = 8, tile buckets 2..16 of K = 24,"
echo "$STEPS steps a run, $REPS runs a variant interleaved; $CPU, $(nproc) CPUs, load $(cut -d' ' -f1-3 /proc/loadavg)"
for r in $(seq "$REPS"); do
  for v in balanced batch-order; do
    extra=()
    [ $v = batch-order ] && extra=(--no-tile-balance)
    mpirun --oversubscribe -np 2 -x OMP_NUM_THREADS=1 ./tr --data mix.jsonl --images img --tokenizer tok.json \
      --max-tiles 6 --steps "$STEPS" --eval-batches 1 "${extra[@]}" --log $v.$r.jsonl > $v.$r.out 2>&1 ||
      { echo "run failed:"; tail -5 $v.$r.out; exit 1; }
    "$PY" - $v $r $v.$r.out $v.$r.jsonl <<'PY'
import json, re, sys
v, r, out, log = sys.argv[1:5]
waits, loads = {}, {}
for l in open(out):
    m = re.search(r"rank (\d+) of dp 2: tiles a step ([\d ]+).*?; ([\d.]+) ms blocked in collectives", l)
    if m:
        q = int(m.group(1))
        loads[q] = list(map(int, m.group(2).split()))
        waits[q] = float(m.group(3))
sps = [json.loads(l)["samples_per_s"] for l in open(log) if '"samples_per_s"' in l][-1]
gap = sum(abs(a - b) for a, b in zip(loads[0], loads[1])) / len(loads[0])
# a step's less-loaded rank waits for the other at the step's collectives: the two
# ranks' waits together are the waiting the imbalance (and the machine's noise) costs
print("%-11s run %s: %6.2f samples/s; tiles a step %5.1f / %5.1f, mean |gap| %4.1f; blocked in "
      "collectives %6.0f + %6.0f = %6.0f ms (%5.1f ms a step)"
      % (v, r, sps, sum(loads[0]) / len(loads[0]), sum(loads[1]) / len(loads[1]), gap,
         waits[0], waits[1], waits[0] + waits[1], (waits[0] + waits[1]) / len(loads[0])))
PY
  done
done
