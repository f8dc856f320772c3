// bench_gdn_cuda.cpp: the Gated DeltaNet layer on the GPU: the chunked recurrence
// (kernels/gdn_chunked.cu, the CUDA backend's default), the token-by-token one
// (kernels/gdn.cu, its oracle) and the depthwise conv1d before them (gdn_conv.cu:
// conv1d = the window kernel, conv1d.row = the row kernel, its oracle),
// over GDN shape (Qwen3-Next: 16 k / 32 v heads of 128; small: 4 k / 8 v heads of
// 64) x stream mix (8 x 2048, the 16k-token target; the docs/DEVICE-NOTES.md mixed batch;
// 32 x 512); plus staging the mixed batch (lib/staging) and uploading its scratch
// image from pinned memory. Google Benchmark with manual time: each kernel
// iteration is one launch between two CUDA events (bench/bench_protocol.h's protocol). Counters: tokens/s, GB/s with
// the bytes lib/work_counts counts (the fewest a kernel must move: each input read
// once, each output written once, h_state read and written), and "x floor" = time
// over those bytes at kCopyBytesPerS. Inputs come from lib/'s generator (x, conv_w,
// g in [-0.31, -0.01], beta in [0.05, 0.95]); the recurrence reads conv1d's
// output on that x; h_state is small random.
// Usage: pb_bench_gdn_cuda [--rest-ms N] [--warmup N] [--samples N] [--l2 cold|hot] [google benchmark flags]
// (the timing protocol of bench/bench_protocol.h; the kernels' counters are from the median sample)
#include <benchmark/benchmark.h>
#include <cuda_runtime_api.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "bench/cuda_bench_util.h"
#include "kernels/gdn_chunked.h"
#include "kernels/kernels.h"
#include "lib/backend.h"
#include "lib/rng.h"
#include "lib/staging.h"
#include "lib/work_counts.h"

namespace {

// Measured H200 device-to-device copy bandwidth, bytes read + written
// (docs/DEVICE-NOTES.md): the memory floor "x floor" is measured against.
constexpr double kCopyBytesPerS = 4.24e12;

struct ShapeDef {
  const char* name;
  int num_k_heads, num_v_heads, k_dim, v_dim;
};
const ShapeDef kShapes[] = {{"qwen3next", 16, 32, 128, 128}, {"small", 4, 8, 64, 64}};
constexpr int kDConv = 4;

struct MixDef {
  const char* name;
  const char* streams_yaml;  // the scenario's `streams:` entries
};
const MixDef kMixes[] = {
    {"8x2048", "  - generate: {dist: fixed, count: 8, tokens: 2048}\n"},
    {"mixed", "  - tokens: 7\n  - tokens: 130\n  - tokens: 511\n  - tokens: 1024\n  - tokens: 2048\n"
              "  - tokens: 4096\n  - tokens: 333\n  - tokens: 8192\n"},
    {"32x512", "  - generate: {dist: fixed, count: 32, tokens: 512}\n"},
};
// conv1d only (issue 13's 64k-token figure): the recurrences would take most of the run.
const MixDef kConvMix = {"8x8192", "  - generate: {dist: fixed, count: 8, tokens: 8192}\n"};

enum class Kernel { chunked, token, conv1d, conv1d_row, conv1d_stage };

std::string config_name(const ShapeDef& sh, const MixDef& m) { return std::string(sh.name) + "-" + m.name; }

// One gdn layer over the mix; the attention fields are required but unused.
pb::Scenario make_scenario(const ShapeDef& sh, const MixDef& m) {
  const std::string name = config_name(sh, m);
  const std::string yaml =
      "name: bench-" + name + "\nseed: 7\nmodel:\n  num_q_heads: 2\n  num_kv_heads: 1\n  head_dim: 64\n"
      "  block_size: 16\n  gdn: {num_k_heads: " + std::to_string(sh.num_k_heads) +
      ", num_v_heads: " + std::to_string(sh.num_v_heads) + ", k_dim: " + std::to_string(sh.k_dim) +
      ", v_dim: " + std::to_string(sh.v_dim) + ", d_conv: " + std::to_string(kDConv) +
      "}\nlayers:\n  pattern: [gdn]\nstreams:\n" + m.streams_yaml;
  return pb::parse_scenario(yaml, "bench:" + name);
}

template <class T>
T* upload(const std::vector<T>& h) {
  void* d = nullptr;
  BCK(cudaMalloc(&d, std::max<size_t>(h.size() * sizeof(T), 256)));
  BCK(cudaMemcpy(d, h.data(), h.size() * sizeof(T), cudaMemcpyHostToDevice));
  return static_cast<T*>(d);
}

// One gdn layer's tensors on the device, and the metadata the kernels read
// (cu_seqlens, h_state_ptrs, stream_order) built here as the CUDA backend does.
struct DeviceBatch {
  std::string name;
  pb::LayerShape shape;
  uint32_t N = 0, T = 0;
  pb::WorkCount gdn_work, conv_work;
  pb::bf16 *x = nullptr, *conv_w = nullptr, *conv_state = nullptr, *conv_out = nullptr, *out = nullptr;
  float *g = nullptr, *beta = nullptr, *h_state = nullptr;
  int32_t *cu = nullptr, *order = nullptr;
  uint64_t* h_state_ptrs = nullptr;
  void* chunked_ws = nullptr;  // the chunked kernel's workspace (kernels/gdn_chunked.h), its list written here

