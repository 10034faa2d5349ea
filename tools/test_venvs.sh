#!/usr/bin/env bash
# The Python environments of the tests' references, outside the clone under
# /var/cache (never dependencies of mmc): `tok` (Hugging Face tokenizers, and
# sentencepiece for T5's Precompiled rules), `mcore` (megatron-core's indexed
# dataset over Debian's python3-torch and numpy; tests/data_ref/mcore.py says
# why the module is loaded from the wheel's file) and `hf` (transformers over
# Debian's python3-torch 1.13: 4.49.0 is the newest release that runs there
# and has Qwen2). Idempotent, each made under a lock so that tests started
# side by side never build one twice; tools/test.sh makes all three first.
#   bash tools/test_venvs.sh [tok|mcore|hf|all]...
set -euo pipefail
SRC=$(cd "$(dirname "$0")/.." && pwd)
make_one() {
  local name=$1 v check
  case $name in
    tok) v=${MMC_TOK_VENV:-/var/cache/mmc-venv-tok}
         check="import tokenizers, sentencepiece, sys; sys.exit(tokenizers.__version__ != '0.23.3')" ;;
    mcore) v=${MMC_MCORE_VENV:-/var/cache/mmc-venv-mcore}
           check="import sys; sys.path.insert(0, '$SRC/tests/data_ref'); import mcore, tokenizers; mcore.load()" ;;
    hf) v=${MMC_HF_VENV:-/var/cache/mmc-venv-hf}
        check="import transformers, accelerate, safetensors, PIL; assert transformers.__version__ == '4.49.0' and PIL.__version__ == '11.3.0'" ;;
    *) echo "test_venvs.sh: unknown environment '$name' (tok, mcore, hf or all)" >&2; return 2 ;;
  esac
  mkdir -p "$(dirname "$v")"
  # the check imports torch (2 s of CPU a test, 20 tests a build): once it
  # passed, a stamp with the check's text stands for it until a package is
  # added to or removed from the venv or the system's (Debian's torch) or
  # tests/data_ref (mcore's loader) changes
  local stamp="$v/.mmc-checked"
  (
    flock 9
    if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$check" ] &&
       [ -z "$(find "$v/lib" "$SRC/tests/data_ref" -maxdepth 2 -newer "$stamp" -print -quit 2> /dev/null)" ] &&
       [ -z "$(find /usr/lib/python3/dist-packages -maxdepth 1 -newer "$stamp" -print -quit 2> /dev/null)" ]; then
      exit 0
    fi
    "$v/bin/python" -c "$check" 2> /dev/null && { printf '%s' "$check" > "$stamp"; exit 0; }
    echo "making $v"
    case $name in
      tok) /usr/bin/python3 -m venv "$v" && "$v/bin/pip" install -q tokenizers==0.23.3 sentencepiece==0.2.3 ;;
      mcore) /usr/bin/python3 -m venv --system-site-packages "$v" &&
             "$v/bin/pip" install -q --no-deps "megatron-core==0.16.1" &&
             "$v/bin/pip" install -q "tokenizers==0.23.3" "packaging>=24.2" ;;
      hf) /usr/bin/python3 -m venv --system-site-packages "$v" &&
          "$v/bin/pip" install -q "transformers==4.49.0" "accelerate==1.0.1" safetensors "pillow==11.3.0" ;;
    esac
    "$v/bin/python" -c "$check" && printf '%s' "$check" > "$stamp"
  ) 9> "$v.lock"
}
[ $# -gt 0 ] || set -- all
for a in "$@"; do
  if [ "$a" = all ]; then for n in tok mcore hf; do make_one $n; done; else make_one "$a"; fi
done
