#!/usr/bin/env bash
# device-gdn-split.sh: one device call that checks and times the context-parallel GDN
# kernel (kernels/gdn_split.cu, --impl gdn=split) against the chunked one. Run on the
# GPU machine from the repo root with bundle/ present (scripts/bundle.sh; or
# PB_BUNDLE=DIR holding prefill-bench, scenarios/ and tests/gdn-large.yaml). In order,
# each step logged, a summary printed last:
# 1. prefill-bench run --impl gdn=split on every shipped scenario, gdn-large and two odd
#    shapes (exit 0 wanted), and one --graph run (a replay on a second batch of the bucket);
# 2. compute-sanitizer memcheck on a continuation batch with split;
# 3. issue 13's rows (YAMLs generated here), split then chunked, every check on; the gdn
#    entry's median (split: its three launches) from the JSON report, until PB_BUDGET
#    seconds (default 200) have gone, the low-parallelism rows first.
# Files in ${OUT:-results}/ (<= 8): summary.txt, correct.txt, san-memcheck.txt,
# timing.txt, timing.tsv. Local dry run without a GPU: PB_BACKEND=host
# PB_NEW=gdn=recurrent PB_OLD=gdn=recurrent PB_SCALE=64 (stream lengths / 64).
set -uo pipefail
NEW="${PB_NEW:-gdn=split}"
OLD="${PB_OLD:-gdn=chunked}"
SCALE="${PB_SCALE:-1}"
source "$(dirname "${BASH_SOURCE[0]}")/device-lib.sh"
: > "$O/timing.tsv"
echo "backend $BACKEND, new $NEW, old $OLD, lengths / $SCALE" >> "$S"

# 1. correctness on every shipped scenario, gdn-large and two shapes no shipped scenario
# has (k_dim short of the 32/64/128 padding, v_dim not a multiple of the 16/32-row blocks;
# streams shorter than, equal to and just past a chunk; a carried state)
yd=$(mktemp -d)
odd() {  # name k_heads v_heads k_dim v_dim
  printf 'name: %s\nseed: 18\nmodel:\n  num_q_heads: 2\n  num_kv_heads: 1\n  head_dim: 64\n  block_size: 16\n' "$1"
  printf '  gdn: {num_k_heads: %s, num_v_heads: %s, k_dim: %s, v_dim: %s, d_conv: 4}\n' "$2" "$3" "$4" "$5"
  printf 'layers:\n  pattern: [gdn, gdn]\nstreams:\n  - tokens: 1\n  - tokens: 32\n  - tokens: 33\n'
  printf '  - tokens: 700\n  - {chunk_start: 100, tokens: 77}\nrun: {warmup: 1, repeat: 2}\n'
}
odd split-odd-k40-v24 2 6 40 24 > "$yd/split-odd-k40-v24.yaml"
odd split-odd-k128-v136 1 3 128 136 > "$yd/split-odd-k128-v136.yaml"
fails=0 hangs=0
for f in "$B"/scenarios/*.yaml "$B"/tests/gdn-large.yaml "$yd"/split-odd-*.yaml; do
  [ -f "$f" ] || continue
  run1 correct.txt "$NEW $(basename "$f" .yaml)" "$f" --impl "$NEW" || { [ $? = 124 ] && hangs=$((hangs + 1)); fails=$((fails + 1)); }
  [ "$hangs" -ge 2 ] && { echo "two runs hung (timeout): the kernel deadlocks; stopping" >> "$S"; cat "$S"; exit 1; }
done
run1 correct.txt "$NEW --graph continuation-chunks" "$B/scenarios/continuation-chunks.yaml" --impl "$NEW" --graph ||
  fails=$((fails + 1))
echo "correctness: $fails run(s) with a nonzero exit (0 wanted)" >> "$S"

# 2. compute-sanitizer memcheck on a continuation batch
CS=$(command -v compute-sanitizer || ls /usr/local/cuda*/bin/compute-sanitizer 2>/dev/null | head -1)
if [ "$BACKEND" = cuda ] && [ -n "$CS" ]; then
  timeout 60 "$CS" --tool memcheck --error-exitcode 99 "$PB" run "$B/scenarios/continuation-chunks.yaml" \
    --backend cuda --no-color --repeat 1 --warmup 0 --impl "$NEW" > "$O/san-memcheck.txt" 2>&1
  echo "compute-sanitizer memcheck exit $? [$(el)s]" >> "$S"
  tail -2 "$O/san-memcheck.txt" >> "$S"
