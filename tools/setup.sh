#!/usr/bin/env bash
# Installs every Debian 12 package mmc needs to build, test and benchmark.
# Idempotent: packages already present are skipped by apt-get.
set -euo pipefail
PKGS=(
  build-essential cmake pkg-config
  llvm-19-dev llvm-19-tools clang-19 libclang-rt-19-dev libomp-19-dev clang-format-19
  flex bison
  libopenmpi-dev openmpi-bin
  libdnnl-dev
  check
  zlib1g-dev libpng-dev libjson-c-dev libgif-dev libjpeg62-turbo-dev libwebp-dev
  libavformat-dev libavcodec-dev libswscale-dev libavutil-dev ffmpeg
  libpcre2-dev libunistring-dev python3-venv
  dataset-fashion-mnist
  python3-torch python3-numpy libopenblas0-openmp python3-venv
)
missing=()
for p in "${PKGS[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO=sudo
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -qq
  $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi
