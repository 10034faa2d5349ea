#!/usr/bin/env bash
# Training-step speed of mmc against PyTorch written the way a user writes it
# (bench/torch_user.py: nn.Modules, torch.optim.AdamW, fp32), same model,
# batch and thread count. The two programs alternate, RUNS times each; per
# program: median and min-max ms per step, MFU (3 x the forward FLOPs of
# `mmc stats` per step, against oneDNN's fp32 matmul peak measured now by
# bench/peak.c) and peak RSS; then the ratio of the medians (mmc / PyTorch,
# below 1: mmc is faster). The header records the CPU, the BLAS libraries,
# the threads and each model's load average. A benchmark, not a test.
# Usage: bench/run.sh [MODEL...]   (default ViTFashion GPT2Tiny GPT2; needs build/mmc)
#   RUNS (5), THREADS (nproc), STEPS (per model: 10, 30, 3) can be set.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
MMC=${MMC:-$ROOT/build/mmc}
RUNS=${RUNS:-5}
THREADS=${THREADS:-$(nproc)}
PY=/usr/bin/python3
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
cd "$T"
cc -O2 "$ROOT/bench/peak.c" -ldnnl -o peak
# the best of three: other programs' load only ever lowers it
PEAK=$(for i in 1 2 3; do OMP_NUM_THREADS=$THREADS ./peak 2048; done | sort -g | tail -1)
avx=none; grep -qw avx2 /proc/cpuinfo && avx=avx2; grep -qw avx512f /proc/cpuinfo && avx=avx512f
grep -qw avx512_bf16 /proc/cpuinfo && avx="$avx, avx512_bf16"
echo "cpu: $(lscpu | sed -n 's/^Model name: *//p') (family $(lscpu | sed -n 's/^CPU family: *//p') model $(lscpu | sed -n 's/^Model: *//p'); $avx), $(nproc) CPUs; threads $THREADS per program"
echo "oneDNN fp32 matmul peak now: $PEAK GFLOP/s (2048^3 sgemm, best of 3, $THREADS threads; under load it is low and MFU high)"
[ $# -gt 0 ] || set -- ViTFashion GPT2Tiny GPT2
for model in "$@"; do
  case $model in
    ViTFashion) file=vit_fashion.mm B=64 S=0 steps=${STEPS:-10} ;;
    GPT2Tiny) file=gpt2.mm B=4 S=32 steps=${STEPS:-30} ;;
    GPT2) file=gpt2.mm B=4 S=64 steps=${STEPS:-3} ;;
    *) echo "unknown model $model (ViTFashion, GPT2Tiny, GPT2)" >&2; exit 2 ;;
  esac
  sets=(--set B=$B); seq=(); [ "$S" != 0 ] && sets+=(--set T=$S) && seq=(--seq "$S")
  "$MMC" compile "$ROOT/stdlib_models/$file" --model "$model" "${sets[@]}" -o "$model"
  flops=$("$MMC" stats "$ROOT/stdlib_models/$file" --model "$model" "${sets[@]}" | sed -n 's/.*forward FLOPs *\([0-9]*\).*/\1/p')
  load=$(cut -d' ' -f1-3 /proc/loadavg)
  : > mmc.txt; : > torch.txt
  for r in $(seq "$RUNS"); do
    rm -f l.jsonl
    ./"$model" --threads "$THREADS" --steps $((steps + 3)) --eval-batches 1 --log l.jsonl > out.txt 2> err.txt
    omp=$(sed -n 's/^trainer: .* rank[s]*, //p' err.txt)
    # PyTorch's OpenMP waits as the trainer chose to (spinning threads on a busy machine cost either 100x)
    case $omp in *"waits actively"*) wait=active ;; *) wait=passive ;; esac
    ms=$($PY - l.jsonl "$B" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if '"samples_per_s"' in l]
a, b, B = rows[2], rows[-1], int(sys.argv[2])  # after 3 warm-up steps (running averages differenced)
print("%.3f" % ((b["step"] * B / b["samples_per_s"] - a["step"] * B / a["samples_per_s"]) / (b["step"] - a["step"]) * 1000))
PY
)
    echo "$ms $(sed -n 's/^peak RSS: \([0-9]*\) bytes.*/\1/p' out.txt)" >> mmc.txt
    OMP_WAIT_POLICY=$wait $PY "$ROOT/bench/torch_user.py" "$model" --batch "$B" "${seq[@]}" --steps "$steps" --threads "$THREADS" > t.json
    $PY -c 'import json; d = json.load(open("t.json")); print("%.3f %d" % (d["ms_per_step"], d["peak_rss"]))' >> torch.txt
  done
  $PY - "$model" "$B x ${S/#0/-}" "$flops" "$PEAK" "$load" "$(cut -d' ' -f1-3 /proc/loadavg)" "$omp" <<'PY'
import json, statistics, sys
model, shape, flops, peak, load0, load1, omp = sys.argv[1:]
d = json.load(open("t.json"))
print("\n%s (B x T %s), load average %s -> %s" % (model, shape, load0, load1))
print("  mmc threads: %s" % omp)
print("  torch %s, threads %d, OMP_WAIT_POLICY as mmc's, BLAS: %s" % (d["torch"], d["threads"], d["blas"]))
med = {}
for name in ("mmc", "torch"):
    rows = [tuple(map(float, l.split())) for l in open(name + ".txt") if l.strip()]
    ms = [r[0] for r in rows]
    m = statistics.median(ms)
    med[name] = m
    mfu = 3 * float(flops) / (m / 1000) / (float(peak) * 1e9)
    print("  %-6s median %10.2f ms/step  (min %.2f, max %.2f, %d runs)  MFU %5.1f%%  peak RSS %.0f MiB" %
          (name, m, min(ms), max(ms), len(ms), 100 * mfu, max(r[1] for r in rows) / 2**20))
print("  ratio mmc / torch (medians): %.2f" % (med["mmc"] / med["torch"]))
PY
done
