#!/usr/bin/env bash
# Training-step speed of mmc against PyTorch written the way a user writes it
# (bench/torch_user.py: nn.Modules, torch.optim.AdamW, fp32; torch.autocast
# bf16 beside mmc's bf16 when the compiler has --precision), same model and
# batch. Each program runs at its own defaults: the trainer with no flag and
# no environment variable (it chooses its threads and OpenMP wait and says so
# in its start line), PyTorch as a user starts it, with torch.set_num_threads
# of the CPUs (Debian's torch 1.13 starts with 1 thread on a 2-CPU machine)
# and libgomp's default wait (spin 300000 rounds, then sleep). On a loaded machine
# libgomp's default spin costs PyTorch up to 20x, so PyTorch also runs with
# OMP_WAIT_POLICY=passive, and the ratio is given against each and against
# the faster of the two (the conservative one).
# The programs alternate (mmc, torch, torch passive), RUNS times each; per
# program: median and min-max ms per step, MFU (3 x the forward FLOPs of
# `mmc stats` per step, against oneDNN's fp32 matmul peak measured now by
# bench/peak.c) and peak RSS; then the ratios of the medians (mmc / PyTorch,
# below 1: mmc is faster). The header records the CPU, the BLAS libraries,
# the threads, and each model's load average before and after. A benchmark,
# not a test.
# Usage: bench/run.sh [MODEL...]   (default ViTFashion GPT2Tiny GPT2 InternVL2Tiny;
#   needs build/mmc). RUNS (5) and STEPS (per model: 10, 30, 3, 30) can be set.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
MMC=${MMC:-$ROOT/build/mmc}
RUNS=${RUNS:-5}
TORCH_WAITS=${TORCH_WAITS:-default passive}
PY=/usr/bin/python3
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
cd "$T"
cc -O2 "$ROOT/bench/peak.c" -ldnnl -o peak
# the best of three: other programs' load only ever lowers it
PEAK=$(for i in 1 2 3; do ./peak 2048; done | sort -g | tail -1)
avx=none; grep -qw avx2 /proc/cpuinfo && avx=avx2; grep -qw avx512f /proc/cpuinfo && avx=avx512f
grep -qw avx512_bf16 /proc/cpuinfo && avx="$avx, avx512_bf16"
echo "cpu: $(lscpu | sed -n 's/^Model name: *//p') (family $(lscpu | sed -n 's/^CPU family: *//p') model $(lscpu | sed -n 's/^Model: *//p'); $avx), $(nproc) CPUs"
echo "oneDNN fp32 matmul peak now: $PEAK GFLOP/s (2048^3 sgemm, best of 3, oneDNN's default threads; under load it is low and MFU high)"
echo "environment: OMP_NUM_THREADS=${OMP_NUM_THREADS-unset} OMP_WAIT_POLICY=${OMP_WAIT_POLICY-unset} GOMP_SPINCOUNT=${GOMP_SPINCOUNT-unset}"
precisions=(fp32)
"$MMC" compile --help 2>&1 | grep -q -- --precision && precisions+=(bf16)
[ $# -gt 0 ] || set -- ViTFashion GPT2Tiny GPT2 InternVL2Tiny
for model in "$@"; do
  case $model in
    ViTFashion) file=vit_fashion.mm B=64 S=0 steps=${STEPS:-10} ;;
    GPT2Tiny) file=gpt2.mm B=4 S=32 steps=${STEPS:-30} ;;
    GPT2) file=gpt2.mm B=4 S=64 steps=${STEPS:-3} ;;
    InternVL2Tiny) file=internvl2.mm B=8 S=16 steps=${STEPS:-30} ;;
    *) echo "unknown model $model (ViTFashion, GPT2Tiny, GPT2, InternVL2Tiny)" >&2; exit 2 ;;
  esac
  for prec in "${precisions[@]}"; do
    sets=(--set B=$B); seq=(); [ "$S" != 0 ] && sets+=(--set T=$S) && seq=(--seq "$S")
    pflag=(); tflag=(); [ "$prec" = bf16 ] && pflag=(--precision bf16) && tflag=(--bf16)
    "$MMC" compile "$ROOT/stdlib_models/$file" --model "$model" "${sets[@]}" "${pflag[@]}" -o "$model"
    flops=$("$MMC" stats "$ROOT/stdlib_models/$file" --model "$model" "${sets[@]}" | sed -n 's/.*forward FLOPs *\([0-9]*\).*/\1/p')
    : > mmc.txt; : > torch.txt; : > passive.txt; : > loads.txt; : > omp.txt
    for r in $(seq "$RUNS"); do
      rm -f l.jsonl
      echo "$(cut -d' ' -f1 /proc/loadavg)" >> loads.txt
      env -u OMP_NUM_THREADS -u OMP_WAIT_POLICY -u GOMP_SPINCOUNT \
        ./"$model" --steps $((steps + 3)) --eval-batches 1 --log l.jsonl > out.txt 2> err.txt
      sed -n 's/^trainer: .* rank[s]*, //p' err.txt >> omp.txt
      ms=$($PY - l.jsonl "$B" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if '"samples_per_s"' in l]
a, b, B = rows[2], rows[-1], int(sys.argv[2])  # after 3 warm-up steps (running averages differenced)
print("%.3f" % ((b["step"] * B / b["samples_per_s"] - a["step"] * B / a["samples_per_s"]) / (b["step"] - a["step"]) * 1000))
PY
)
      echo "$ms $(sed -n 's/^peak RSS: \([0-9]*\) bytes.*/\1/p' out.txt)" >> mmc.txt
      for variant in $TORCH_WAITS; do
        [ $variant = default ] && variant=torch
        wait=(); [ $variant = passive ] && wait=(OMP_WAIT_POLICY=passive)
        env -u OMP_NUM_THREADS -u OMP_WAIT_POLICY -u GOMP_SPINCOUNT "${wait[@]}" \
          $PY "$ROOT/bench/torch_user.py" "$model" --batch "$B" "${seq[@]}" "${tflag[@]}" --steps "$steps" \
          --threads "$(nproc)" > t.json
        $PY -c 'import json; d = json.load(open("t.json")); print("%.3f %d" % (d["ms_per_step"], d["peak_rss"]))' >> $variant.txt
      done
    done
    echo "$(cut -d' ' -f1 /proc/loadavg)" >> loads.txt
    $PY - "$model" "$prec" "$B x ${S/#0/-}" "$flops" "$PEAK" <<'PY'
import json, statistics, sys
model, prec, shape, flops, peak = sys.argv[1:]
d = json.load(open("t.json"))
loads = [l.strip() for l in open("loads.txt")]
print("\n%s %s (B x T %s), 1-minute load average before each run and after: %s" % (model, prec, shape, " ".join(loads)))
import re
lines = [l.strip() for l in open("omp.txt")]
others = [m.group(1) for m in (re.search(r"([\d.]+) other runnable", l) for l in lines) if m]
omp = sorted(set(re.sub(r", [\d.]+ other runnable tasks", "", l) for l in lines))
print("  mmc threads (its start line): %s%s" % (" | ".join(omp), "; other runnable tasks at its starts: " + " ".join(others) if others else ""))
print("  torch %s, threads %d (torch.set_num_threads), BLAS: %s" % (d["torch"], d["threads"], d["blas"]))
med = {}
for name, label in (("mmc", "mmc"), ("torch", "torch"), ("passive", "torch, OMP_WAIT_POLICY=passive")):
    rows = [tuple(map(float, l.split())) for l in open(name + ".txt") if l.strip()]
    if not rows:
        continue
    ms = [r[0] for r in rows]
    m = statistics.median(ms)
    med[name] = m
    mfu = 3 * float(flops) / (m / 1000) / (float(peak) * 1e9)
    print("  %-32s median %10.2f ms/step  (min %.2f, max %.2f, %d runs)  MFU %5.1f%%  peak RSS %.0f MiB" %
          (label, m, min(ms), max(ms), len(ms), 100 * mfu, max(r[1] for r in rows) / 2**20))
ratios = ["%.2f against %s" % (med["mmc"] / med[k], k == "torch" and "torch at its defaults" or "passive torch")
          for k in ("torch", "passive") if k in med]
best = min(med[k] for k in ("torch", "passive") if k in med)
print("  ratio mmc / torch (medians): %s; %.2f against the faster" % (", ".join(ratios), med["mmc"] / best))
PY
  done
done
