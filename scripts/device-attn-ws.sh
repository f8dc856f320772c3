#!/usr/bin/env bash
# device-attn-ws.sh: one device call that checks a change to the warp-specialized
# attention kernel (kernels/attention_ws.cu, --impl attention=ws; `auto`'s kernel on
# sm_90) and times it against the wgmma kernel (--impl attention=mma). Run on the GPU machine from the repo root with bundle/ present
# (scripts/bundle.sh; or PB_BUNDLE=DIR holding prefill-bench, attention_mma_test,
# scenarios/ and tests/*.yaml). In order, each step logged, a summary printed last:
# 1. attention_mma_test: ws and ws:cp against the fp32 oracle and the float64
#    reference (block sizes 16/64: TMA; 7/1: cp.async), NaN semantics;
# 2. prefill-bench run --impl attention=ws on every shipped scenario and the GPU
#    scenarios (exit 0 wanted), ws:cp on those that fail;
# 3. ws under injected faults (exit 1 wanted); compute-sanitizer memcheck and racecheck;
# 4. timings, ws against the wgmma kernel (mma), on issue 15's shapes (block size 16),
#    until PB_BUDGET seconds (default 210) have gone.
# Files in ${OUT:-results}/ (<= 8): summary.txt, mma_test.txt, correct.txt,
# faults.txt, san-memcheck.txt, san-racecheck.txt, timing.txt.
set -uo pipefail
: "${PB_RUN_TIMEOUT:=60}"
source "$(dirname "${BASH_SOURCE[0]}")/device-lib.sh"

timeout 100 "$B/attention_mma_test" > "$O/mma_test.txt" 2>&1
echo "attention_mma_test exit $? [$(el)s]" >> "$S"
grep -E "^FAIL" "$O/mma_test.txt" | head -12 >> "$S"
echo "ws checks ok: $(grep -c '^ok .*ws' "$O/mma_test.txt")" >> "$S"

fails="" hangs=0
for f in "$B"/scenarios/*.yaml "$B"/tests/*.yaml; do
  run1 correct.txt "ws $(basename "$f" .yaml)" "$f" --impl attention=ws || { [ $? = 124 ] && hangs=$((hangs + 1)); fails="$fails $f"; }
  [ "$hangs" -ge 2 ] && { echo "two runs hung (timeout): the kernel deadlocks; stopping" >> "$S"; cat "$S"; exit 1; }
done
for f in $fails; do run1 correct.txt "ws:cp $(basename "$f" .yaml)" "$f" --impl attention=ws:cp; done

for fault in causal-off-by-one block-table-swap staged-bytes-undercount; do
  run1 faults.txt "ws --inject $fault (want 1)" "$B/scenarios/continuation-chunks.yaml" --impl attention=ws --inject "$fault"
done

CS=$(command -v compute-sanitizer || ls /usr/local/cuda*/bin/compute-sanitizer 2>/dev/null | head -1)
if [ -n "$CS" ]; then
  for tool in memcheck racecheck; do
    timeout 45 "$CS" --tool "$tool" --error-exitcode 99 "$PB" run "$B/scenarios/continuation-chunks.yaml" \
      --backend cuda --no-color --repeat 1 --warmup 0 --impl attention=ws > "$O/san-$tool.txt" 2>&1
    echo "compute-sanitizer $tool exit $? [$(el)s]" >> "$S"
    tail -2 "$O/san-$tool.txt" >> "$S"
  done
else
  echo "no compute-sanitizer on this machine" >> "$S"
fi

# Issue 15's shapes: name q_heads kv_heads head_dim stream lengths...
shapes=(
  "mixed-d128 16 2 128 7 130 511 1024 2048 4096 333 8192"
  "1x16384-d128-mha 16 16 128 16384"
  "mixed-d256 16 2 256 7 130 511 1024 2048 4096 333 8192"
  "1x16384-d256-h8 8 8 256 16384"
  "mixed-d64 16 2 64 7 130 511 1024 2048 4096 333 8192"
  "1x16384-d64-h32 32 32 64 16384"
  "8x4096-d128 16 2 128 $(printf '4096 %.0s' {1..8})"
  "8x4096-d256 16 2 256 $(printf '4096 %.0s' {1..8})"
  "4x4096-d128-mha 16 16 128 $(printf '4096 %.0s' {1..4})"
  "32x512-d128-mha 16 16 128 $(printf '512 %.0s' {1..32})"
)
yd=$(mktemp -d)
for line in "${shapes[@]}"; do
  [ "$(el)" -gt "${PB_BUDGET:-210}" ] && { echo "budget: stopped before ${line%% *}" >> "$S"; break; }
  set -- $line
  name=$1 q=$2 kv=$3 d=$4
  shift 4
  {
    printf 'name: %s\nseed: 15\nmodel: {num_q_heads: %s, num_kv_heads: %s, head_dim: %s, block_size: 16}\n' "$name" "$q" "$kv" "$d"
    printf 'layers: {pattern: [attn]}\nstreams:\n'
    for t in "$@"; do printf '  - tokens: %s\n' "$t"; done
    printf 'run: {warmup: 2, repeat: 10}\nreference: {sample: 4}\n'
  } > "$yd/$name.yaml"
  for k in ws mma; do
    run1 timing.txt "$k $name" "$yd/$name.yaml" --impl "attention=$k"
    awk -v k="$k" -v n="$name" '$3 == "attention" {l = "  time " k " " n ": " $5 " ms, " $8 " TFLOP/s"} END {print l}' \
      "$O/timing.txt" >> "$S"
  done
done
cat "$S"
