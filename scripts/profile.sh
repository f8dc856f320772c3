#!/usr/bin/env bash
# profile.sh SCENARIO [args]: one clean timeline of a scenario. Runs
# `prefill-bench run SCENARIO --profile` (one warm iteration per layer, no checks)
# under Nsight Systems (`nsys profile --trace=cuda,nvtx`) when nsys is on PATH,
# writing results/profile-<name>.nsys-rep and saying how to open it; otherwise it
# says what to install and runs the --profile mode plainly, so the NVTX ranges
# (lib/trace.h: scenario > stage/upload > layer > kernel) still run.
# SCENARIO: a file, or the name of one in scenarios/ ("smoke"). Extra arguments go
# to `prefill-bench run` (e.g. --backend cuda). PB_BIN=path uses that binary (a
# bundle on the GPU machine) instead of building; PB_RESULTS_DIR moves results/.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
if [ $# -lt 1 ]; then
  echo "usage: scripts/profile.sh SCENARIO [prefill-bench run args...]" >&2
  exit 2
fi
scn="$1"
shift
if [ ! -f "$scn" ]; then
  if [ -f "$root/scenarios/$scn.yaml" ]; then
    scn="$root/scenarios/$scn.yaml"
  else
    echo "profile.sh: no scenario file '$scn' (nor scenarios/$scn.yaml)" >&2
    exit 2
  fi
fi
name="$(basename "$scn")"
name="${name%.*}"
if [ -n "${PB_BIN:-}" ]; then
  bin="$PB_BIN"
else
  "$root/scripts/build.sh" >/dev/null
  bin="${PB_BUILD_DIR:-$root/build}/apps/prefill-bench"
fi
results="${PB_RESULTS_DIR:-$root/results}"
mkdir -p "$results"
out="$results/profile-$name"

if command -v nsys >/dev/null 2>&1; then
  echo "profile.sh: nsys profile --trace=cuda,nvtx -> $out.nsys-rep" >&2
  set +e
  nsys profile --trace=cuda,nvtx --force-overwrite=true --output="$out" \
    "$bin" run "$scn" --profile --no-color "$@"
  rc=$?
  set -e
  rep="$out.nsys-rep"
  [ -f "$rep" ] || rep="$out.qdrep"  # Nsight Systems before 2021.4
  if [ -f "$rep" ]; then
    echo "profile.sh: wrote $rep"
    echo "  open it:   nsys-ui $rep   (the Nsight Systems GUI; or copy the file to a machine with one)"
    echo "  summaries: nsys stats --report nvtx_sum,cuda_gpu_kern_sum $rep"
    echo "  NVTX ranges are in the 'prefill-bench' domain: scenario > stage/upload > L<i> attn|gdn > kernels"
  else
    echo "profile.sh: nsys wrote no report (exit $rc)" >&2
    [ "$rc" -ne 0 ] || rc=1
  fi
  exit "$rc"
fi

cat >&2 <<MSG
profile.sh: nsys (Nsight Systems) is not on PATH, so no timeline is recorded.
  To record one, install Nsight Systems: the CUDA toolkit's nsight-systems package
  (NVIDIA's CUDA apt repository: apt-get install nsight-systems-<version>, or the
  installer from https://developer.nvidia.com/nsight-systems), and put its bin/
  directory (e.g. /opt/nvidia/nsight-systems/<version>/bin) on PATH.
  Running the --profile mode plainly instead: the NVTX ranges still run (they cost
  next to nothing without a tool attached; a build without CUDA compiles them out).
MSG
exec "$bin" run "$scn" --profile --no-color "$@"
