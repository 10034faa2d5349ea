"""Steps 1..5 of a plan's --log equal the serial run's (tests/hf_parallel.sh,
tests/hf_internvl.sh).
  same_losses.py SERIAL.jsonl PLAN.jsonl
Prints the largest relative difference and PLAN's five losses; exit 1 if
it exceeds 1e-5 or a step is missing."""
import json
import sys

a, b = ({j["step"]: j["loss"] for j in map(json.loads, open(p)) if "loss" in j} for p in sys.argv[1:3])
if not all(s in a and s in b for s in range(1, 6)):
    print(f"steps {sorted(a)} and {sorted(b)}, not 1..5")
    sys.exit(1)
w = max(abs(a[s] - b[s]) / abs(a[s]) for s in range(1, 6))
print(f"{w:.1e} ({' '.join(f'{b[s]:.7g}' for s in range(1, 6))})")
sys.exit(w > 1e-5)
