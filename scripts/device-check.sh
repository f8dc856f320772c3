#!/usr/bin/env bash
# device-check.sh: the GPU machine's check, run there from the repo root with
# bundle/ present (scripts/bundle.sh built it here; the device tool carries it).
# It prints the GPU, runs every shipped scenario (and the GPU test scenarios in
# bundle/tests/) with --backend cuda (the shipped ones and the walk's tests again with
# --impl gdn=chunked), the fault matrix on the CUDA backend
# (every fault on every scenario where it can show; it must trip its check),
# compute-sanitizer memcheck and racecheck on the smoke scenario, racecheck and
# synccheck on tests/gdn-narrow-buffers.yaml (the narrow gdn walk at k_dim 128, --impl
# gdn=chunked; racecheck again at its default, the bf16 split) and
# tests/gdn-planned-walk.yaml (the gdn walk's queue),
# memcheck under the faults that corrupt metadata read back, and the GPU
# tests (cuda_backend_test; pb_tests' cuda cases with PB_RUN_PB_TESTS=1); then
# prints a short summary table last. Everything lands in
# ${OUT:-results}/ as at most 8 files (the device tool's limit):
# device-check.log, summary.txt, scenarios.json, fault-matrix.txt,
# sanitizer.txt, gpu-tests.txt, logs.tar.gz (per-scenario tables and JSON),
# ncu.txt (PB_NCU=1: Nsight Compute speed of light of the big shapes).
# With bundle/libpb_kernels_cuda.so, every scenario runs again through --kernels
# and its outputs are compared bit for bit with the built-in run (gpu-tests.txt).
# Knobs: PB_BUNDLE (bundle dir), PB_SKIP (words: scenarios kernels faults sanitizer tests nvtx),
# PB_SCENARIO_TIMEOUT / PB_PHASE_TIMEOUT (seconds).
set -uo pipefail
B="${PB_BUNDLE:-$PWD/bundle}"
out="${OUT:-results}"
mkdir -p "$out"
out="$(cd "$out" && pwd)"
work="$(mktemp -d)"
mkdir -p "$work/json" "$work/logs"
skip=" ${PB_SKIP:-} "
scn_timeout="${PB_SCENARIO_TIMEOUT:-240}"
phase_timeout="${PB_PHASE_TIMEOUT:-300}"
exec > >(tee "$out/device-check.log") 2>&1
started=$(date +%s)
elapsed() { echo "$(( $(date +%s) - started )) s"; }

[ -x "$B/prefill-bench" ] || { echo "device-check: no $B/prefill-bench (run scripts/bundle.sh and carry bundle)"; exit 2; }
echo "== device (repo $PWD)"
nvidia-smi --query-gpu=name,driver_version,memory.total,pstate,clocks.sm,clocks.max.sm,temperature.gpu,power.draw \
  --format=csv,noheader 2>&1 || echo "nvidia-smi failed"
uname -r

