#!/usr/bin/env bash
# build.sh: configures (once) and builds incrementally into build/ (or $PB_BUILD_DIR).
# CUDA is enabled when nvcc is found; everything host-side builds without it.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
build="${PB_BUILD_DIR:-$root/build}"
"$root/scripts/deps.sh"
if [ ! -f "$build/build.ninja" ]; then
  cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release ${PB_CMAKE_ARGS:-} >/dev/null
fi
ninja -C "$build" ${PB_NINJA_ARGS:-}
