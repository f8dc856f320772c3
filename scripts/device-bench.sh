#!/usr/bin/env bash
# device-bench.sh: our batched attention against PyTorch's, side by side in one
# call on the GPU machine. Run there from the repo root with bundle/ present
# (scripts/bundle.sh builds it here; the device tool carries it: carry=["bundle"]).
# 1. pb_bench_cuda --export writes the benchmarked batches as JSON (lib/export.h);
# 2. pb_bench_cuda times the tensor-core kernels (every variant, and the default the
#    CUDA backend runs) and the fp32 one;
# 3. scripts/peer_torch.py times PyTorch SDPA (flash, cuDNN, efficient) per stream
#    on the same batches (PB_PEER: which batch names, a grep -E pattern);
# 4. prefill-bench runs the docs/DEVICE-NOTES.md peer scenarios end to end (all checks),
#    unless PB_SKIP contains "harness";
# 5. pb_bench_gdn_cuda times the Gated DeltaNet kernels (chunked, token, conv1d)
#    and staging + upload, unless PB_SKIP contains "gdn";
# then prints the ratio table last. Files in ${OUT:-results}/: device-bench.log,
# bench.json, peer.json, ratio.txt, harness.txt, gdn-bench.json.
# Knobs: PB_BUNDLE, PB_BENCH_PASS1/2 or PB_BENCH_FILTER (google benchmark regexes),
# PB_PEER, PB_HARNESS_KERNELS (default "mma fp32"), PB_SKIP (words: ours peer harness gdn).
set -uo pipefail
B="${PB_BUNDLE:-$PWD/bundle}"
root="$(cd "$(dirname "$0")/.." && pwd)"
out="${OUT:-results}"
mkdir -p "$out"
out="$(cd "$out" && pwd)"
work="$(mktemp -d)"
skip=" ${PB_SKIP:-} "
peer_pat="${PB_PEER:-^(mixed-d(64|128|256)-h16x(2|16)|8x4096-d(128|256)-h16x(2|16)|32x512-d128-h16x2|chunked8x512at3584-d128-h16x2)$}"
exec > >(tee "$out/device-bench.log") 2>&1
started=$(date +%s)
elapsed() { echo "$(( $(date +%s) - started )) s"; }

[ -x "$B/pb_bench_cuda" ] || { echo "device-bench: no $B/pb_bench_cuda (scripts/bundle.sh with benchmarks)"; exit 2; }
echo "== device"
nvidia-smi --query-gpu=name,driver_version,pstate,clocks.sm,clocks.max.sm,temperature.gpu,power.draw \
  --format=csv,noheader 2>&1 || echo "nvidia-smi failed"

echo "== batches [$(elapsed)]"
mkdir -p "$work/batches"
"$B/pb_bench_cuda" --export "$work/batches" || exit 1

if [[ "$skip" != *" ours "* ]]; then
  # Two processes: the mma.sync and fp32 kernels first, then the wgmma variants and
  # the default, so a failing kernel (a sticky CUDA error) cannot void the others.
  # PB_BENCH_PASS1 / PB_BENCH_PASS2 override the two filters; PB_BENCH_FILTER
  # replaces both passes with one.
  passes=("${PB_BENCH_FILTER:-${PB_BENCH_PASS1:-(mma[.]v[0-9][.]N|fp32)}}")
  [ -z "${PB_BENCH_FILTER:-}" ] && passes+=("${PB_BENCH_PASS2:-(mma[.]default|mma[.]v[0-9]+[.]wg)}")
  i=0
  for f in "${passes[@]}"; do
    i=$((i + 1))
    echo "== ours: pb_bench_cuda pass $i ($f) [$(elapsed)]"
    timeout "${PB_PASS_TIMEOUT:-100}" "$B/pb_bench_cuda" --benchmark_filter="$f" --benchmark_out="$work/bench-$i.json" \
      --benchmark_out_format=json --benchmark_counters_tabular=true
    echo "pb_bench_cuda pass $i exit $? [$(elapsed)]"
  done
  python3 - "$out/bench.json" "$work"/bench-*.json <<'PY'
import json, sys
merged = None
for p in sys.argv[2:]:
    try:
        d = json.load(open(p))
    except Exception as e:
        print(f"{p}: unreadable ({e})")
        continue
    if merged is None:
        merged = d
    else:
        merged["benchmarks"] += d.get("benchmarks", [])
json.dump(merged or {"benchmarks": []}, open(sys.argv[1], "w"), indent=1)
PY
fi

