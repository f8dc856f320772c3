#!/usr/bin/env bash
# device-ab.sh: one device call that compares two kernel libraries (docs/KERNEL-ABI.md) on
# the same scenarios: each scenario runs A, B, B, A through `prefill-bench run --kernels`
# (every check on, a JSON report each), so a drift in clocks over the call shows as a
# difference between the two A (or the two B) runs rather than as a gain. Then one table:
# per scenario and kernel entry the four medians, whether every run passed, and whether the
# outputs were bit-identical across all four (the reports' output_checksums). This is how
# kernels/PERF-NOTES.md's "measured, not shipped" tables were taken (session 30).
# Usage, on the GPU machine from the repo root:
#   PB_A=lib_a.so PB_B=lib_b.so scripts/device-ab.sh SCENARIO.yaml...
# Knobs: PB_A, PB_B (required; the same library twice compares two `run` settings);
# PB_AB_ARGS (extra `run` arguments for both, e.g. "--impl gdn=split"); PB_A_ARGS, PB_B_ARGS
# (extra arguments for one side only, e.g. PB_B_ARGS="--impl gdn=bf16" against the default:
# the outputs then differ by design); PB_BUDGET (seconds; no scenario starts after it, and the table lists
# it as 0 of 4 runs; default 480);
# PB_BUNDLE, PB_BACKEND, PB_RUN_TIMEOUT, OUT as in device-lib.sh. Files in ${OUT:-results}/:
# summary.txt (the table last), ab.txt (every run's log), json.tar.gz (the reports, packed into
# one file: the device tool returns only a few files a call).
# Local dry run without a GPU: PB_BACKEND=host PB_A=build/libpb_kernels_host.so
# PB_B=build/libpb_kernels_host.so PB_BUNDLE=build/apps scripts/device-ab.sh scenarios/smoke.yaml
set -uo pipefail
: "${PB_A:?PB_A: the first kernel library (.so)}" "${PB_B:?PB_B: the second kernel library (.so)}"
[ $# -gt 0 ] || { echo "usage: PB_A=a.so PB_B=b.so $0 SCENARIO.yaml..." >&2; exit 2; }
source "$(dirname "${BASH_SOURCE[0]}")/device-lib.sh"
for lib in "$PB_A" "$PB_B"; do [ -f "$lib" ] || { echo "device-ab: no library $lib" >> "$S"; cat "$S"; exit 2; }; done
echo "A = $PB_A ${PB_A_ARGS:-}, B = $PB_B ${PB_B_ARGS:-}, extra args: ${PB_AB_ARGS:-none}" >> "$S"
jd="$O/json"
mkdir -p "$jd"
read -r -a extra <<< "${PB_AB_ARGS:-}"
read -r -a extra_A <<< "${PB_A_ARGS:-}"
read -r -a extra_B <<< "${PB_B_ARGS:-}"
names=()
for f in "$@"; do
  name=$(basename "$f" .yaml)
  names+=("$name")
  [ "$(el)" -gt "${PB_BUDGET:-480}" ] && { echo "budget: skipped $f" >> "$S"; continue; }
  i=0
  for side in A B B A; do
    lib=$PB_A side_args=(${extra_A[@]+"${extra_A[@]}"})
    [ "$side" = B ] && lib=$PB_B side_args=(${extra_B[@]+"${extra_B[@]}"})
    run1 ab.txt "$side $name" "$f" --kernels "$lib" ${extra[@]+"${extra[@]}"} ${side_args[@]+"${side_args[@]}"} \
      --json "$jd/$name.$i.$side.json"
    i=$((i + 1))
  done
done
python3 - "$jd" "${names[@]}" <<'PY' >> "$S"
import collections, glob, json, os, sys
runs = collections.OrderedDict((n, []) for n in sys.argv[2:])  # scenario -> [(side, report run 0)]
for p in sorted(glob.glob(os.path.join(sys.argv[1], "*.json"))):  # NAME.RUN.SIDE.json: run order
    name, _, side = os.path.basename(p)[:-5].rsplit(".", 2)
    try:
        r = json.load(open(p))["runs"][0]
    except Exception as e:
        runs.setdefault(name, []).append((side, None)); print(f"{name} {side}: unreadable report ({e})"); continue
    runs.setdefault(name, []).append((side, r))
print("scenario, kernel entry: medians ms A / A and B / B (run order A B B A); passed; outputs")
for name, rs in runs.items():
    ok = [r for _, r in rs if r]
    complete = len(ok) == 4  # a run that wrote no report (exit 2, 3, a timeout) leaves fewer
    same = complete and bool(ok[0].get("output_checksums")) and all(
        r.get("output_checksums") == ok[0].get("output_checksums") for r in ok)
    passed = complete and all(r.get("passed") for r in ok)
    if not complete: print(f"{name}: {len(ok)} of 4 runs left a report (see ab.txt)")
    keys = []
    for r in ok:
        for t in r.get("timings", []):
            if (t["layer"], t["kernel"]) not in keys: keys.append((t["layer"], t["kernel"]))
    for layer, kernel in keys:
        med = {"A": [], "B": []}
        for side, r in rs:
            m = [t["median_ms"] for t in (r or {}).get("timings", []) if (t["layer"], t["kernel"]) == (layer, kernel)]
            med[side].append(f"{m[0]:.4f}" if m else "-")
        print(f"{name:<24} L{layer}.{kernel:<14} A {' / '.join(med['A'])}  B {' / '.join(med['B'])}  "
              f"{'passed' if passed else 'FAILED'}  {'bit-identical' if same else 'OUTPUTS DIFFER'}")
PY
tar -czf "$O/json.tar.gz" -C "$O" json && rm -rf "$jd"
cat "$S"
