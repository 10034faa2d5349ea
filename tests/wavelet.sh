#!/usr/bin/env bash
# The Haar wavelet ops compiled end to end (codegen's lowering, the runtime
# kernel mmrt_haar, forward and backward): a convolution, then haar2d ->
# ihaar2d and haar3d -> ihaar3d (the identity), then a second convolution
# and a head, trained 6 steps, gives the losses of the same model without
# the wavelet pair (same parameter names and init) to 1e-5 relative; under
# real mpirun ranks, tp = 2 (the convolutions pair over channels and the
# four wavelet ops run on channel pieces: checked in the plan) and dp = 2
# (batch pieces) give the serial trainer's losses to 1e-5.
set -uo pipefail
S="$MMC_SOURCE_DIR/stdlib_models"
. "$MMC_SOURCE_DIR/tests/tools/lib.sh"
mpi_script

cat > "$T/haar.mm" <<'MM'
import "nn.mm"

model HaarFashion {
  let B = 16
  conv  = Conv2d(1, 8, 3, stride = 2, padding = 1)
  conv2 = Conv2d(8, 4, 3, padding = 1, has_bias = false)
  head  = Linear(4 * 14 * 14, 10)
  forward(pixels: f32[B, 1, 28, 28], labels: i32[B]) -> loss {
    h = ihaar2d(haar2d(relu(conv(pixels))))
    v = ihaar3d(haar3d(h.reshape(B, 4, 2, 14, 14))).reshape(B, 8, 14, 14)
    return cross_entropy(head(conv2(v).flatten(1)), labels)
  }
  train { optimizer = adamw(lr = 1e-3) }
}

model HaarFashionPlain {
  let B = 16
  conv  = Conv2d(1, 8, 3, stride = 2, padding = 1)
  conv2 = Conv2d(8, 4, 3, padding = 1, has_bias = false)
  head  = Linear(4 * 14 * 14, 10)
  forward(pixels: f32[B, 1, 28, 28], labels: i32[B]) -> loss {
    return cross_entropy(head(conv2(relu(conv(pixels))).flatten(1)), labels)
  }
  train { optimizer = adamw(lr = 1e-3) }
}
MM

same() { # name a.jsonl b.jsonl
  /usr/bin/python3 - "$@" <<'PY'
import json, sys
name, pa, pb = sys.argv[1:4]
def losses(p): return [json.loads(l)["loss"] for l in open(p) if '"loss"' in l]
a, b = losses(pa), losses(pb)
d = max(abs(x - y) / abs(y) for x, y in zip(a, b)) if a and len(a) == len(b) else float("inf")
print("%s: %d steps, losses %.6f .. %.6f, largest relative difference %.2e" % (name, len(a), a[0], a[-1], d))
sys.exit(0 if d <= 1e-5 else 1)
PY
}

compile() { # out model flags...
  local out=$1 model=$2; shift 2
  if "$MMC" compile "$T/haar.mm" -I "$S" --model "$model" "$@" -o "$T/$out" 2> "$T/$out.cerr"; then ok
  else bad "$out: mmc compile"; cat "$T/$out.cerr"; return 1; fi
}

if compile plain HaarFashionPlain && compile serial HaarFashion; then
  for m in plain serial; do
    "$T/$m" --steps 6 --eval-batches 1 --quiet --log "$T/$m.jsonl" > /dev/null 2> "$T/$m.err" ||
      { bad "$m: trainer failed"; tail -5 "$T/$m.err"; }
  done
  if same "wavelet pair vs none" "$T/serial.jsonl" "$T/plain.jsonl"; then ok; else bad "the wavelet pair changes the losses"; fi
fi

# under tp = 2 every wavelet op holds a channel piece
n=$("$MMC" dump-ir "$T/haar.mm" -I "$S" --model HaarFashion --tp 2 --after shard |
  grep -cE '= i?haar[23]d\(.*tp:S\(1\)' || true)
if [ "$n" -ge 4 ]; then ok; echo "tp=2: $n wavelet ops (forward and backward) split over channels"
else bad "tp=2: only $n wavelet ops split over channels (want the 4 of the forward at least)"; fi

for plan in "tp2:--tp 2" "dp2:--dp 2"; do
  name=${plan%%:*}
  # shellcheck disable=SC2086
  compile "$name" HaarFashion ${plan#*:} || continue
  if "${MPIRUN[@]}" 2 "$T/$name" --steps 6 --eval-batches 1 --quiet --log "$T/$name.jsonl" > /dev/null 2> "$T/$name.err"; then
    ok
    if same "$name vs serial" "$T/$name.jsonl" "$T/serial.jsonl"; then ok; else bad "$name: losses differ from the serial run"; fi
  else
    bad "$name: mpirun failed"; tail -5 "$T/$name.err"
  fi
done

echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
