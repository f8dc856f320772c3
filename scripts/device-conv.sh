#!/usr/bin/env bash
# device-conv.sh: one device call that decides whether the stage conv1d
# (kernels/gdn_conv.cu, --impl conv1d=stage) may become the default (the flip is
# kConvStageDefault in kernels/kernel_table.cu). Run on the GPU machine from the
# repo root with bundle/ present (scripts/bundle.sh; or PB_BUNDLE=DIR holding
# prefill-bench, scenarios/ and tests/gdn-large.yaml). In order, each step logged,
# the summary printed last:
# 1. stage on every shipped scenario and gdn-large, all checks (exit 0 wanted), then
#    window on the same (the oracle); every run's per-layer output_checksums compared
#    bit for bit, stage against window;
# 2. stage under --inject conv-state-bleed (exit 1 wanted: the fault must still show);
# 3. compute-sanitizer memcheck, stage on continuation-chunks (carried conv_state,
#    1- and 2-token streams, runs crossing stream boundaries);
# 4. timings stage / window / row, until PB_BUDGET seconds (default 110) have gone:
#    8 x 2048 (gdn-large's rows), 8 x 8192 = 64k rows, the 20k-row mix (1, 3, 4095,
#    8192, 8192), all at Qwen3-Next's conv width (8192 channels, d_conv 4), then
#    qwen3-next itself. conv1d's work depends only on the rows, streams, conv_dim
#    and d_conv, so these ad-hoc YAMLs keep that width with small GDN heads (256 k
#    / 512 v heads of 8) to keep the float64 GDN reference cheap; gdn-large's own
#    conv1d times (step 1, --repeat 5) are in the summary too. % of 4.8 TB/s from
#    the bytes lib/work_counts counts (the table's GB/s / 48). The ad-hoc runs'
#    checksums are compared stage against window as well.
# Files in ${OUT:-results}/ (<= 8): summary.txt, correct.txt, stage.json,
# window.json, faults.txt, san-memcheck.txt, timing.txt.
# Knobs: PB_BUNDLE, PB_BUDGET, PB_RUN_TIMEOUT (seconds per harness run, default 90).
set -uo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/device-lib.sh"

# The "output_checksums" arrays of a report, one line per run (JSON pretty or not).
checksums() { tr -d ' \n\t' < "$1" | grep -o '"output_checksums":\[[^]]*\]'; }
# same A.json B.json label: every run's checksums present, non-empty and equal.
same() {
  local a b
  [ -f "$1" ] && [ -f "$2" ] || { echo "checksums $3: no report (a run stopped before writing it)" >> "$S"; return; }
  a=$(checksums "$1") b=$(checksums "$2")
  if [ -n "$a" ] && [ "$a" = "$b" ] && ! grep -q '""' <<< "$a"; then
    echo "checksums $3: $(wc -l <<< "$a") runs bit-identical" >> "$S"
  else
    echo "checksums $3: DIFFER" >> "$S"
    diff <(echo "$a") <(echo "$b") | head -8 >> "$S"
  fi
}
# conv1d rows of the last table in a log: "median ms, GB/s, % of 4.8 TB/s" per layer.
conv_times() {
  awk '/^  layer +kernel/ {l = ""} $3 == "conv1d" {l = l sprintf(" L%s %s ms %s GB/s %.1f%%;", $1, $5, $9, $9 / 48)}
       END {print l}' "$1"
}

all=("$B"/scenarios/*.yaml "$B"/tests/gdn-large.yaml)
for k in stage window; do
  run1 correct.txt "$k: ${#all[@]} scenarios" "${all[@]}" --impl conv1d=$k --repeat 5 --json "$O/$k.json"
done
same "$O/stage.json" "$O/window.json" "stage vs window, shipped + gdn-large"
if command -v python3 > /dev/null; then  # the same comparison, named per scenario
  python3 tests/same_outputs.py "$O/window.json" "$O/stage.json" >> "$O/correct.txt" 2>&1
  echo "same_outputs.py exit $?" >> "$S"
fi
for k in stage window; do  # gdn-large is the last scenario: its table is the last of the section
  awk -v k="$k" '/^--- / {on = ($2 == k ":")} on' "$O/correct.txt" > "$O/.section"
  echo "  time $k gdn-large (shipped, --repeat 5):$(conv_times "$O/.section")" >> "$S"
done
rm -f "$O/.section"

run1 faults.txt "stage --inject conv-state-bleed (want 1)" "$B/scenarios/continuation-chunks.yaml" \
  --impl conv1d=stage --inject conv-state-bleed --repeat 1

CS=$(command -v compute-sanitizer || ls /usr/local/cuda*/bin/compute-sanitizer 2>/dev/null | head -1)
if [ -n "$CS" ]; then
  timeout 60 "$CS" --tool memcheck --error-exitcode 99 "$PB" run "$B/scenarios/continuation-chunks.yaml" \
    --backend cuda --no-color --repeat 1 --warmup 0 --impl conv1d=stage > "$O/san-memcheck.txt" 2>&1
  echo "compute-sanitizer memcheck exit $? [$(el)s]" >> "$S"
  tail -2 "$O/san-memcheck.txt" >> "$S"
else
  echo "no compute-sanitizer on this machine" >> "$S"
fi

adhoc() {  # name lengths...: an ad-hoc YAML at Qwen3-Next's conv width in $yd
  local name=$1
  shift
  {
    printf 'name: %s\nseed: 13\n' "$name"
    printf 'model: {num_q_heads: 16, num_kv_heads: 2, head_dim: 128, block_size: 16,\n'
    printf '  gdn: {num_k_heads: 256, num_v_heads: 512, k_dim: 8, v_dim: 8, d_conv: 4}}\n'
    printf 'layers: {pattern: [gdn]}\nchecks: [numeric, state]\nstreams:\n'
    for t in "$@"; do printf '  - tokens: %s\n' "$t"; done
  } > "$yd/$name.yaml"
}
timed() {  # impl name yaml: one timed run, its conv1d times in the summary
  run1 timing.txt "$1 $2" "$3" --impl conv1d=$1 --warmup 2 --repeat 10 --json "$yd/$2.$1.json"
  awk '/^--- / {s = ""} {s = s $0 "\n"} END {printf "%s", s}' "$O/timing.txt" > "$yd/last.txt"
  echo "  time $1 $2:$(conv_times "$yd/last.txt")" >> "$S"
}

# name stream lengths...
shapes=(
  "w8x2048 $(printf '2048 %.0s' {1..8})"
  "w8x8192 $(printf '8192 %.0s' {1..8})"
  "wmix20k 1 3 4095 8192 8192"
)
yd=$(mktemp -d)
for line in "${shapes[@]}" "qwen3-next"; do
  [ "$(el)" -gt "${PB_BUDGET:-110}" ] && { echo "budget: stopped before ${line%% *}" >> "$S"; break; }
  set -- $line
  name=$1
  shift
  if [ "$name" = qwen3-next ]; then
    y="$B/scenarios/qwen3-next.yaml"
  else
    adhoc "$name" "$@"
    y="$yd/$name.yaml"
  fi
  for k in stage window row; do timed "$k" "$name" "$y"; done
  same "$yd/$name.stage.json" "$yd/$name.window.json" "stage vs window, $name"
done

rm -rf "$yd"
cat "$S"
