#!/usr/bin/env bash
# WF-VAE (stdlib_models/wfvae.mm):
# - `mmc stats` of the published configuration equals the reference's count:
#   PKU-YuanGroup/WF-VAE's own WFVAEModel (d858bee) instantiated in PyTorch
#   by tests/torch/wfvae_refcount.py (trainable parameters; the reference
#   also holds 128 frozen Haar filter weights, constants here);
# - PyTorch parity: WFVAETiny (with Adam eps 1e-3, below; and with GroupNorm
#   and nearest time upsampling) against
#   tests/torch/wfvae_ref.py (written from the reference's modules), the
#   trainer's initial weights by name, its clips, its noise (Philox in
#   numpy), 3 AdamW steps: losses to 1e-5 relative (or, where PyTorch's own
#   float32 loss is further than that from its float64 one, within 3 times
#   that distance: see tests/torch/wfvae_parity.py), weights against their
#   update (tests/torch/mmtrain.py);
# - the gan option (WFVAETinyGAN): the same parity with the discriminator's
#   loss, its own optimizer and its start (tests/torch/wfvae_ref.py
#   discriminator, hinge_d_loss);
# - the log-variance clamp to [-30, 20] (the reference's
#   DiagonalGaussianDistribution): WFVAETiny (5 frames, batch 1) started at
#   log-variance 25 and 45 has the same first loss (both clamped to 20: the
#   same noise scale; unclamped, e^12.5 and e^22.5), and at -35 and -55 too
#   (both -30: the same KL term; unclamped it differs by 1e-6 x 20 x 256).
set -uo pipefail
. "$MMC_SOURCE_DIR/tests/tools/lib.sh"
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1} OMP_WAIT_POLICY=passive
S="$MMC_SOURCE_DIR/stdlib_models"
pass=0; fail=0
ok() { pass=$((pass+1)); }
bad() { echo "FAIL: $*"; fail=$((fail+1)); }
stat() { "$MMC" stats "$S/wfvae.mm" --model WFVAE "${@:2}" --json |
  /usr/bin/python3 -c 'import json,sys; j=json.load(sys.stdin); m=j["modules"]; print(j["total_params"], m["encoder"]["params"], m["decoder"]["params"])' 2>/dev/null || echo "? ? ?"; }
# reference counts (trainable; encoder; decoder)
check_count() { # label want_total want_enc want_dec stats-args...
  local label=$1 want="$2 $3 $4"; shift 4
  local got; got=$(stat x "$@")
  [ "$got" = "$want" ] && { echo "$label: mmc stats $got = reference $want"; ok; } ||
    bad "$label: mmc stats gives $got (total, encoder, decoder), the reference $want"
}
check_count "WFVAE (MindSpeed-MM OSP1.3)" 147347660 37182224 110165436
check_count "WFVAE (OSP json, latent 8)" 146662604 38268176 108394428 --set enc_energy_flow=128 --set connect_res=1

first_loss() { # logvar_init
  "$MMC" compile "$S/wfvae.mm" --model WFVAETiny -O0 --set F=5 --set B=1 --set "logvar_init=$1" \
    -o "$T/clamp" 2> "$T/cerr" && "$T/clamp" --steps 1 --eval-batches 1 --quiet --log "$T/clamp.log" \
    > /dev/null 2>&1 && /usr/bin/python3 -c 'import json,sys; print(repr(json.loads(open(sys.argv[1]).readline())["loss"]))' \
    "$T/clamp.log" || echo "failed: $(cat "$T/cerr")"
  rm -f "$T/clamp.log"
}
for pair in "25.0 45.0" "-35.0 -55.0"; do
  set -- $pair
  a=$(first_loss "$1") b=$(first_loss "$2")
  /usr/bin/python3 -c 'import sys; a, b = map(float, sys.argv[1:3]); sys.exit(0 if abs(a - b) <= 1e-7 * abs(a) else 1)' \
    "$a" "$b" 2> /dev/null && { echo "logvar clamp: first loss $a at log-variance $1, $b at $2"; ok; } ||
    bad "logvar clamp: the first loss is $a at log-variance $1 and $b at $2 (both clamp alike)"
