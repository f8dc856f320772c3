#!/usr/bin/env bash
# sanitize.sh: the AddressSanitizer + UndefinedBehaviorSanitizer job (scripts/test.sh,
# hence CI, runs it): a host-only build into build-asan/ (or $PB_ASAN_BUILD_DIR), then
# every shipped scenario and the host fault matrix under the sanitizers. Any finding
# aborts the process that has it (-fno-sanitize-recover=all, halt_on_error), so the
# job exits non-zero; 0 means no finding, and that every fault ran sanitized at least once.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
build="${PB_ASAN_BUILD_DIR:-$root/build-asan}"
"$root/scripts/deps.sh"
start=$(date +%s)
if [ ! -f "$build/build.ninja" ]; then
  cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DPB_WITH_CUDA=OFF \
        -DPB_SANITIZE=ON -DPB_BUILD_BENCH=OFF ${PB_CMAKE_ARGS:-} >/dev/null
fi
ninja -C "$build" ${PB_NINJA_ARGS:-} prefill-bench pb_sanitize_tests
built=$(date +%s)
echo "sanitize.sh: build took $(( built - start )) s"

export ASAN_OPTIONS="halt_on_error=1:detect_leaks=1:strict_init_order=1"
export UBSAN_OPTIONS="halt_on_error=1:print_stacktrace=1"
# The shipped suite through the CLI, with a sampled attention reference (the
# reference is the slow part under ASan and is not what this job is after: the
# backend, staging and checks run in full), then the bounds decoding on corrupted
# metadata (HostKernels.GarbageMetadataStaysInBounds) and every fault on the shipped
# scenarios on the host but the seven largest. Those seven run the same code paths as the
# other twelve, and every fault still runs on at least two of the twelve; their faulted
# runs stay in the unsanitized ctest matrix and their clean runs in the suite above.
# Measured on a 2-core machine, one process: qwen3-next and mixed-lengths took 63% of the
# matrix and gdn-long-memory ~40 s a case (excluded before session 36); decode-heavy,
# long-and-short, uniform-8x512 and few-heads-long 10-19 s a case, 668 of the remaining
# 847 s (session 36), which kept CI within minutes of its 45-minute limit.
"$build/apps/prefill-bench" run "$root"/scenarios/*.yaml --backend host --ref-sample 8 --no-color
# Two gtest shards side by side (the CI machine has 2 cores).
big='*_qwen3_next*:*_mixed_lengths*:*_gdn_long_memory*:*_decode_heavy*:*_long_and_short*:*_uniform_8x512*:*_few_heads_long*'
filter="HostKernels.GarbageMetadata*:*FaultMatrix.NamedCheckTrips/host_*-$big"
listed=$("$build/tests/pb_sanitize_tests" --gtest_filter="$filter" --gtest_list_tests | grep -c '^  ' || true)
[ "$listed" -gt 20 ] || { echo "sanitize.sh: only $listed sanitizer tests match '$filter'"; exit 1; }
echo "sanitize.sh: $listed sanitizer tests"
shards=$(nproc); pids=(); xmls=()
for ((i = 0; i < shards; ++i)); do
  xmls+=("$build/sanitize-shard-$i.xml")
  rm -f "${xmls[$i]}"  # a report left by an earlier run must not stand in for this one
  GTEST_TOTAL_SHARDS=$shards GTEST_SHARD_INDEX=$i "$build/tests/pb_sanitize_tests" --gtest_filter="$filter" \
    --gtest_brief=1 --gtest_output="xml:${xmls[$i]}" > "$build/sanitize-shard-$i.log" 2>&1 &
  pids+=($!)
done
failed=0
for ((i = 0; i < shards; ++i)); do
  if ! wait "${pids[$i]}"; then failed=1; fi
  cat "$build/sanitize-shard-$i.log"
done
[ "$failed" = 0 ] || { echo "sanitize.sh: a sanitizer test failed (logs above)"; exit 1; }
# Every fault --inject knows must have run (not skipped) on at least one scenario here: the
# scenarios left out above must not take a fault's last sanitized case with them.
"$build/apps/prefill-bench" faults | awk '{print $1}' > "$build/sanitize-faults.txt"
python3 - "$build/sanitize-faults.txt" "${xmls[@]}" <<'PY' || exit 1
import sys, xml.etree.ElementTree as ET
faults = [f.strip().replace("-", "_") for f in open(sys.argv[1]) if f.strip()]
ran = set()
for path in sys.argv[2:]:
    for case in ET.parse(path).iter("testcase"):
        if case.get("result", "completed") == "completed" and case.find("skipped") is None:
            ran.add(case.get("name", ""))
missing = [f for f in faults if not any(n.startswith("NamedCheckTrips/host_" + f + "_") for n in ran)]
if not faults or missing:
    print("sanitize.sh: no sanitized fault-matrix case ran for: " + (", ".join(missing) or "(no faults listed)"))
    sys.exit(1)
print(f"sanitize.sh: all {len(faults)} faults ran under the sanitizers")
PY
echo "sanitize.sh: runs took $(( $(date +%s) - built )) s"
