#!/usr/bin/env bash
# mmc image against the references (tests/image_ref/ref.py): JPEG, PNG and
# WebP images of odd sizes made with PIL (grey, grey+alpha, palette with
# tRNS, 2-bit, 16-bit grey and colour, RGBA, interlaced, CMYK, progressive,
# JPEG EXIF orientations 1-8 (little- and big-endian), PNG eXIf, lossless
# and lossy WebP with and without alpha)
# decode to PIL's RGB exactly (JPEG and lossy WebP: within the measured
# decoder difference, 0 here), --mode clip equals transformers'
# CLIPImageProcessor and --mode internvl a rewrite of InternVL2's
# dynamic_preprocess + load_image within 2/255 (0 here), and the tile grid
# is InternVL's for every aspect ratio 1:8..8:1 and sizes around the area
# thresholds.  Then each bad image (truncated JPEG/PNG/WebP, wrong magic,
# empty, zero and huge declared sizes, animated WebP, a directory) exits 1
# naming the file and leaves --out unwritten, and bad flags exit 2.
# PIL and transformers come from the hf venv (tools/test_venvs.sh).
set -uo pipefail
. "$MMC_SOURCE_DIR/tests/tools/lib.sh"
hf_script transformers

# the references: prints its own FAIL lines and "N passed, M failed"
"$PY" "$MMC_SOURCE_DIR/tests/image_ref/ref.py" "$MMC" "$T" "$SAN" > "$T/ref.out" 2>&1
grep -v -e '^  warnings.warn' -e 'Warning' "$T/ref.out" | grep -v '^ *[a-z_]* = ' | tail -n 40
read -r rp rf < <(sed -n 's/^\([0-9]*\) passed, \([0-9]*\) failed$/\1 \2/p' "$T/ref.out" | tail -1)
if [ -z "${rp:-}" ]; then no "ref.py did not finish"; else pass=$((pass+rp)); fail=$((fail+rf)); fi

# ---- bad images: exit 1, the file named with what was expected, no --out ----
B="$T/bad"
mkdir -p "$B"
"$PY" - "$T/img" "$B" <<'EOF'
import struct, sys, zlib
from PIL import Image
src, B = sys.argv[1], sys.argv[2]
def cut(name, out, frac):
    d = open(f"{src}/{name}", "rb").read()
    open(f"{B}/{out}", "wb").write(d[: int(len(d) * frac)])
cut("rgb_101x67.jpg", "trunc.jpg", 0.5)
cut("prog_83x71.jpg", "trunc_prog.jpg", 0.6)
cut("rgb_97x61.png", "trunc.png", 0.5)
cut("rgb_97x61.png", "noend.png", 0.999)
cut("ll_79x53.webp", "trunc_ll.webp", 0.5)
cut("lossy_67x91.webp", "trunc.webp", 0.5)
cut("rgb_101x67.jpg", "three.jpg", 0)
open(f"{B}/three.jpg", "wb").write(b"\xff\xd8\xff")
open(f"{B}/empty.png", "wb").write(b"")
open(f"{B}/magic.jpg", "wb").write(b"GIF89a" + bytes(100))
open(f"{B}/text.png", "wb").write(b"hello, not an image\n")
def chunk(k, d): return struct.pack(">I", len(d)) + k + d + struct.pack(">I", zlib.crc32(k + d))
def png(w, h): return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, 8, 2, 0, 0, 0))
                       + chunk(b"IDAT", zlib.compress(b"\0" * 16)) + chunk(b"IEND", b""))
open(f"{B}/zero.png", "wb").write(png(0, 5))
open(f"{B}/huge.png", "wb").write(png(100000, 100000))
# a JPEG whose SOF0 says 65000 x 65000 (the data after it does not matter)
d = bytearray(open(f"{src}/rgb_101x67.jpg", "rb").read())
i = d.find(b"\xff\xc0")
d[i + 5:i + 9] = struct.pack(">HH", 65000, 65000)
open(f"{B}/huge.jpg", "wb").write(bytes(d))
d[i + 5:i + 9] = struct.pack(">HH", 0, 67)
open(f"{B}/zero.jpg", "wb").write(bytes(d))
frames = [Image.new("RGB", (9, 7), c) for c in ((255, 0, 0), (0, 255, 0))]
frames[0].save(f"{B}/anim.webp", save_all=True, append_images=frames[1:], duration=50)
EOF
expect_bad() { # file pattern-of-what-was-expected [extra args]
  local f=$1 pat=$2; shift 2
  rm -f "$T/o.f32"
  "$MMC" image "$f" "$@" --out "$T/o.f32" > "$T/out" 2> "$T/err"; local rc=$?
  if [ "$rc" -ne 1 ]; then no "$(basename "$f"): exit $rc, expected 1"; head -3 "$T/err"; return; fi
  if grep -qF -- "$f" "$T/err" && grep -qiE -- "$pat" "$T/err"; then ok
  else no "$(basename "$f"): message without the file or '$pat'"; head -3 "$T/err"; fi
  if [ -e "$T/o.f32" ]; then no "$(basename "$f"): --out written"; else ok; fi
  if grep -q 'AddressSanitizer\|runtime error' "$T/err"; then no "$(basename "$f"): sanitizer report"; fi
}
expect_bad "$B/trunc.jpg" "truncated JPEG"
expect_bad "$B/trunc_prog.jpg" "truncated JPEG"
expect_bad "$B/three.jpg" "truncated JPEG"
expect_bad "$B/trunc.png" "truncated PNG"
expect_bad "$B/noend.png" "truncated PNG"
expect_bad "$B/trunc_ll.webp" "truncated WebP"
expect_bad "$B/trunc.webp" "truncated WebP"
expect_bad "$B/empty.png" "empty file.*expected a JPEG"
expect_bad "$B/magic.jpg" "not an image.*expected JPEG"
expect_bad "$B/text.png" "not an image.*expected JPEG"
expect_bad "$B/zero.png" "PNG"
expect_bad "$B/zero.jpg" "JPEG"
expect_bad "$B/huge.png" "expected at most 89478485 pixels"
expect_bad "$B/huge.jpg" "expected at most 89478485 pixels"
expect_bad "$T/img/ll_79x53.webp" "expected at most 4000 pixels" --max-pixels 4000
expect_bad "$B/anim.webp" "animated WebP; expected a still image"
expect_bad "$B" "not a regular file"
expect_bad "$B/missing.png" "cannot open"
# a bad file after good ones: nothing written, an existing --out kept
echo keep > "$T/keep.f32"
"$MMC" image "$T/img/rgb_97x61.png" "$B/trunc.png" --out "$T/keep.f32" > /dev/null 2> "$T/err"
rc=$?
if [ "$rc" -eq 1 ] && [ "$(cat "$T/keep.f32")" = keep ]; then ok; else no "bad second file: exit $rc or --out changed"; fi

# ---- bad flags: exit 2 ----
for args in "--mode foo" "--size 0" "--size x" "--max-tiles 3" "--mode internvl --max-tiles 0" \
            "--mean 1,2" "--std 1,0,1" "--std 1,2,3,4" "--mode none --size 8" "--max-pixels -1" \
            "--bogus" "--out"; do
  # shellcheck disable=SC2086
  "$MMC" image "$T/img/rgb_97x61.png" $args > /dev/null 2> "$T/err"; rc=$?
  if [ "$rc" -eq 2 ] && grep -q '^usage: mmc image' "$T/err"; then ok; else no "flags '$args': exit $rc"; fi
done
"$MMC" image > /dev/null 2>&1; [ $? -eq 2 ] && ok || no "no file: exit not 2"

echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
