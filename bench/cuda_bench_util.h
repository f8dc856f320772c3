// cuda_bench_util.h: what the GPU benchmarks share: BCK (throw on a failed CUDA
// call) and time_launches, the CUDA-event manual timing of one launch per
// Google Benchmark iteration.
// Invariant: time_launches creates and destroys its own stream and events; on
// any CUDA error it calls SkipWithError and returns a negative time.
#pragma once
#include <benchmark/benchmark.h>
#include <cuda_runtime_api.h>

#include <stdexcept>
#include <string>

#define BCK(call)                                                                              \
  do {                                                                                         \
    const cudaError_t e_ = (call);                                                             \
    if (e_ != cudaSuccess)                                                                     \
      throw std::runtime_error(std::string(#call) + " failed: " + cudaGetErrorString(e_));     \
  } while (0)

// One warm-up launch (it also does any attribute set-up), then per iteration
// one launch between two events; each iteration's time is the events' elapsed
// time. Returns the total of those times in seconds (< 0 after an error).
template <class Launch>
double time_launches(benchmark::State& state, Launch launch) {
  cudaStream_t st = nullptr;
  cudaEvent_t e0, e1;
  if (cudaStreamCreate(&st) != cudaSuccess || cudaEventCreate(&e0) != cudaSuccess ||
      cudaEventCreate(&e1) != cudaSuccess) {
    state.SkipWithError("CUDA stream/event creation failed");
    return -1;
  }
  cudaError_t err = launch(st);
  if (err == cudaSuccess) err = cudaStreamSynchronize(st);
  double total_s = 0;
  for (auto _ : state) {
    if (err != cudaSuccess) break;
    cudaEventRecord(e0, st);
    err = launch(st);
    cudaEventRecord(e1, st);
    if (err == cudaSuccess) err = cudaEventSynchronize(e1);
    float ms = 0;
    cudaEventElapsedTime(&ms, e0, e1);
    state.SetIterationTime(ms * 1e-3);
    total_s += ms * 1e-3;
  }
  cudaEventDestroy(e0);
  cudaEventDestroy(e1);
  cudaStreamDestroy(st);
  if (err != cudaSuccess) {
    state.SkipWithError(cudaGetErrorString(err));
    return -1;
  }
  return total_s;
}
