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
# 6. the GDN peer table (issue 13's shapes, scripts/peer_fla.py): ours through
#    prefill-bench (every check) beside fla as a CUDA-graph replay, unless PB_SKIP
#    contains "fla"; fla is unpacked from fla-0.5.2-ops.tar.gz into a git-ignored
#    folder carried along, named by FLA_PARENT (default: .fla beside scripts/);
# then prints the ratio tables last (PyTorch SDPA + FlexAttention; issue 15's rows
# with FA3's published figures). Files in ${OUT:-results}/: device-bench.log,
# bench.json, peer.json, ratio.txt, harness.txt, gdn-bench.json, fla.json, gdn-peer.txt.
# Knobs: PB_BUNDLE, PB_BENCH_PASS1/2 or PB_BENCH_FILTER (google benchmark regexes),
# PB_PEER, PB_FLEX (the batches FlexAttention runs on, a regex; "" none), PB_HARNESS_KERNELS (default "mma fp32"), PB_SKIP (words: ours peer harness gdn fla),
# PB_REST_MS, PB_WARMUP, PB_SAMPLES, PB_L2 (the timing protocol: 250, 3, 20, cold),
# PB_GDN_IMPLS (the gdn variants whose table step 6 prints beside fla, words: default "auto";
# "auto bf16" adds the bf16 split), FLA_PARENT, PB_FLA_SHAPES (a subset of peer_fla.py's shape
# names), PB_FLA_TIMEOUT (default 480 s:
# fla autotunes every shape on its first calls, 30-60 s a shape on the H200), PB_KERNELS (a
# kernel library, docs/KERNEL-ABI.md, that steps 4 and 6 run through `--kernels`: a user's
# library, or a build of ours other than the bundle's; default: the CUDA backend's own).
set -uo pipefail
B="${PB_BUNDLE:-$PWD/bundle}"
root="$(cd "$(dirname "$0")/.." && pwd)"
out="${OUT:-results}"
mkdir -p "$out"
out="$(cd "$out" && pwd)"
work="$(mktemp -d)"
skip=" ${PB_SKIP:-} "
kern=()
if [ -n "${PB_KERNELS:-}" ]; then
  [ -f "$PB_KERNELS" ] || { echo "device-bench: PB_KERNELS: no library $PB_KERNELS" >&2; exit 2; }
  kern=(--kernels "$(cd "$(dirname "$PB_KERNELS")" && pwd)/$(basename "$PB_KERNELS")")
fi
# One timing protocol for ours and the peers (bench/bench_protocol.h says what it is):
# pb_bench_cuda, pb_bench_gdn_cuda, peer_torch.py and peer_fla.py get the same flags.
proto=(--rest-ms "${PB_REST_MS:-250}" --warmup "${PB_WARMUP:-3}" --samples "${PB_SAMPLES:-20}" --l2 "${PB_L2:-cold}")
peer_pat="${PB_PEER:-^(mixed-d(64|128|256)-h16x(2|16)|8x4096-d(128|256)-h16x(2|16)|32x512-d128-h16x(2|16)|chunked8x512at3584-d128-h16x2|1x16384-d(128-h16x16|256-h8x8|64-h32x32)|4x4096-d128-h16x16)$}"
# FlexAttention compiles each shape (~20-25 s): issue 15's rows only, by default.
flex_pat="${PB_FLEX-^(mixed-d(64|128|256)-h16x2|8x4096-d(128|256)-h16x2|32x512-d128-h16x16|1x16384-d(128-h16x16|256-h8x8|64-h32x32)|4x4096-d128-h16x16)$}"
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
  # Two processes: the mma.sync and fp32 kernels first, then the wgmma variants, ws and
  # the default, so a failing kernel (a sticky CUDA error) cannot void the others.
  # PB_BENCH_PASS1 / PB_BENCH_PASS2 override the two filters; PB_BENCH_FILTER
  # replaces both passes with one.
  passes=("${PB_BENCH_FILTER:-${PB_BENCH_PASS1:-(mma[.]v[0-9][.]N|fp32)}}")
  [ -z "${PB_BENCH_FILTER:-}" ] && passes+=("${PB_BENCH_PASS2:-(/default|mma[.]default|mma[.]v[0-9]+[.]wg|/ws)}")
  i=0
  for f in "${passes[@]}"; do
    i=$((i + 1))
    echo "== ours: pb_bench_cuda pass $i ($f) [$(elapsed)]"
    timeout "${PB_PASS_TIMEOUT:-100}" "$B/pb_bench_cuda" "${proto[@]}" --benchmark_filter="$f" --benchmark_out="$work/bench-$i.json" \
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
  PYTHONUNBUFFERED=1 python3 "$root/scripts/peer_torch.py" "${peers[@]}" "${proto[@]}" --json "$out/peer.json" --flex "$flex_pat"
  echo "peer_torch exit $? [$(elapsed)]"
fi

