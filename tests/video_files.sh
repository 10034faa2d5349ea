#!/usr/bin/env bash
# mmc video (runtime/mmrt_vdec.c) against references (tests/video_ref/ref.py):
# videos written here with Debian's ffmpeg from generated frames decode to
# the source exactly (FFV1/MKV, H.264 RGB -qp 0), within 3/255 (H.264 4:4:4
# -qp 0: the colour conversion) or above a PSNR bound (H.264 4:2:0, VP9,
# VP8); frame indices and frames equal a Python rewrite of the sampling
# rule for several fps / frame-count pairs; buckets and crop + resize equal
# a rewrite with PIL's bicubic; the OpenSoraPlan JSON and --png-strip; bad
# videos and JSON entries exit 1 naming the file, entry and field with no
# --out; bad flags exit 2.  PIL and numpy come from the hf venv.
set -uo pipefail
. "$MMC_SOURCE_DIR/tests/tools/lib.sh"
PY="${MMC_HF_VENV:-/var/cache/mmc-venv-hf}/bin/python"
if ! command -v ffmpeg > /dev/null; then
  echo "FAIL: no ffmpeg (tools/setup.sh installs it)"
  echo "0 passed, 1 failed"
  exit 1
fi
if ! bash "$MMC_SOURCE_DIR/tools/test_venvs.sh" hf > /dev/null; then
  echo "FAIL: no hf venv with PIL and numpy (tools/test_venvs.sh hf needs PyPI)"
  echo "0 passed, 1 failed"
  exit 1
fi
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
"$PY" "$MMC_SOURCE_DIR/tests/video_ref/ref.py" "$MMC" "$T" "$SAN" > "$T/ref.out" 2>&1
cat "$T/ref.out"
read -r rp rf < <(sed -n 's/^\([0-9]*\) passed, \([0-9]*\) failed$/\1 \2/p' "$T/ref.out" | tail -1)
if [ -z "${rp:-}" ]; then
  echo "FAIL: ref.py did not finish"
  echo "0 passed, 1 failed"
  exit 1
fi
[ "$rf" -eq 0 ]
