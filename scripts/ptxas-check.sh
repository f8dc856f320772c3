#!/usr/bin/env bash
# ptxas-check.sh: reads ptxas's report on the kernels that issue wgmma (the translation
# units including kernels/wgmma.cuh's wgmma wrappers) and fails when ptxas serialized
# a kernel's wgmma: any advisory "wgmma.mma_async instructions are serialized due to ..."
# (C7515: non wgmma instructions defining accumulator registers between start and end of
# the pipeline stage; C7518: a compiler-inserted wait in a divergent path; C7520 ...).
# No spill line shows it, the outputs stay bit-identical, and the kernel runs 1.4-1.55x
# slower (kernels/PERF-NOTES.md, "v8.3 and one timing protocol").
# Usage: scripts/ptxas-check.sh BUILD_DIR, a configured CUDA build (scripts/bundle.sh runs
# it on build-bundle before it assembles bundle/). Each unit is compiled again with
# `-Xptxas -v` into a scratch folder; the build's own objects are not touched.
set -euo pipefail
build="$(cd "${1:?usage: ptxas-check.sh BUILD_DIR}" && pwd)"
scratch="$(mktemp -d)"
trap 'rm -rf "$scratch"' EXIT
fail=0
for tu in attention_ws attention_mma gdn_split; do
  obj="kernels/CMakeFiles/pb_kernels_obj.dir/$tu.cu.o"
  cmd="$(ninja -C "$build" -t commands "$obj" | tail -1)"
  [ -n "$cmd" ] || { echo "ptxas-check: no compile command for $obj in $build" >&2; exit 2; }
  # The unit's own command, its object and depfile redirected to the scratch folder.
  cmd="$(printf '%s' "$cmd" | sed -e "s# -MF [^ ]*# -MF $scratch/$tu.d#" -e "s# -o [^ ]*# -o $scratch/$tu.o#")"
  log="$scratch/$tu.log"
  (cd "$build" && eval "$cmd -Xptxas -v") > "$log" 2>&1 || { cat "$log" >&2; echo "ptxas-check: $tu.cu did not compile" >&2; exit 2; }
  if grep -q "wgmma.mma_async instructions are serialized" "$log"; then
    echo "ptxas-check: ptxas serialized wgmma in kernels/$tu.cu:" >&2
    grep "wgmma.mma_async instructions are serialized" "$log" | sed 's/.*(\(C[0-9]*\)).*in the function /  \1 /' >&2
    fail=1
  fi
done
[ "$fail" = 0 ] && echo "ptxas-check: no serialized wgmma in attention_ws.cu, attention_mma.cu, gdn_split.cu"
exit "$fail"