  DeviceBatch(const ShapeDef& sh, const MixDef& m) : name(config_name(sh, m)) {
    const pb::Scenario s = make_scenario(sh, m);
    const pb::Batch batch = pb::generate_batch(s);
    shape = pb::layer_shape(s, batch);
    N = static_cast<uint32_t>(batch.num_streams);
    T = static_cast<uint32_t>(batch.total_tokens);
    gdn_work = pb::count_work("gdn", batch, shape);
    conv_work = pb::count_work("conv1d", batch, shape);
    const pb::GdnInputs& in = batch.layers.at(0).gdn;
    x = upload(in.x);
    conv_w = upload(in.conv_w);
    g = upload(in.g);
    beta = upload(in.beta);
    const size_t conv_dim = static_cast<size_t>(sh.num_k_heads) * sh.k_dim * 2 + sh.num_v_heads * sh.v_dim;
    const size_t state_bytes = conv_dim * (kDConv - 1) * N * sizeof(pb::bf16);
    BCK(cudaMalloc(&conv_state, state_bytes));
    BCK(cudaMemset(conv_state, 0, state_bytes));  // every stream starts at token 0: conv0 is zero
    BCK(cudaMalloc(&conv_out, conv_dim * T * sizeof(pb::bf16)));
    BCK(cudaMalloc(&out, static_cast<size_t>(T) * sh.num_v_heads * sh.v_dim * sizeof(pb::bf16)));
    std::vector<int32_t> cu_h(N + 1, 0);
    for (uint32_t b = 0; b < N; ++b) cu_h[b + 1] = cu_h[b] + batch.streams[b].count;
    cu = upload(cu_h);
    const std::vector<int32_t> order_h = pb::kernels::plan_gdn_order(cu_h);
    order = upload(order_h);
    {  // the chunk list, as prepare_ssm writes it
      const pb::kernels::GdnChunkedLayout l = pb::kernels::gdn_chunked_layout(shape, T, N);
      std::vector<pb::kernels::GdnChunkItem> items;
      std::vector<int32_t> first;
      pb::kernels::plan_gdn_chunks(cu_h, order_h, &items, &first);
      const int32_t count = static_cast<int32_t>(items.size());
      BCK(cudaMalloc(&chunked_ws, l.bytes));
      char* w = static_cast<char*>(chunked_ws);
      BCK(cudaMemcpy(w + l.list.count, &count, 4, cudaMemcpyHostToDevice));
      BCK(cudaMemcpy(w + l.list.items, items.data(), items.size() * sizeof(items[0]), cudaMemcpyHostToDevice));
      BCK(cudaMemcpy(w + l.list.chunk_first, first.data(), first.size() * 4, cudaMemcpyHostToDevice));
    }
    // Small random S0 per stream ([Hv, v_dim, k_dim] f32). The recurrence updates
    // h_state in place and it is not reset between iterations: the gates decay it
    // (g < 0, beta < 1), so values stay bounded and the timing does not drift.
    const size_t h_elems = static_cast<size_t>(sh.num_v_heads) * sh.v_dim * sh.k_dim;
    std::vector<float> h0(h_elems * N);
    pb::Rng rng(0x5eed);
    for (float& v : h0) v = rng.uniform(-0.1f, 0.1f);
    h_state = upload(h0);
    std::vector<uint64_t> p(N);
    for (uint32_t b = 0; b < N; ++b) p[b] = reinterpret_cast<uint64_t>(h_state + b * h_elems);
    h_state_ptrs = upload(p);
    // The recurrence's input is conv1d's output on the generated x (one launch
    // now): silu of the causal conv, the values a real layer feeds it.
    BCK(launch(Kernel::conv1d, nullptr));
    BCK(cudaDeviceSynchronize());
  }
  ~DeviceBatch() {
    for (void* d : {static_cast<void*>(x), static_cast<void*>(conv_w), static_cast<void*>(conv_state),
                    static_cast<void*>(conv_out), static_cast<void*>(out), static_cast<void*>(g),
                    static_cast<void*>(beta), static_cast<void*>(h_state), static_cast<void*>(cu),
                    static_cast<void*>(order), static_cast<void*>(h_state_ptrs), chunked_ws})
      cudaFree(d);
  }
  DeviceBatch(const DeviceBatch&) = delete;
  DeviceBatch& operator=(const DeviceBatch&) = delete;