if [[ "$skip" != *" harness "* ]] && [ -x "$B/prefill-bench" ]; then
  echo "== harness: prefill-bench run (cuda backend, every check) [$(elapsed)]"
  : > "$out/harness.txt"
  for f in "$B"/tests/peer-attention-d*.yaml; do
    [ -f "$f" ] || continue
    for k in ${PB_HARNESS_KERNELS:-mma fp32}; do
      echo "--- $(basename "$f") --impl attention=$k" >> "$out/harness.txt"
      timeout 200 "$B/prefill-bench" run "$f" --backend cuda ${kern[@]+"${kern[@]}"} --impl "attention=$k" --no-color >> "$out/harness.txt" 2>&1
      echo "exit $?" >> "$out/harness.txt"
    done
  done
  grep -E "^---|attention|PASS|FAIL|exit" "$out/harness.txt" | head -40
fi

if [[ "$skip" != *" gdn "* ]]; then
  echo "== gdn: pb_bench_gdn_cuda [$(elapsed)]"
  if [ -x "$B/pb_bench_gdn_cuda" ]; then
    timeout 300 "$B/pb_bench_gdn_cuda" "${proto[@]}" --benchmark_format=console --benchmark_out="$out/gdn-bench.json" \
      --benchmark_out_format=json
    echo "pb_bench_gdn_cuda exit $? [$(elapsed)]"
  else
    echo "device-bench: no $B/pb_bench_gdn_cuda (scripts/bundle.sh with benchmarks): gdn step skipped"
  fi
fi