else
  echo "compute-sanitizer memcheck not run (backend $BACKEND, tool '${CS}')" >> "$S"
fi

# 3. issue 13's rows: name k_heads v_heads d stream lengths...
mix="7 130 511 1024 2048 4096 333 8192"
rows=(
  "h2x8-d128-2x4096 2 8 128 4096 4096"
  "h2x8-d128-1x65536 2 8 128 65536"
  "h4x8-d64-8x2048 4 8 64 $(printf '2048 %.0s' {1..8})"
  "h16x32-d128-8x2048 16 32 128 $(printf '2048 %.0s' {1..8})"
  "h16x64-d128-4x2048 16 64 128 2048 2048 2048 2048"
  "h16x32-d128-32x512 16 32 128 $(printf '512 %.0s' {1..32})"
  "h16x32-d128-mixed 16 32 128 $mix"
)
median() {  # json: the gdn entry's median ms (layer 0), or "-"
  python3 - "$1" <<'EOF' 2>/dev/null || echo "-"
import json, sys
d = json.load(open(sys.argv[1]))
t = [x for r in d["runs"] for x in r["timings"] if x["kernel"] == "gdn"]
print(f"{t[0]['median_ms']:.4f}" if t else "-")
EOF
}
printf 'row\t%s ms\t%s ms\t%s exit\t%s exit\n' "$NEW" "$OLD" "$NEW" "$OLD" >> "$O/timing.tsv"
lines=()
for row in "${rows[@]}"; do
  [ "$(el)" -gt "${PB_BUDGET:-200}" ] && { echo "budget: stopped before ${row%% *}" >> "$S"; break; }
  set -- $row
  name=$1 hk=$2 hv=$3 d=$4
  shift 4
  {
    printf 'name: %s\nseed: 13\nmodel:\n  num_q_heads: 2\n  num_kv_heads: 1\n  head_dim: 64\n  block_size: 16\n' "$name"
    printf '  gdn: {num_k_heads: %s, num_v_heads: %s, k_dim: %s, v_dim: %s, d_conv: 4}\n' "$hk" "$hv" "$d" "$d"
    printf 'layers:\n  pattern: [gdn]\nstreams:\n'
    for t in "$@"; do printf '  - tokens: %s\n' $(( t / SCALE > 0 ? t / SCALE : 1 )); done
    printf 'run: {warmup: 3, repeat: 10}\n'
  } > "$yd/$name.yaml"
  run1 timing.txt "$NEW $name" "$yd/$name.yaml" --impl "$NEW" --json "$yd/$name-new.json"
  rn=$?
  run1 timing.txt "$OLD $name" "$yd/$name.yaml" --impl "$OLD" --json "$yd/$name-old.json"
  ro=$?
  mn=$(median "$yd/$name-new.json") mo=$(median "$yd/$name-old.json")
  printf '%s\t%s\t%s\t%s\t%s\n' "$name" "$mn" "$mo" "$rn" "$ro" >> "$O/timing.tsv"
  ratio=$(awk -v a="$mn" -v b="$mo" 'BEGIN { if (a + 0 > 0 && b + 0 > 0) printf "%.2fx", b / a; else print "-" }')
  lines+=("  $name: $NEW $mn ms (exit $rn), $OLD $mo ms (exit $ro), $OLD/$NEW $ratio")
done
rm -rf "$yd"
echo "timings (gdn entry median, ms; >1x: the split is faster):" >> "$S"
for l in "${lines[@]}"; do echo "$l" >> "$S"; done
cat "$S"