  const pb::WorkCount& work(Kernel k) const { return k == Kernel::conv1d || k == Kernel::conv1d_row || k == Kernel::conv1d_stage ? conv_work : gdn_work; }
  cudaError_t launch(Kernel k, cudaStream_t st) const {
    const uint64_t c = reinterpret_cast<uint64_t>(cu);
    pb::kernels::GdnArgs a;
    a.shape = shape;
    a.batch_size = N;
    a.total_tokens = T;
    a.cu_seqlens = c;
    a.h_state_ptrs = reinterpret_cast<uint64_t>(h_state_ptrs);
    a.stream_order = order;
    a.conv_out = conv_out;
    a.g = g;
    a.beta = beta;
    a.out = out;
    switch (k) {
      case Kernel::chunked:
        return pb::kernels::launch_gdn_chunked(st, a, reinterpret_cast<uint64_t>(chunked_ws));
      case Kernel::token:
        return pb::kernels::launch_gdn(st, a);
      case Kernel::conv1d:
        return pb::kernels::launch_conv1d(st, shape, N, T, c, x, conv_w, conv_state, conv_out, false,
                                          pb::kernels::Conv1dImpl::window);
      case Kernel::conv1d_row:
        return pb::kernels::launch_conv1d(st, shape, N, T, c, x, conv_w, conv_state, conv_out, false,
                                          pb::kernels::Conv1dImpl::row);
      case Kernel::conv1d_stage:
        return pb::kernels::launch_conv1d(st, shape, N, T, c, x, conv_w, conv_state, conv_out, false,
                                          pb::kernels::Conv1dImpl::stage);
    }
    return cudaErrorInvalidValue;
  }
};

// The batch of the benchmark running now (benchmarks of one config run back to back).
const DeviceBatch& batch_for(const ShapeDef& sh, const MixDef& m) {
  static std::unique_ptr<DeviceBatch> cur;
  if (!cur || cur->name != config_name(sh, m)) {
    cur.reset();
    cur = std::make_unique<DeviceBatch>(sh, m);
  }
  return *cur;
}

void BM_Gdn(benchmark::State& state, const ShapeDef* sh, const MixDef* m, Kernel k) {
  const DeviceBatch* b = nullptr;
  try {
    b = &batch_for(*sh, *m);
  } catch (const std::exception& e) {
    state.SkipWithError(e.what());
    return;
  }
  const BenchSamples t = time_launches(state, [&](cudaStream_t st) { return b->launch(k, st); });
  if (t.n > 0) {
    const double bytes = b->work(k).bytes;
    state.counters["tokens/s"] = b->T / t.median_s;
    state.counters["GB/s"] = bytes / t.median_s / 1e9;
    state.counters["x floor"] = t.median_s / (bytes / kCopyBytesPerS);
  }
}

// Host staging of the mixed batch (wall clock) plus the upload of its scratch
// image from pinned memory (CUDA events); the iteration time is their sum.
void BM_StageUpload(benchmark::State& state, const MixDef* m) {
  static std::unique_ptr<const pb::Batch> batch;
  try {
    if (!batch) batch = std::make_unique<const pb::Batch>(pb::generate_batch(make_scenario(kShapes[1], *m)));
  } catch (const std::exception& e) {
    state.SkipWithError(e.what());
    return;
  }
  const size_t bytes =
      pb::plan_scratch(pb::compute_layout(batch->num_streams, batch->total_tokens, false), 0).capacity;
  void *scratch = nullptr, *pinned = nullptr;
  cudaStream_t st = nullptr;
  cudaEvent_t e0, e1;
  if (cudaMalloc(&scratch, bytes) != cudaSuccess || cudaMallocHost(&pinned, bytes) != cudaSuccess ||
      cudaStreamCreate(&st) != cudaSuccess || cudaEventCreate(&e0) != cudaSuccess ||
      cudaEventCreate(&e1) != cudaSuccess) {
    state.SkipWithError("CUDA allocation/stream/event creation failed");
    return;
  }
  cudaError_t err = cudaSuccess;
  double host_s = 0, copy_s = 0;
  for (auto _ : state) {
    const auto t0 = std::chrono::steady_clock::now();
    // The table arena is not uploaded here; its base only enters the staged pointers.
    const pb::StagedImage img = pb::stage_batch(*batch, false, bytes, reinterpret_cast<uint64_t>(scratch), 0,
                                                pb::FaultSet{});
    const double h = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    // Not timed: the engine stages straight into pinned memory; lib/ stages into a vector.
    std::memcpy(pinned, img.scratch.data(), bytes);
    cudaEventRecord(e0, st);
    err = cudaMemcpyAsync(scratch, pinned, bytes, cudaMemcpyHostToDevice, st);
    cudaEventRecord(e1, st);
    if (err == cudaSuccess) err = cudaEventSynchronize(e1);
    if (err != cudaSuccess) break;
    float ms = 0;
    cudaEventElapsedTime(&ms, e0, e1);
    state.SetIterationTime(h + ms * 1e-3);
    host_s += h;
    copy_s += ms * 1e-3;
  }
  if (err != cudaSuccess) {
    state.SkipWithError(cudaGetErrorString(err));
  } else if (copy_s > 0) {
    const double it = static_cast<double>(state.iterations());
    state.counters["GB/s"] = static_cast<double>(bytes) * it / copy_s / 1e9;  // the upload alone
    state.counters["host_us"] = host_s / it * 1e6;
    state.counters["copy_us"] = copy_s / it * 1e6;
    state.counters["bytes"] = static_cast<double>(bytes);
  }
  cudaEventDestroy(e0);
  cudaEventDestroy(e1);
  cudaStreamDestroy(st);
  cudaFreeHost(pinned);
  cudaFree(scratch);
}

void register_all() {
  const auto reg = [](const std::string& name, auto fn, auto... args) {
    benchmark::RegisterBenchmark(name.c_str(), fn, args...)->Apply(apply_bench_protocol);
  };
  for (const ShapeDef& sh : kShapes)
    for (const MixDef& m : kMixes) {
      const std::string base = "gdn/" + config_name(sh, m);
      pb::LayerShape shape;
      shape.num_k_heads = sh.num_k_heads;
      shape.num_v_heads = sh.num_v_heads;
      shape.k_dim = sh.k_dim;
      shape.v_dim = sh.v_dim;
      shape.d_conv = kDConv;
      if (pb::kernels::gdn_chunked_supports(shape))
        reg(base + "/chunked", BM_Gdn, &sh, &m, Kernel::chunked);
      else
        std::printf("skipped %s/chunked: gdn_chunked_supports is false for this shape\n", base.c_str());
      reg(base + "/token", BM_Gdn, &sh, &m, Kernel::token);
      reg(base + "/conv1d", BM_Gdn, &sh, &m, Kernel::conv1d);
      reg(base + "/conv1d.row", BM_Gdn, &sh, &m, Kernel::conv1d_row);
      reg(base + "/conv1d.stage", BM_Gdn, &sh, &m, Kernel::conv1d_stage);
    }
  reg("gdn/" + config_name(kShapes[0], kConvMix) + "/conv1d", BM_Gdn, &kShapes[0], &kConvMix, Kernel::conv1d);
  reg("gdn/" + config_name(kShapes[0], kConvMix) + "/conv1d.row", BM_Gdn, &kShapes[0], &kConvMix, Kernel::conv1d_row);
  reg("gdn/" + config_name(kShapes[0], kConvMix) + "/conv1d.stage", BM_Gdn, &kShapes[0], &kConvMix, Kernel::conv1d_stage);
  reg("stage/mixed/upload", BM_StageUpload, &kMixes[1]);
}

}  // namespace

int main(int argc, char** argv) {
  std::string perr;
  if (!parse_bench_protocol(argc, argv, bench_protocol(), perr)) {
    std::fprintf(stderr, "pb_bench_gdn_cuda: %s\n", perr.c_str());
    return 2;
  }
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess || count == 0) {
    std::printf("skipped: no CUDA device\n");
    return 77;  // as pb_bench_cuda: the ctest skip code
  }
  cudaDeviceProp prop{};
  cudaGetDeviceProperties(&prop, 0);
  benchmark::AddCustomContext("device", prop.name);
  benchmark::AddCustomContext("sm_count", std::to_string(prop.multiProcessorCount));
  register_all();
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