done

if ! /usr/bin/python3 -c 'import torch' 2>/dev/null; then
  bad "python3-torch is not installed (tools/setup.sh installs it)"
else
  # Adam's first steps move a weight by lr * sign(g) wherever |g| >> eps: an
  # element of g at rounding level (L1 losses make some) flips its step
  # between two correct implementations (seen: 1 element of 110592 in a
  # conv, 0.3% of its update). eps = 1e-3 (|g| ~ 1 here) keeps the step
  # continuous near g = 0; everything else is WFVAETiny's.
  cat > "$T/p.mm" <<'MM'
import "wfvae.mm"
model WFVAETinyParity extends WFVAETiny {
  train { optimizer = adamw(lr = 1e-3, betas = [0.9, 0.999], eps = 1e-3, weight_decay = 1e-4) }
}
model WFVAETinyParityGN extends WFVAETinyParity {
  let groups = 4
  let t_interpolation = "nearest"
}
model WFVAETinyGANParity extends WFVAETinyGAN {
  train {
    optimizer = adamw(lr = 1e-3, betas = [0.9, 0.999], eps = 0.1, weight_decay = 1e-4)
    gan = gan(discriminator = disc, weight = 0.5, start = 1)
  }
}
MM
  cd "$T"
  # the default: layer norm, trilinear time upsampling, at the default -O;
  # GroupNorm(4) and nearest time upsampling at -O0 (a quicker compile);
  # the gan option (WFVAETinyGAN's 2-layer 3D discriminator, hinge loss, its
  # own AdamW) starting after step 1, on 5-frame clips, batch 1: step 1
  # without it, steps 2 and 3 with the generator's term and the
  # discriminator's update (its disc_loss logged and compared too). Adam's eps
  # is 0.1 there: the discriminator's gradients are ~1e-2, where eps 1e-3
  # would make its steps lr * sign(g) (seen: rounding flipped some)
  for spec in "WFVAETinyParity 7" "WFVAETinyParityGN 11 -O0" "WFVAETinyGANParity 5 -O0 --set F=5 --set B=1"; do
    set -- $spec
    m=$1 seed=$2; shift 2
    rm -rf in
    if "$MMC" compile p.mm --model "$m" "$@" -o tr 2> cerr; then
      ./tr --steps 0 --seed "$seed" --save-weights init.st --eval-batches 1 --quiet > /dev/null 2>&1
      if ./tr --steps 3 --seed "$seed" --save-weights final.st --dump-inputs in --log log.jsonl --eval-batches 1 \
          --quiet > out 2> err; then
        # the numbers are the release build's to check (the same program and
        # PyTorch reference); under the sanitizers the run's clean exit is
        if [ "$SAN" = 1 ]; then
          ok
        else
          /usr/bin/python3 "$MMC_SOURCE_DIR/tests/torch/wfvae_parity.py" p.mm "$m" init.st in log.jsonl \
            final.st 3 "$seed" && ok || bad "PyTorch parity of $m"
        fi
      else bad "$m trainer: $(tail -3 err)"; fi
    else bad "$m compile: $(cat cerr)"; fi
    rm -f log.jsonl
  done
  # the discriminator's weights and AdamW state are checkpointed with the
  # rest: WFVAETinyGANParity stopped after step 2 (the discriminator's first
  # update) and resumed for step 3 ends with the 3-step run's tensors, bit
  # for bit (seen: its adamw.m/v.disc.* zeroed in the checkpoint moves the
  # next losses)
  rm -rf ck
  if ./tr --steps 2 --seed 5 --ckpt ck --eval-batches 1 --quiet > /dev/null 2>&1 &&
      ./tr --steps 3 --seed 5 --ckpt ck --resume --save-weights resumed.st --eval-batches 1 --quiet \
        > /dev/null 2>&1; then
    /usr/bin/python3 - "$MMC_SOURCE_DIR/tests/torch" final.st resumed.st <<'PY' && ok || bad "gan resume"
