#!/usr/bin/env bash
# Writes tests/fuzz/corpus/video: tiny videos made with Debian's ffmpeg
# (16 x 12, 6 frames: H.264 in MP4 and MOV, VP8 and VP9 in WebM, FFV1 and
# MPEG-4 in MKV), each after a request byte (fuzz_video.c).
set -euo pipefail
cd "$(dirname "$0")"
out=corpus/video
mkdir -p "$out"
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
src=(-f lavfi -i testsrc=size=16x12:rate=12 -frames:v 6)
ffmpeg -v error -y "${src[@]}" -c:v libx264 -pix_fmt yuv420p "$T/a.mp4"
ffmpeg -v error -y "${src[@]}" -c:v libx264 -pix_fmt yuv444p -movflags +faststart "$T/b.mov"
ffmpeg -v error -y "${src[@]}" -c:v libvpx "$T/c.webm"
ffmpeg -v error -y "${src[@]}" -c:v libvpx-vp9 "$T/d.webm"
ffmpeg -v error -y "${src[@]}" -c:v ffv1 -pix_fmt bgr0 "$T/e.mkv"
ffmpeg -v error -y "${src[@]}" -c:v mpeg4 "$T/f.mkv"
i=0
for f in "$T"/*; do
  for req in '\x03' '\x2d'; do # 4 frames at the source's fps, 6 at 8 fps in buckets
    printf "$req" | cat - "$f" > "$out/seed-$i-$(basename "$f")"
    i=$((i + 1))
  done
done
