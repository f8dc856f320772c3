// cuda_bench_util.h: what the GPU benchmarks share: BCK (throw on a failed CUDA
// call) and time_launches, which times one launch per Google Benchmark iteration under
// the timing protocol of bench/bench_protocol.h (scripts/peer_protocol.py's time_loop is
// its twin, and device-bench.sh passes both programs the same values): rest `rest_ms`
// with the GPU idle, then `warmup` untimed launches, then `samples` timed ones, each
// after an L2 flush (a write of twice the L2 size, outside the two events) when `l2`
// is cold; the figures come from the median sample. The rest and the short burst put
// both sides' samples at the same clocks (a kernel timed after seconds of other kernels
// meets the power cap; docs/DEVICE-NOTES.md, session 26); the SM clock and throttle
// reasons at the end of each burst are reported beside the time.
// Invariant: time_launches creates and destroys its own stream and events; on any
// CUDA error it calls SkipWithError and returns a negative median.
#pragma once
#include <benchmark/benchmark.h>
#include <cuda_runtime_api.h>

#include <algorithm>
#include <chrono>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "bench/bench_protocol.h"
#include "lib/gpu_clocks.h"
#include "lib/timing.h"

#define BCK(call)                                                                              \
  do {                                                                                         \
    const cudaError_t e_ = (call);                                                             \
    if (e_ != cudaSuccess)                                                                     \
      throw std::runtime_error(std::string(#call) + " failed: " + cudaGetErrorString(e_));     \
  } while (0)

// Registers `b` under the protocol: one sample per iteration, no repetitions.
inline void apply_bench_protocol(benchmark::internal::Benchmark* b) {
  b->UseManualTime()->Unit(benchmark::kMillisecond)->Iterations(bench_protocol().samples);
}

// The median of a benchmark's samples; n = 0 after an error.
struct BenchSamples {
  double median_s = -1;
  int n = 0;
};

// Times `launch` under bench_protocol(): each iteration's time is one launch's
// elapsed time between two events. Sets the counters median_ms, sm_mhz_end and
// throttle_end (NVML's throttle bits after the last sample; 0: none).
template <class Launch>
BenchSamples time_launches(benchmark::State& state, Launch launch) {
  const BenchProtocol& p = bench_protocol();
  static void* flush_buf = nullptr;
  static size_t flush_bytes = 0;
  cudaStream_t st = nullptr;
  cudaEvent_t e0, e1;
  if (cudaStreamCreate(&st) != cudaSuccess || cudaEventCreate(&e0) != cudaSuccess ||
      cudaEventCreate(&e1) != cudaSuccess) {
    state.SkipWithError("CUDA stream/event creation failed");
    return {};
  }
  cudaError_t err = cudaSuccess;
  if (p.l2_cold && !flush_buf) {
    int l2 = 0;
    cudaDeviceGetAttribute(&l2, cudaDevAttrL2CacheSize, 0);
    flush_bytes = 2 * static_cast<size_t>(std::max(l2, 0));
    if (flush_bytes) err = cudaMalloc(&flush_buf, flush_bytes);
  }
  if (err == cudaSuccess) err = cudaDeviceSynchronize();
  if (p.rest_ms > 0) std::this_thread::sleep_for(std::chrono::milliseconds(p.rest_ms));
  for (int i = 0; i < p.warmup && err == cudaSuccess; ++i) err = launch(st);
  if (err == cudaSuccess) err = cudaStreamSynchronize(st);
  std::vector<double> ms;
  unsigned char fill = 0;
  for (auto _ : state) {
    if (err != cudaSuccess) break;
    if (p.l2_cold && flush_buf) err = cudaMemsetAsync(flush_buf, ++fill, flush_bytes, st);
    cudaEventRecord(e0, st);
    if (err == cudaSuccess) err = launch(st);
    cudaEventRecord(e1, st);
    if (err == cudaSuccess) err = cudaEventSynchronize(e1);
    float t = 0;
    cudaEventElapsedTime(&t, e0, e1);
    state.SetIterationTime(t * 1e-3);
    ms.push_back(t);
  }
  const pb::ClockSnapshot clk = pb::read_gpu_clocks();
  cudaEventDestroy(e0);
  cudaEventDestroy(e1);
  cudaStreamDestroy(st);
  if (err != cudaSuccess || ms.empty()) {
    state.SkipWithError(err != cudaSuccess ? cudaGetErrorString(err) : "no samples");
    return {};
  }
  const double med = pb::summarise(0, "", ms).median_ms;  // the harness's statistics (lib/timing.h)
  state.counters["median_ms"] = med;
  if (clk.available) {
    state.counters["sm_mhz_end"] = clk.sm_mhz;
    state.counters["throttle_end"] = static_cast<double>(clk.throttle_bits & ~1ull);  // gpu_idle is no throttle
  }
  return {med * 1e-3, static_cast<int>(ms.size())};
}