if [[ "$skip" != *" peer "* ]]; then
  echo "== peer: PyTorch SDPA [$(elapsed)]"
  peers=()
  for f in "$work"/batches/*.json; do
    n="$(basename "$f" .json)"
    echo "$n" | grep -Eq "$peer_pat" && peers+=("$f")
  done
  PYTHONUNBUFFERED=1 python3 "$root/scripts/peer_torch.py" "${peers[@]}" --json "$out/peer.json"
  echo "peer_torch exit $? [$(elapsed)]"
fi

if [[ "$skip" != *" harness "* ]] && [ -x "$B/prefill-bench" ]; then
  echo "== harness: prefill-bench run (cuda backend, every check) [$(elapsed)]"
  : > "$out/harness.txt"
  for f in "$B"/tests/peer-attention-d*.yaml; do
    [ -f "$f" ] || continue
    for k in ${PB_HARNESS_KERNELS:-mma fp32}; do
      echo "--- $(basename "$f") --impl attention=$k" >> "$out/harness.txt"
      timeout 200 "$B/prefill-bench" run "$f" --backend cuda --impl "attention=$k" --no-color >> "$out/harness.txt" 2>&1
      echo "exit $?" >> "$out/harness.txt"
    done
  done
  grep -E "^---|attention|PASS|FAIL|exit" "$out/harness.txt" | head -40
fi

if [[ "$skip" != *" gdn "* ]]; then
  echo "== gdn: pb_bench_gdn_cuda [$(elapsed)]"
  if [ -x "$B/pb_bench_gdn_cuda" ]; then
    timeout 300 "$B/pb_bench_gdn_cuda" --benchmark_format=console --benchmark_out="$out/gdn-bench.json" \
      --benchmark_out_format=json
    echo "pb_bench_gdn_cuda exit $? [$(elapsed)]"
  else
    echo "device-bench: no $B/pb_bench_gdn_cuda (scripts/bundle.sh with benchmarks): gdn step skipped"
  fi
fi

echo "== ratio table [$(elapsed)]"
python3 - "$out/bench.json" "$out/peer.json" <<'PY' | tee "$out/ratio.txt"
import json, os, sys
bench_p, peer_p = sys.argv[1], sys.argv[2]
PEAK = 790.0  # measured bf16 matrix peak of this workplace's H200 (docs/DEVICE-NOTES.md)
ours = {}  # batch -> {kernel: (tflops, ms)}
if os.path.exists(bench_p):
    for b in json.load(open(bench_p)).get("benchmarks", []):
        if b.get("run_type") == "aggregate" and b.get("aggregate_name") != "median":
            continue
        name = b.get("run_name", b["name"])
        parts = name.split("/")
        if len(parts) < 3 or "TFLOP/s" not in b:
            continue
        ours.setdefault(parts[1], {})[parts[2]] = (b["TFLOP/s"], b["real_time"])
peer = {}
if os.path.exists(peer_p):
    for r in json.load(open(peer_p))["results"]:
        if "tflops" in r:
            peer.setdefault(r["batch"], {})[r["backend"]] = r["tflops"]
cols = ["flash", "cudnn", "efficient"]
print("TFLOP/s (docs/DESIGN.md counting; peer = PyTorch SDPA per stream, contiguous K/V; ours = one batched launch, paged K/V)")
hdr = f"{'batch':<30} {'default':>7} {'mma best':>8} {'variant':<16} {'fp32':>6} " + " ".join(f"{c:>9}" for c in cols) + \
      f" {'batched*':>9} {'ours/best peer':>14} {'%peak':>6}"
print(hdr)
for batch in sorted(set(ours) | set(peer)):
    o = ours.get(batch, {})
    v0 = o.get("mma.default", (0.0, 0))[0]
    best_k, best = "", 0.0
    for k, v in o.items():
        if k.startswith("mma") and v[0] > best:
            best_k, best = k, v[0]
    fp = o.get("fp32", (0.0, 0))[0]
    p = peer.get(batch, {})
    loop = [p.get(c, 0.0) for c in cols]
    batched = max([v for k, v in p.items() if k.endswith("/batched")] or [0.0])
    bp = max(loop) if loop else 0.0
    ratio = f"{v0 / bp:.2f}x" if bp > 0 and v0 > 0 else "-"
    print(f"{batch:<30} {v0:7.1f} {best:8.1f} {best_k[:16]:<16} {fp:6.1f} " +
          " ".join(f"{x:9.1f}" for x in loop) + f" {batched:9.1f} {ratio:>14} {100 * v0 / PEAK:5.1f}%")
print("ratio = our default kernel (mma.default: what the CUDA backend runs) over the best PyTorch backend looping over streams; "
      "batched* = PyTorch's one batched call where all streams are equal (not a varlen peer); %peak of 790 TFLOP/s")
PY
rm -rf "$work"
echo "device-bench done [$(elapsed)]"
