#!/usr/bin/env bash
# Per-sub-model plans against uniform plans (issue 31; docs/subplans.md) on
# a vision-heavy InternVL2 (bench/vl_heavy.mm: an InternViT of 4 layers of
# width 128 before an LLM of 2 layers of width 128, B = 16), 4 ranks of one
# thread each under mpirun --oversubscribe:
#   uniform        dp = 4;  tp = 2 x dp = 2;  tp = 4
#   per sub-model  vision dp = 4 + llm tp = 2 x dp = 2;  vision dp = 4 + llm tp = 4
# First the FLOPs of a step per sub-model from `mmc plan --json` (its
# subplans' step_flops, whole batch), per sample, to show the vision encoder
# costs at least the LLM's. Then ROUNDS rounds of every plan for STEPS steps,
# the order reversed every other round so that drift of the machine falls on
# both families alike; a run's rate is its steady state (the trainer's
# running samples/s differenced between step SKIP and the last step). Prints
# each run's rate, each plan's median, the best of each family and their
# ratio, with the CPU and the load average before and after (the machine may
# be shared: read the figures beside the load). Never fails on speed.
#   bench/subplans.sh [build dir]   (STEPS=30 ROUNDS=3 SKIP=5: about 2 min;
#                                    e.g. STEPS=200 ROUNDS=5 for a longer run)
set -uo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
B=${1:-$HERE/../build}
MMC=$B/mmc
STEPS=${STEPS:-30}
ROUNDS=${ROUNDS:-3}
SKIP=${SKIP:-5}
NP=4
BATCH=16
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
# name:model:family
PLANS=("dp4:VLHeavyDp4:uniform" "tp2dp2:VLHeavyTp2Dp2:uniform" "tp4:VLHeavyTp4:uniform"
  "vdp4+ltp2dp2:VLHeavySubTp2:sub-model" "vdp4+ltp4:VLHeavySubTp4:sub-model")
for p in "${PLANS[@]}"; do
  IFS=: read -r name model fam <<< "$p"
  "$MMC" compile "$HERE/vl_heavy.mm" -I "$HERE/../stdlib_models" --model "$model" -o "$T/$name" ||
    { echo "compile $model failed"; exit 1; }
done
"$MMC" plan "$HERE/vl_heavy.mm" -I "$HERE/../stdlib_models" --model VLHeavySubTp2 --json > "$T/plan.json" || exit 1
/usr/bin/python3 - "$T/plan.json" "$BATCH" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
B = int(sys.argv[2])
f = {s["name"] or "(the rest)": s["step_flops"] for s in d["subplans"]}
for k, v in f.items():
    print("FLOPs per sample (mmc plan --json, @train: forward, backward, update): %-11s %8.1f MFLOP" % (k, v / B / 1e6))
print("vision / llm FLOPs per sample: %.2f" % (f["vision"] / f["llm"]))
PY
echo "CPU: $(lscpu | sed -n 's/^Model name: *//p'), $(nproc) CPUs; $NP ranks of 1 thread"
echo "load average before: $(cut -d' ' -f1-3 /proc/loadavg)"
rate() { # jsonl: steady-state samples/s between step SKIP and the last
  /usr/bin/python3 - "$1" "$BATCH" "$SKIP" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if '"samples_per_s"' in l]
B, skip = int(sys.argv[2]), int(sys.argv[3])
a, b = rows[skip - 1], rows[-1]
t = b["step"] * B / b["samples_per_s"] - a["step"] * B / a["samples_per_s"]
print("%.1f" % ((b["step"] - a["step"]) * B / t))
PY
}
for round in $(seq "$ROUNDS"); do
  order=("${PLANS[@]}")
  if [ $((round % 2)) = 0 ]; then
    order=()
    for ((i = ${#PLANS[@]} - 1; i >= 0; i--)); do order+=("${PLANS[$i]}"); done
  fi
  line="round $round:"
  for p in "${order[@]}"; do
    IFS=: read -r name model fam <<< "$p"
    if ! timeout 600 mpirun --oversubscribe -np $NP "$T/$name" --threads 1 --steps "$STEPS" --eval-batches 1 \
         --quiet --log "$T/$name.$round.jsonl" > "$T/$name.$round.out" 2>&1; then
      echo "$name: mpirun failed"; tail -5 "$T/$name.$round.out"; continue
    fi
    r=$(rate "$T/$name.$round.jsonl")
    echo "$name $r" >> "$T/rates"
    line="$line $name $r"
  done
  echo "$line  (load $(cut -d' ' -f1 /proc/loadavg))"
done
echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
/usr/bin/python3 - "$T/rates" "${PLANS[@]}" <<'PY'
import statistics, sys
rates = {}
for l in open(sys.argv[1]):
    n, r = l.split()
    rates.setdefault(n, []).append(float(r))
best = {}
print("%-16s %-10s %6s %12s" % ("plan", "family", "runs", "median s/s"))
for p in sys.argv[2:]:
    name, _, fam = p.split(":")
    if name not in rates:
        continue
    m = statistics.median(rates[name])
    print("%-16s %-10s %6d %12.1f" % (name, fam, len(rates[name]), m))
    if fam not in best or m > best[fam][1]:
        best[fam] = (name, m)
for fam, (name, m) in best.items():
    print("best %-9s %-16s %8.1f samples/s" % (fam, name, m))
if "uniform" in best and "sub-model" in best:
    print("best per-sub-model / best uniform: %.3f" % (best["sub-model"][1] / best["uniform"][1]))
# the same LLM layout, only the vision encoder's differing (dp = 4 against the mesh's)
med = {n: statistics.median(r) for n, r in rates.items()}
for sub, uni in (("vdp4+ltp2dp2", "tp2dp2"), ("vdp4+ltp4", "tp4")):
    if sub in med and uni in med:
        print("same LLM layout: %s / %s: %.3f" % (sub, uni, med[sub] / med[uni]))
PY
