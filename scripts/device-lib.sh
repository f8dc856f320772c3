# device-lib.sh: what the one-call device scripts (device-attn-ws.sh, device-conv.sh,
# device-gdn-split.sh) share, sourced from the repo root on the GPU machine: the bundle
# B (PB_BUNDLE, default ./bundle), the output folder O ($OUT, default results/), the
# harness PB, the summary S (emptied, the GPU's name and clocks first), el (seconds since
# sourcing) and run1, one harness run whose exit lands in the summary.
# Knobs: PB_BACKEND (default cuda), PB_RUN_TIMEOUT (seconds a run, default 90).
B="${PB_BUNDLE:-$PWD/bundle}"
O="${OUT:-results}"
BACKEND="${PB_BACKEND:-cuda}"
mkdir -p "$O"
t0=$(date +%s)
el() { echo $(( $(date +%s) - t0 )); }
PB="$B/prefill-bench"
S="$O/summary.txt"
: > "$S"
command -v nvidia-smi > /dev/null && nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm --format=csv,noheader >> "$S" 2>&1

run1() {  # log label args...: one harness run, its exit in the summary
  local log=$1 label=$2
  shift 2
  echo "--- $label" >> "$O/$log"
  timeout "${PB_RUN_TIMEOUT:-90}" "$PB" run "$@" --backend "$BACKEND" --no-color >> "$O/$log" 2>&1
  local rc=$?
  echo "exit $rc" >> "$O/$log"
  echo "$label exit $rc [$(el)s]" >> "$S"
  return $rc
}
