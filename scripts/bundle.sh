#!/usr/bin/env bash
# bundle.sh: builds Release with CUDA into build-bundle/ (or $PB_BUNDLE_BUILD) and
# assembles bundle/ for the GPU machine: prefill-bench, our kernel libraries
# (libpb_kernels_cuda.so, libpb_kernels_host.so), the test binaries, any
# benchmark programs, scenarios/ and the GPU test scenarios (tests/cuda/*.yaml).
# Every binary must need only glibc at run time (libstdc++/libgcc, cudart and
# yaml-cpp are linked statically); a shared library a binary still needs
# (libbenchmark.so.1debian) is copied next to it and must be found through an
# $ORIGIN rpath. Fails when a binary needs anything else or bundle/ tops 60 MiB. The
# fatbinaries are compressed (CMakeLists.txt, PB_CUDA_FATBIN): about 25 MiB as built.
# Left out by default: the host-only benchmarks (bench/*_host) and pb_tests (device-check
# runs its cuda cases under PB_RUN_PB_TESTS=1 when it is there): PB_BUNDLE_PB_TESTS=1 adds
# it, about 34 MiB then.
# Before it assembles anything it runs scripts/ptxas-check.sh on the build: a kernel whose
# wgmma ptxas serialized stops the bundle.
# The device tool takes it along with: run(command=..., carry=["bundle"]).
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
build="${PB_BUNDLE_BUILD:-$root/build-bundle}"
bundle="$root/bundle"
jobs="${PB_JOBS:-2}"

bench=OFF
[ -f "$root/bench/CMakeLists.txt" ] && bench=ON
cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DPB_WITH_CUDA=ON \
  -DPB_BUILD_BENCH="${PB_BUNDLE_BENCH:-$bench}" >/dev/null
grep -q "libpb_kernels.a" "$build/build.ninja" ||
  { echo "bundle.sh: this configuration has no CUDA backend (nvcc not found?)" >&2; exit 1; }
pb_tests=""
[ -n "${PB_BUNDLE_PB_TESTS:-}" ] && pb_tests=pb_tests
ninja -C "$build" -j "$jobs" prefill-bench $pb_tests cuda_backend_test attention_mma_test pb_kernels_cuda pb_kernels_host
# No bundle whose wgmma kernels ptxas serialized (a 1.4-1.55x loss no test sees).
"$root/scripts/ptxas-check.sh" "$build"
# Benchmark programs for the GPU machine, when the bench/ directory defines any.
bench_targets=$(ninja -C "$build" -t targets all 2>/dev/null |
                sed -En 's#^(bench/[A-Za-z0-9_.-]*): (CXX|CUDA)_EXECUTABLE_LINKER.*#\1#p' | grep -v '_host$' || true)
[ -n "$bench_targets" ] && ninja -C "$build" -j "$jobs" $bench_targets

rm -rf "$bundle"
mkdir -p "$bundle/scenarios" "$bundle/tests"
cp "$build/apps/prefill-bench" "$bundle/"
cp "$build/libpb_kernels_cuda.so" "$build/libpb_kernels_host.so" "$bundle/"  # our kernel libraries, for --kernels
cp "$build/tests/cuda_backend_test" "$build/tests/attention_mma_test" "$bundle/"
[ -n "$pb_tests" ] && cp "$build/tests/pb_tests" "$bundle/"
for t in $bench_targets; do cp "$build/$t" "$bundle/"; done
cp "$root"/scenarios/*.yaml "$root"/scenarios/*.jsonl "$bundle/scenarios/"
cp "$root"/tests/cuda/*.yaml "$bundle/tests/"
cp "$root/scripts/device-check.sh" "$bundle/"
mkdir -p "$bundle/scripts" && cp "$root/scripts/nvtx_tree.py" "$bundle/scripts/"  # device-check's NVTX tree assertion
# The host symbol tables are not needed there (kernel names live in the device code, the
# libraries keep their dynamic symbols): stripped, the bundle stays under the carry limit.
for bin in "$bundle"/*; do
  [ -f "$bin" ] && [ -x "$bin" ] && readelf -h "$bin" >/dev/null 2>&1 && strip --strip-unneeded "$bin"
done

# Run-time dependencies, checked on each binary's own NEEDED entries: glibc's
# libraries only, or libbenchmark.so.1debian carried beside it and found through
# an $ORIGIN runpath. (That .so itself needs the system libstdc++.so.6 and
# libgcc_s.so.1, which every Ubuntu has: said below, not carried.)
allowed='^(libc\.so|libm\.so|libdl\.so|libpthread\.so|librt\.so|ld-linux-x86-64\.so)'
status=0
for bin in "$bundle"/*; do
  [ -f "$bin" ] && [ -x "$bin" ] && readelf -h "$bin" >/dev/null 2>&1 || continue
  for lib in $(readelf -d "$bin" | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p'); do
    echo "$lib" | grep -Eq "$allowed" && continue
    if [[ "$lib" == libbenchmark* ]]; then
      path=$(ldd "$bin" | awk -v l="$lib" '$1 == l {print $3}')
      [ -n "$path" ] && [ -f "$path" ] && cp -n "$path" "$bundle/"
      if ! readelf -d "$bin" | grep -Eq 'R(UN)?PATH.*\$ORIGIN'; then
        echo "bundle.sh: $(basename "$bin") needs $lib but has no \$ORIGIN rpath" >&2
        status=1
      fi
      continue
    fi
    echo "bundle.sh: $(basename "$bin") needs $lib; only glibc may stay shared" >&2
    status=1
  done
done
for so in "$bundle"/*.so*; do
  [ -f "$so" ] || continue
  echo "bundle.sh: carried $(basename "$so") needs from the GPU machine:" \
       $(readelf -d "$so" | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p')
done
[ "$status" -eq 0 ] || exit 1

size_kib=$(du -sk "$bundle" | cut -f1)
if [ "$size_kib" -gt $((60 * 1024)) ]; then
  echo "bundle.sh: bundle/ is $((size_kib / 1024)) MiB, over the 60 MiB limit" >&2
  exit 1
fi
echo "bundle.sh: bundle/ ready, $((size_kib / 1024)) MiB:"
ls -l "$bundle" | sed -n '2,$p'