scenarios=("$B"/scenarios/*.yaml "$B"/tests/*.yaml)
# Every shipped scenario, and the GPU test scenarios written for the chunked walk's paths,
# run a second time with the walk asked for: at 8 v heads or fewer the default is the bf16
# split (kernels/kernel_table.cu), and the walk stays checked on every batch shape.
declare -A also_impl=([gdn-narrow-buffers]=gdn=chunked [gdn-odd-narrow]=gdn=chunked
                      [gdn-odd-narrow-k32]=gdn=chunked [gdn-odd-narrow-k64]=gdn=chunked)
declare -A scn_rc
if [[ "$skip" != *" scenarios "* ]]; then
  echo "== scenarios (--backend cuda) [$(elapsed)]"
  for f in "${scenarios[@]}"; do
    [ -f "$f" ] || continue
    base="$(basename "$f" .yaml)"
    again="${also_impl[$base]:-}"
    [[ "$f" == "$B/scenarios/"* ]] && again=gdn=chunked
    for impl in "" $again; do
      name="$base${impl:+.${impl#*=}}"
      timeout "$scn_timeout" "$B/prefill-bench" run "$f" --backend cuda --no-color ${impl:+--impl "$impl"} \
        --json "$work/json/$name.json" > "$work/logs/$name.txt" 2>&1
      rc=$?
      scn_rc[$name]=$rc
      echo "-- $name${impl:+ (--impl $impl)}: exit $rc [$(elapsed)]"
      cat "$work/logs/$name.txt"
    done
  done
fi

if [[ "$skip" != *" tests "* ]]; then
  echo "== GPU tests [$(elapsed)]"
  : > "$out/gpu-tests.txt"
  timeout "$phase_timeout" "$B/cuda_backend_test" >> "$out/gpu-tests.txt" 2>&1
  echo "cuda_backend_test exit $?" >> "$out/gpu-tests.txt"
  if [ -x "$B/attention_mma_test" ]; then
    timeout "$phase_timeout" "$B/attention_mma_test" >> "$out/gpu-tests.txt" 2>&1
    echo "attention_mma_test exit $?" >> "$out/gpu-tests.txt"
  fi
  # The lead's gtest cases that use the GPU (fault matrix on cuda), opt-in (~105 s on an
  # H100). They read scenarios/ and tests/ from $PB_SOURCE_DIR: this checkout.
  if [ -n "${PB_RUN_PB_TESTS:-}" ] && [ -x "$B/pb_tests" ]; then
    PB_SOURCE_DIR="${PB_SOURCE_DIR:-$PWD}" timeout "$phase_timeout" "$B/pb_tests" --gtest_brief=1 \
      --gtest_filter="${PB_GTEST_FILTER:-*cuda*}" >> "$out/gpu-tests.txt" 2>&1
    echo "pb_tests exit $?" >> "$out/gpu-tests.txt"
  fi
  tail -n 40 "$out/gpu-tests.txt"
fi

# Our CUDA kernel library loaded through --kernels: every scenario again, its
# layer outputs bit-identical to the built-in run's, its times beside them.
if [[ "$skip" != *" kernels "* ]] && [ -f "$B/libpb_kernels_cuda.so" ] && [[ "$skip" != *" scenarios "* ]]; then
  echo "== scenarios through --kernels libpb_kernels_cuda.so [$(elapsed)]"
  mkdir -p "$work/json-so"
  for f in "${scenarios[@]}"; do
    [ -f "$f" ] || continue
    name="$(basename "$f" .yaml)"
    timeout "$scn_timeout" "$B/prefill-bench" run "$f" --kernels "$B/libpb_kernels_cuda.so" --no-color \
      --json "$work/json-so/$name.json" > "$work/logs/$name.kernels-so.txt" 2>&1
    echo "-- $name (--kernels): exit $? [$(elapsed)]"
  done
  if command -v python3 >/dev/null; then
    python3 - "$work/json" "$work/json-so" <<'PY' | tee -a "$out/gpu-tests.txt"
import glob, json, os, sys
a_dir, b_dir = sys.argv[1], sys.argv[2]
print("kernels-so: scenario, outputs vs built-in, kernel medians ms built-in -> --kernels")
for p in sorted(glob.glob(os.path.join(b_dir, "*.json"))):
    q = os.path.join(a_dir, os.path.basename(p))
    try:
        a, b = json.load(open(q))["runs"][0], json.load(open(p))["runs"][0]
    except Exception as e:
        print(f"kernels-so {os.path.basename(p)}: unreadable ({e})"); continue
    same = a.get("output_checksums") == b.get("output_checksums") and all(a.get("output_checksums", [""]))
    ta = {(t["layer"], t["kernel"]): t["median_ms"] for t in a["timings"]}
    tb = {(t["layer"], t["kernel"]): t["median_ms"] for t in b["timings"]}
    ks = " ".join(f"L{l}.{k}={ta[(l, k)]:.4f}->{tb.get((l, k)) or 0:.4f}" for (l, k) in sorted(ta))
    print(f"kernels-so {a['scenario']['name']:<26} {'PASS' if b['passed'] else 'FAIL'} "
          f"{'bit-identical' if same else 'OUTPUTS DIFFER'} {ks}")
PY
  fi
fi

# Graph mode (docs/DESIGN.md "Graph mode"): every scenario captured, replayed, and
# replayed again on the bucket's second batch; the graph check and graph_replay timings.
if [[ "$skip" != *" graph "* ]]; then
  echo "== scenarios with --graph [$(elapsed)]"
  mkdir -p "$work/json-graph"
  for f in "${scenarios[@]}"; do
    [ -f "$f" ] || continue
    name="$(basename "$f" .yaml)"
    timeout "$scn_timeout" "$B/prefill-bench" run "$f" --backend cuda --graph --no-color \
      --json "$work/json-graph/$name.json" > "$work/logs/$name.graph.txt" 2>&1
    echo "-- $name (--graph): exit $? [$(elapsed)]"
  done
  if command -v python3 >/dev/null; then
    python3 - "$work/json-graph" <<'PY' | tee -a "$out/gpu-tests.txt"
import glob, json, os, sys
for p in sorted(glob.glob(os.path.join(sys.argv[1], "*.json"))):
    try:
        r = json.load(open(p))["runs"][0]
    except Exception as e:
        print(f"graph {os.path.basename(p)}: unreadable ({e})"); continue
    g = next((c for c in r["checks"] if c["name"] == "graph"), None)
    d = r.get("graph", {}).get("batch2_differs", {})
    t = " ".join(f"L{x['layer']}={x['median_ms']:.4f}" for x in r["timings"] if x["kernel"] == "graph_replay")
    state = "missing" if g is None else ("not run: " + g["not_run_why"]) if not g["ran"] else ("pass" if g["passed"] else "FAIL")
    print(f"graph {r['scenario']['name']:<26} {r['verdict']:<11} graph={state} differs="
          f"{','.join(k for k in ('counts', 'chunk_starts', 'kv_lens', 'block_tables') if d.get(k))} replay_ms {t}")
PY
  fi
fi

if [[ "$skip" != *" sanitizer "* ]]; then
  echo "== compute-sanitizer [$(elapsed)]"
  : > "$out/sanitizer.txt"
  # smoke under memcheck and racecheck; the narrow gdn walk at k_dim 128, both of its
  # launches (one raw buffer co-batched, two alone), under racecheck and synccheck: the
  # walk whose staging warps run P4 too, which smoke (k_dim 32) never takes; the gdn walk's
  # queue (gdn-planned-walk: planned on 132-SM devices) under racecheck and synccheck.
  # gdn-narrow-buffers also with its default (the bf16 split at two v heads).
  for pair in "memcheck scenarios/smoke" "racecheck scenarios/smoke" \
              "racecheck tests/gdn-narrow-buffers gdn=chunked" "synccheck tests/gdn-narrow-buffers gdn=chunked" \
              "racecheck tests/gdn-narrow-buffers" \
              "racecheck tests/gdn-planned-walk" "synccheck tests/gdn-planned-walk"; do
    read -r tool f impl <<< "$pair"
    [ -f "$B/$f.yaml" ] || { echo "$tool $(basename "$f"): not in the bundle: exit 2" >> "$out/sanitizer.txt"; continue; }
    echo "--- $tool $(basename "$f")${impl:+ --impl $impl}" >> "$out/sanitizer.txt"
    timeout "$phase_timeout" compute-sanitizer --tool "$tool" --error-exitcode 99 \
      "$B/prefill-bench" run "$B/$f.yaml" --backend cuda --no-color --repeat 1 --warmup 0 ${impl:+--impl "$impl"} \
      >> "$out/sanitizer.txt" 2>&1
    echo "$tool $(basename "$f")${impl:+ ($impl)} exit $?" >> "$out/sanitizer.txt"
  done
  # The faults that corrupt what the kernels read back (cu_seqlens and kv_lens under
  # h_state_ptrs, swapped table and state pointers): the run must fail its check
  # (exit 1) without a memory error (exit 99).
  for fault in staged-bytes-undercount block-table-swap h-state-ptr-swap; do
    echo "--- memcheck --inject $fault (expected: exit 1, 0 errors)" >> "$out/sanitizer.txt"
    timeout "$phase_timeout" compute-sanitizer --tool memcheck --error-exitcode 99 \
      "$B/prefill-bench" run "$B/scenarios/qwen3-next.yaml" --backend cuda --no-color --repeat 1 --warmup 0 \
      --inject "$fault" >> "$out/sanitizer.txt" 2>&1
    echo "memcheck $fault exit $?" >> "$out/sanitizer.txt"
  done
  grep -E "^---|ERROR SUMMARY|RACECHECK SUMMARY|exit [0-9]+$|Invalid|Race" "$out/sanitizer.txt" | head -40
fi

# Cold (the default run above) against hot L2 on one scenario: both timings side by
# side in gpu-tests.txt, and compare must refuse the pair (exit 2).
if [[ "$skip" != *" scenarios "* ]] && [ -f "$work/json/mixed-lengths.json" ]; then
  echo "== L2 hot vs cold (mixed-lengths) [$(elapsed)]"
  timeout "$scn_timeout" "$B/prefill-bench" run "$B/scenarios/mixed-lengths.yaml" --backend cuda --no-color --l2 hot \
    --json "$work/logs/mixed-lengths.hot.json" > "$work/logs/mixed-lengths.hot.txt" 2>&1
  echo "l2 hot run exit $?" | tee -a "$out/gpu-tests.txt"
  "$B/prefill-bench" compare "$work/json/mixed-lengths.json" "$work/logs/mixed-lengths.hot.json" --no-color \
    > "$work/logs/compare-cold-hot.txt" 2>&1
  echo "l2 compare cold vs hot exit $? (expected 2): $(tail -n 1 "$work/logs/compare-cold-hot.txt")" | tee -a "$out/gpu-tests.txt"
  grep -h -E "^  timing:|THROTTLED" "$work/logs/mixed-lengths.txt" "$work/logs/mixed-lengths.hot.txt" | tee -a "$out/gpu-tests.txt"
fi

# The NVTX range tree as Nsight Compute sees it (nsys is absent there): every
# kernel of the smoke scenario inside prefill-bench > scenario > layer > kernel,
# each once (scripts/nvtx_tree.py; its parser is tested in ctest on a sample of
# ncu's format). Hot L2, so no flush runs between the ranges. The raw ncu output
# goes to logs.tar.gz (logs/ncu-nvtx.txt), the verdict to gpu-tests.txt.
if [[ "$skip" != *" nvtx "* ]] && command -v ncu >/dev/null; then
  echo "== NVTX tree under ncu --nvtx [$(elapsed)]"
  timeout "$phase_timeout" ncu --nvtx --section LaunchStats \
    "$B/prefill-bench" run "$B/scenarios/smoke.yaml" --backend cuda --no-color --profile --l2 hot \
    > "$work/logs/ncu-nvtx.txt" 2>&1
  echo "ncu --nvtx exit $?" >> "$work/logs/ncu-nvtx.txt"
  checker="$PWD/scripts/nvtx_tree.py"
  [ -f "$checker" ] || checker="$B/scripts/nvtx_tree.py"
  python3 "$checker" "$work/logs/ncu-nvtx.txt" 2>&1 | tee -a "$out/gpu-tests.txt"
  echo "nvtx_tree exit ${PIPESTATUS[0]}" | tee -a "$out/gpu-tests.txt"
  grep -m 12 -E "NVTX|<[0-9]+," "$work/logs/ncu-nvtx.txt"
fi

if [[ "$skip" != *" faults "* ]]; then
  echo "== fault matrix (cuda backend) [$(elapsed)]"
  timeout "$phase_timeout" "$B/cuda_backend_test" --fault-matrix "$B"/scenarios/*.yaml > "$out/fault-matrix.txt" 2>&1
  echo "fault matrix exit $? [$(elapsed)]"
  cat "$out/fault-matrix.txt"
fi

if [ -n "${PB_NCU:-}" ] && command -v ncu >/dev/null; then
  # Opt-in: Nsight Compute speed-of-light of one launch per kernel of the
  # peer attention shape and the large GDN (clocks as found: --clock-control none).
  echo "== ncu [$(elapsed)]"
  for scn in "$B/tests/peer-attention-d128.yaml" "$B/tests/gdn-large.yaml"; do
    [ -f "$scn" ] || continue
    timeout "$phase_timeout" ncu --clock-control none --section SpeedOfLight --section Occupancy \
      -k "regex:attention_kernel|gdn_kernel|conv1d_kernel|rope_kernel|kv_write_kernel" -c 4 \
      "$B/prefill-bench" run "$scn" --backend cuda --no-color --repeat 1 --warmup 0 >> "$out/ncu.txt" 2>&1
    echo "ncu $(basename "$scn") exit $?" >> "$out/ncu.txt"
  done
  grep -E "^  [a-z_:<>0-9, ]+\(|Duration|Compute \(SM\) Throughput|Memory Throughput|Achieved Occupancy|exit" "$out/ncu.txt" | head -60
fi

(cd "$work" && tar czf "$out/logs.tar.gz" json logs) 2>/dev/null

# Summary last: one line per scenario, the fault matrix rows, sanitizer and tests.
{
  echo "== summary [$(elapsed)]"
  if command -v python3 >/dev/null && ls "$work"/json/*.json >/dev/null 2>&1; then
    python3 - "$work/json" "$out/scenarios.json" <<'PY'
import glob, json, os, sys
src, merged = sys.argv[1], sys.argv[2]
reports = []
for p in sorted(glob.glob(os.path.join(src, "*.json"))):
    try:
        reports.append(json.load(open(p)))
        reports[-1]["file"] = os.path.basename(p)[:-5]  # the scenario, or scenario.variant
    except Exception as e:
        print(f"{os.path.basename(p)}: unreadable JSON ({e})")
json.dump({"reports": reports}, open(merged, "w"), indent=1)
print(f"{'scenario':<26} {'result':<6} {'failed checks':<22} kernel medians ms (sum over layers), attention TFLOP/s")
for rep in reports:
    for run in rep.get("runs", []):
        name = rep.get("file", run["scenario"]["name"])
        bad = [c["name"] for c in run["checks"] if c["ran"] and not c["passed"]]
        per = {}
        att_flops = att_ms = 0.0
        for t in run["timings"]:
            per[t["kernel"]] = per.get(t["kernel"], 0.0) + (t["median_ms"] or 0.0)
            if t["kernel"] == "attention":
                att_flops += t["flops"] or 0.0
                att_ms += t["median_ms"] or 0.0
        ks = " ".join(f"{k}={v:.4f}" for k, v in per.items())
        tf = f" attn {att_flops / (att_ms * 1e9):.1f} TFLOP/s" if att_ms > 0 else ""
        stops = {}
        for t in run["timings"]:
            stops[t.get("stop", "?")] = stops.get(t.get("stop", "?"), 0) + 1
        clk = run.get("clocks", {}).get("after", {})
        thr = ",".join(clk.get("throttle", [])) if clk.get("available") else "nvml n/a"
        extra = f" l2={run.get('l2', '?')} stop={stops} throttle={thr or '-'}"
        print(f"{name:<26} {'PASS' if run['passed'] else 'FAIL':<6} {','.join(bad) or '-':<22} {ks}{tf}{extra}")
PY
  fi
  for name in "${!scn_rc[@]}"; do
    [ "${scn_rc[$name]}" -ne 0 ] && echo "scenario $name: prefill-bench exit ${scn_rc[$name]}"
  done
  [ -f "$out/fault-matrix.txt" ] && sed -n '/^fault matrix/,$p' "$out/fault-matrix.txt"
  [ -f "$out/sanitizer.txt" ] && grep -E "ERROR SUMMARY|RACECHECK SUMMARY|exit [0-9]+$" "$out/sanitizer.txt"
  [ -f "$out/gpu-tests.txt" ] && grep -E "^kernels-so |^nvtx_tree|^l2 " "$out/gpu-tests.txt"
  [ -f "$out/gpu-tests.txt" ] && grep -E "^(PASSED|FAILED)|exit [0-9]+$|tests? (passed|failed)|PASSED \[|FAILED \[" "$out/gpu-tests.txt" | head -12
} | tee "$out/summary.txt"
rm -rf "$work"
