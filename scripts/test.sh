#!/usr/bin/env bash
# test.sh: installs what is missing, builds, runs every test with ctest and
# prints ctest's summary. GPU tests skip ("skipped: no CUDA device") without a GPU.
# Then the sanitizer job (scripts/sanitize.sh): the shipped suite and the fault
# matrix on a host-only ASan + UBSan build, which must report nothing.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
build="${PB_BUILD_DIR:-$root/build}"
start=$(date +%s)
"$root/scripts/build.sh"
echo "test.sh: build took $(( $(date +%s) - start )) s"
(cd "$build" && ctest --output-on-failure -j "$(nproc)" ${PB_CTEST_ARGS:-})
echo "test.sh: build and tests took $(( $(date +%s) - start )) s"
"$root/scripts/sanitize.sh"
echo "test.sh: all of it took $(( $(date +%s) - start )) s"
