#!/usr/bin/env bash
# Builds Kiln on the accelerator machine, which has nvcc, cmake and ninja but no apt: the Debian
# -dev packages the build needs travel in .deps/debs (scripts/fetch-device-deps fills it here;
# name .deps in the device tool's `carry`) and are extracted into a private prefix.
# Usage there: scripts/device-build.sh [extra cmake args]; then run tests with
#   source scripts/device-env.sh && ctest --test-dir build-device
set -euo pipefail
cd "$(dirname "$0")/.."
PREFIX="${KILN_DEPS_PREFIX:-/tmp/kiln-deps}"
if [ ! -f "$PREFIX/.extracted" ]; then
  ls .deps/debs/*.deb >/dev/null 2>&1 || { echo "device-build: .deps/debs is empty: run scripts/fetch-device-deps here and carry .deps" >&2; exit 2; }
  mkdir -p "$PREFIX"
  for deb in .deps/debs/*.deb; do dpkg -x "$deb" "$PREFIX"; done
  touch "$PREFIX/.extracted"
fi
export KILN_DEPS_PREFIX="$PREFIX"
source scripts/device-env.sh
cmake -S . -B build-device -G Ninja -DCMAKE_BUILD_TYPE=Release "$@" >&2
cmake --build build-device -j "$(nproc)" >&2
