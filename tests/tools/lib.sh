# The set-up the test scripts share; each sources it first:
#   . "$MMC_SOURCE_DIR/tests/tools/lib.sh"
# SAN is 1 when the build under test is the ASan+UBSan one (its CMake cache
# says MMC_SANITIZE=ON), else 0: scripts shorten or skip their slow cells.
SAN=0
grep -qs 'MMC_SANITIZE:BOOL=ON' "${MMC_BINARY_DIR:-.}/CMakeCache.txt" && SAN=1
# mpirun as root (CI runs as root), and OpenMPI's own start-up allocations
# not counted as leaks under ASan (tests/lsan.supp; the scripts pass
# LSAN_OPTIONS on with mpirun -x)
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export LSAN_OPTIONS="${LSAN_OPTIONS:-suppressions=$MMC_SOURCE_DIR/tests/lsan.supp}"
# under the sanitizers, mpirun through tests/tools/san/mpirun: its ranks (and
# only they) unwind allocations the slow way, which OpenMPI's leaks need
if [ "$SAN" = 1 ]; then PATH="$MMC_SOURCE_DIR/tests/tools/san:$PATH"; fi

# A program that starts OpenMPI without mpirun (a singleton world): its
# leaks need the slow unwinder, as mpirun's ranks' do (tests/tools/san/mpirun).
. "$MMC_SOURCE_DIR/tests/tools/san/slow_unwind.sh"
mpi_alone() { LSAN_OPTIONS="$(slow_unwind_lsan)" "$@"; }

# The scripts that run trainers under mpirun and count their checks call
# mpi_script after sourcing this: a scratch folder $T (removed at exit), one
# OpenMP thread a rank, MPIRUN (mpirun bounded to 300 s, the rank count to
# append) and the tallies $pass and $fail kept by ok and bad.
mpi_script() {
  T=$(mktemp -d)
  trap 'rm -rf "$T"' EXIT
  export OMP_NUM_THREADS=1 OMP_WAIT_POLICY=passive
  MPIRUN=(timeout 300 mpirun --oversubscribe -x OMP_NUM_THREADS -x OMP_WAIT_POLICY -x LSAN_OPTIONS -np)
  pass=0 fail=0
}
# The multi-rank equivalence scripts call o0_compiles: their `mmc compile`s
# given no -O level compile at -O0 in release too (tests/tools/o0/mmc, as
# under the sanitizers). They compare plans against the serial trainer of the
# same compile level; LLVM's -O3 of the generated code is checked by the
# serial scripts against PyTorch and Hugging Face (torch_parity, hf_import)
# and by the multi-rank ones left at -O3 (backend_mpi, bf16_tp,
# memory_measured). -O3 was 80% of a tiny model's compile, and 3 to 4 of
# these scripts' compiles are a cell's 3 to 4 s.
o0_compiles() { MMC="$MMC_SOURCE_DIR/tests/tools/o0/mmc"; }
ok() { pass=$((pass + 1)); }
bad() {
  echo "FAIL: $*"
  fail=$((fail + 1))
}

# The scripts that check against the hf venv's references (the conversation
# and image tests) call hf_script WHAT after sourcing this: PY the venv's
# python (made if missing: tools/test_venvs.sh; without it a failure that
# names WHAT, the packages wanted besides PIL), a scratch folder $T (removed
# at exit), and the tallies $pass and $fail kept by ok and no.
hf_script() {
  PY="${MMC_HF_VENV:-/var/cache/mmc-venv-hf}/bin/python"
  if ! bash "$MMC_SOURCE_DIR/tools/test_venvs.sh" hf; then
    echo "FAIL: no hf venv with PIL and $1 (tools/test_venvs.sh hf needs PyPI)"
    echo "0 passed, 1 failed"
    exit 1
  fi
  pass=0 fail=0 T=$(mktemp -d)
  trap 'rm -rf "$T"' EXIT
}
no() {
  fail=$((fail + 1))
  echo "FAIL $*"
}

# The scripts that count failures only (no mpirun, no venv) call
# plain_script after sourcing this: a scratch folder $T (removed at exit),
# PY the system python, and the tallies $pass and $fail kept by ok and bad.
plain_script() {
  T=$(mktemp -d)
  trap 'rm -rf "$T"' EXIT
  PY=/usr/bin/python3
  pass=0 fail=0
}

# The step `mmc plan --json` predicts (predicted.step_s, 6 digits), from stdin.
predicted_step() {
  /usr/bin/python3 -c "import json,sys; print('%.6g' % json.load(sys.stdin)['predicted']['step_s'])"
}

# A model NAME of one GPT of the standard library (gpt2.mm, imported) over
# ids and labels i32[B, T]: gpt_model NAME B T 'GPT arguments' 'train
# section' 'parallel section' (each section's body on one line) prints it.
gpt_model() {
  cat <<MM
import "gpt2.mm"
model $1 {
  let B = $2
  let T = $3
  gpt = GPT($4)
  forward(ids: i32[B, T], labels: i32[B, T]) -> loss { return gpt(ids, labels) }
  train { $5 }
  parallel { $6 }
}
MM
}

# The pipeline memory tests' GPT (pp_stash, pp_live): 4 layers, D = 128,
# T = 32, 8 samples in 4 micro-batches, full recompute, as model $1; $2 at
# pp = 2 (the embeddings and two layers, then two layers and ln_f), $3 at
# pp = 2 x vpp = 2 interleaved (a layer a stage)
pp_gpt_models() {
  gpt_model "$1" 8 32 "vocab = 256, ctx = 64, dim = 128, depth = 4, heads = 4" \
    "optimizer = adamw(lr = 1e-3)" "micro_batches = 4; recompute = full"
  cat <<MM
model $2 extends $1 {
  parallel { pp = 2; micro_batches = 4; recompute = full; stages = [gpt.wte + gpt.wpe + gpt.h[0:2], gpt.h[2:4] + gpt.ln_f] }
}
model $3 extends $1 {
  parallel { pp = 2; vpp = 2; schedule = interleaved; micro_batches = 4; recompute = full; stages = [gpt.wte + gpt.wpe + gpt.h[0:1], gpt.h[1:2], gpt.h[2:3], gpt.h[3:4] + gpt.ln_f] }
}
MM
}