import sys
import numpy as np
sys.path.insert(0, sys.argv[1])
import mmtrain
a, _ = mmtrain.st_load(sys.argv[2])
b, _ = mmtrain.st_load(sys.argv[3])
d = [k for k in a if k.startswith("disc.")]
diff = [k for k in a if k not in b or not np.array_equal(a[k], b[k])]
print("gan resume: %d tensors (%d of the discriminator), %d differ from the 3-step run%s" %
      (len(a), len(d), len(diff), (": " + ", ".join(diff[:5])) if diff else ""))
sys.exit(1 if diff or not d or len(a) != len(b) else 0)
PY
  else bad "gan resume: the trainer failed"; fi
fi

# the option off leaves the program as it was: WFVAETiny's @train has one
# loss root, no detach and no gan scope, WFVAETinyGAN's two, detach and the
# gate; and a discriminator loss that reads the generator's output without
# detach() is an error at the gan setting naming a generator parameter
cd "$T"
"$MMC" dump-ir "$S/wfvae.mm" --model WFVAETiny --after optimizer > off.ir 2>&1
"$MMC" dump-ir "$S/wfvae.mm" --model WFVAETinyGAN --after optimizer > on.ir 2>&1
/usr/bin/python3 - off.ir on.ir <<'PY' && ok || bad "gan off/on IR"
import re, sys
def facts(path):
    t = open(path).read()
    train = t[t.index("func @train"):]
    train = train[:train.index("\n}")]
    ret = re.findall(r"^  return (.*)$", train, re.M)[-1]
    return (len(ret.split(",")), train.count("= detach("), train.count('scope("gan")'),
            train.count("grad_norm("), t.count("adamw(@disc."))
off, on = facts(sys.argv[1]), facts(sys.argv[2])
print("gan off/on: @train returns %d/%d values, %d/%d detach, %d/%d gan nodes, %d/%d grad_norm, %d/%d "
      "discriminator updates" % tuple(x for p in zip(off, on) for x in p))
sys.exit(0 if off[:3] == (1, 0, 0) and off[4] == 0 and on[0] == 2 and on[1] == 1 and on[2] > 0
         and on[3] == off[3] + 1 and on[4] > 0 else 1)
PY
cat > nodetach.mm <<'MM'
import "nn.mm"
module D {
  fc = Linear(4, 1)
  forward(x) { return fc(x) }
}
model M {
  gen  = Linear(4, 4)
  disc = D()
  forward(x: f32[2, 4]) -> loss {
    fake = gen(x)
    return [mean(fake * fake), mean(disc(fake)) * -1.0, mean(relu(1.0 + disc(fake)))]
  }
  train { gan = gan(discriminator = disc, weight = 0.5) }
}
MM
want="nodetach.mm:13:11: error: gan: the discriminator's loss reaches @gen.weight, a parameter outside the discriminator 'disc'"
if "$MMC" dump-ir nodetach.mm -I "$S" --after autodiff > /dev/null 2> nd.err; then
  bad "gan without detach: accepted"
elif grep -qF "$want" nd.err; then
  sed -i 's/disc(fake)))]/disc(detach(fake))))]/' nodetach.mm
  "$MMC" dump-ir nodetach.mm -I "$S" --after optimizer > /dev/null 2> nd.err &&
    { echo "gan without detach: refused at the setting; with detach(fake) it builds"; ok; } ||
    bad "gan with detach: $(cat nd.err)"
else bad "gan without detach: $(cat nd.err)"; fi
echo "wfvae: $pass passed, $fail failed"
[ $fail = 0 ]