if [[ "$skip" != *" fla "* ]]; then
  echo "== gdn peer: ours (prefill-bench) vs fla (scripts/peer_fla.py) [$(elapsed)]"
  fla_parent="${FLA_PARENT:-$root/.fla}"
  mkdir -p "$work/gdn-scenarios"
  python3 "$root/scripts/peer_fla.py" scenarios "$work/gdn-scenarios"
  for impl in ${PB_GDN_IMPLS:-auto}; do
    mkdir -p "$work/gdn-ours-$impl"
    for f in "$work"/gdn-scenarios/*.yaml; do
      n="$(basename "$f" .yaml)"
      [ -n "${PB_FLA_SHAPES:-}" ] && [[ " $PB_FLA_SHAPES " != *" $n "* ]] && continue
      timeout 200 "$B/prefill-bench" run "$f" --backend cuda ${kern[@]+"${kern[@]}"} --impl "gdn=$impl" --no-color \
        --json "$work/gdn-ours-$impl/$n.json" > "$work/gdn-ours-$impl/$n.txt" 2>&1
      echo "ours $n --impl gdn=$impl: exit $? [$(elapsed)]"
    done
  done
  if [ -d "$fla_parent/fla" ]; then
    FLA_PARENT="$fla_parent" PYTHONUNBUFFERED=1 timeout "${PB_FLA_TIMEOUT:-480}" python3 "$root/scripts/peer_fla.py" time \
      --json "$out/fla.json" "${proto[@]}" ${PB_FLA_SHAPES:-}
    echo "peer_fla exit $? [$(elapsed)]"
  else
    echo "device-bench: no $fla_parent/fla (unpack fla-0.5.2-ops.tar.gz there, carry it): fla column empty"
  fi
  : > "$out/gdn-peer.txt"
  for impl in ${PB_GDN_IMPLS:-auto}; do
    echo "ours: prefill-bench --impl gdn=$impl ${kern[*]}" | tee -a "$out/gdn-peer.txt"
    python3 "$root/scripts/peer_fla.py" table --ours "$work/gdn-ours-$impl" --fla "$out/fla.json" | tee -a "$out/gdn-peer.txt"
  done
fi

echo "== ratio table [$(elapsed)]"
python3 - "$out/bench.json" "$out/peer.json" <<'PY' | tee "$out/ratio.txt"
import json, os, sys
bench_p, peer_p = sys.argv[1], sys.argv[2]
PEAK = 790.0  # measured bf16 matrix peak of this workplace's H200 (docs/DEVICE-NOTES.md)
ours = {}  # batch -> {kernel: (tflops, median ms)}
clocks, peer_clocks = {}, {}  # batch -> {kernel or backend: (SM MHz, throttle bits) after its last sample}
if os.path.exists(bench_p):
    for b in json.load(open(bench_p)).get("benchmarks", []):
        if b.get("run_type") == "aggregate" and b.get("aggregate_name") != "median":
            continue
        name = b.get("run_name", b["name"])
        parts = name.split("/")
        if len(parts) < 3 or "TFLOP/s" not in b:
            continue
        ours.setdefault(parts[1], {})[parts[2]] = (b["TFLOP/s"], b.get("median_ms", b["real_time"]))
        clocks.setdefault(parts[1], {})[parts[2]] = (b.get("sm_mhz_end"), b.get("throttle_end"))
peer = {}
if os.path.exists(peer_p):
    for r in json.load(open(peer_p))["results"]:
        if "tflops" in r:
            peer.setdefault(r["batch"], {})[r["backend"]] = r["tflops"]
            peer_clocks.setdefault(r["batch"], {})[r["backend"]] = (r.get("sm_mhz_end"), r.get("throttle_end"))
cols = ["flash", "cudnn", "efficient", "flex"]
print("TFLOP/s (docs/DESIGN.md counting; peer = PyTorch SDPA per stream, contiguous K/V, and FlexAttention in one "
      "launch with a document mask; ours = one batched launch, paged K/V)")
hdr = f"{'batch':<30} {'default':>7} {'best':>8} {'kernel':<16} {'fp32':>6} " + " ".join(f"{c:>9}" for c in cols) + \
      f" {'batched*':>9} {'ours/best peer':>14} {'%peak':>6}"
print(hdr)
for batch in sorted(set(ours) | set(peer)):
    o = ours.get(batch, {})
    v0 = o.get("default", (0.0, 0))[0]
    best_k, best = "", 0.0
    for k, v in o.items():
        if (k.startswith("mma") or k == "ws") and v[0] > best:
            best_k, best = k, v[0]
    fp = o.get("fp32", (0.0, 0))[0]
    p = peer.get(batch, {})
    loop = [p.get(c, 0.0) for c in cols]
    batched = max([v for k, v in p.items() if k.endswith("/batched")] or [0.0])
    bp = max(loop) if loop else 0.0
    ratio = f"{v0 / bp:.2f}x" if bp > 0 and v0 > 0 else "-"
    print(f"{batch:<30} {v0:7.1f} {best:8.1f} {best_k[:16]:<16} {fp:6.1f} " +
          " ".join(f"{x:9.1f}" for x in loop) + f" {batched:9.1f} {ratio:>14} {100 * v0 / PEAK:5.1f}%")
print("ratio = our default kernel (default: what the CUDA backend's attention=auto runs, ws or the mma default) over the best PyTorch backend (SDPA looping "
      "over streams, or Flex); batched* = PyTorch's one batched call where all streams are equal (not a varlen peer); "
      "%peak of 790 TFLOP/s")

# Issue 15's table, row for row; FA3 = the FlashAttention-3 paper (H100 SXM5, causal bf16), published, not measured.
ISSUE15 = [("mixed 7..8192, d128, 16q/2kv", "mixed-d128-h16x2", None),
           ("mixed, d64", "mixed-d64-h16x2", None),
           ("mixed, d256", "mixed-d256-h16x2", None),
           ("8 x 4096, d128, 16/2", "8x4096-d128-h16x2", 579),
           ("8 x 4096, d256, 16/2", "8x4096-d256-h16x2", 612),
           ("1 x 16384, d128, 16 heads MHA", "1x16384-d128-h16x16", 616),
           ("1 x 16384, d256, 8 heads", "1x16384-d256-h8x8", 642),
           ("1 x 16384, d64, 32 heads", "1x16384-d64-h32x32", 473),
           ("4 x 4096, d128, 16 heads MHA", "4x4096-d128-h16x16", 579),
           ("32 x 512, d128, 16 heads MHA", "32x512-d128-h16x16", None)]
print()
print("issue 15: TFLOP/s; best = the best PyTorch backend here (cuDNN, SDPA flash, efficient, Flex; batched "
      "calls included where streams are equal); FA3 = published H100 figure; clocks = SM MHz after the last "
      "sample, ours / best's (+ throttle bits when not 0)")
print(f"{'shape':<32} {'batch':<22} {'ours':>6} {'cuDNN':>6} {'flash':>6} {'Flex':>6} {'best':>6} {'best is':<16} {'FA3':>5} "
      f"{'ours/best':>9} {'ours/FA3':>8}  clocks")
def clk(c):
    if not c or c[0] is None:
        return "?"
    return f"{c[0]:.0f}" + (f" (0x{int(c[1]):x})" if c[1] else "")
for label, batch, fa3 in ISSUE15:
    o = ours.get(batch, {}).get("default", (0.0, 0))[0]
    p = peer.get(batch, {})
    best_is, best = max(p.items(), key=lambda kv: kv[1]) if p else ("", 0.0)
    f = lambda x: f"{x:6.1f}" if x else f"{'-':>6}"
    c = f"{clk(clocks.get(batch, {}).get('default'))} / {clk(peer_clocks.get(batch, {}).get(best_is))}"
    print(f"{label:<32} {batch:<22} {f(o)} {f(p.get('cudnn', 0))} {f(p.get('flash', 0))} {f(p.get('flex', 0))} "
          f"{f(best)} {best_is:<16} {(str(fa3) if fa3 else ''):>5} {(f'{o / best:.2f}x' if o and best else '-'):>9} "
          f"{(f'{o / fa3:.2f}x' if o and fa3 else ''):>8}  {c}")
PY
rm -rf "$work"
echo "device-bench done [$(elapsed)]"
