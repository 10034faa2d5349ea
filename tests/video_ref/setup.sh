# The set-up tests/video_train.sh and tests/video_extract.sh share (sourced
# after tests/tools/lib.sh): a scratch folder to work in, the hf venv's
# Python (numpy, PIL), Debian's ffmpeg, the ok/bad counters, and
# videos_of FRAMES SEED: mmc-clips' training clips 0..5 of FRAMES frames
# under SEED written as video files and lists into v/ (write_clips.py).
export OMP_NUM_THREADS=1 OMP_WAIT_POLICY=passive
PY="${MMC_HF_VENV:-/var/cache/mmc-venv-hf}/bin/python"
REF="$MMC_SOURCE_DIR/tests/video_ref"
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
cd "$T" || exit 1
pass=0 fail=0
ok() { pass=$((pass + 1)); echo "ok: $1"; }
bad() { fail=$((fail + 1)); echo "FAIL: $1"; }
if ! command -v ffmpeg > /dev/null || ! bash "$MMC_SOURCE_DIR/tools/test_venvs.sh" hf > /dev/null; then
  echo "FAIL: needs Debian's ffmpeg (tools/setup.sh) and the hf venv (tools/test_venvs.sh hf)"
  exit 1
fi
videos_of() {
  "$MMC_BINARY_DIR/mmc-clips" --frames "$1" --seed "$2" clips 6 > /dev/null || { echo "FAIL: mmc-clips"; exit 1; }
  mkdir v && "$PY" "$REF/write_clips.py" clips 6 "$1" v || { echo "FAIL: writing the videos"; exit 1; }
}
