// bench_cuda.cpp: the batched attention kernels on the GPU: the tensor-core
// kernel (every tuning variant of kernels/attention_mma.cu) and the fp32 oracle
// (kernels/attention.cu), over head_dim 64/128/256 x stream mix (the
// docs/DEVICE-NOTES.md mixed batch, 8 x 4096, 32 x 512, continuation chunks) x
// GQA ratio (16 q heads over 2 or 16 kv heads), plus issue 15's rows outside that
// grid (1 x 16384 at d64/128/256, 4 x 4096 d128, MHA). Google Benchmark with manual
// time: each iteration is one launch between two CUDA events (bench/bench_protocol.h's protocol); counters TFLOP/s
// and GB/s count work as docs/DESIGN.md "Counting work" (lib/work_counts). Inputs are random bf16 (never
// zeros, the whole cache) in a paged cache with a random block permutation.
// Usage: pb_bench_cuda [--export DIR] [--rest-ms N] [--warmup N] [--samples N] [--l2 cold|hot]
//                      [google benchmark flags]
//   --export DIR writes DIR/<config>.json (lib/export) for every benchmarked
//   batch, the input of scripts/peer_torch.py, and exits.
//   The timing protocol's knobs (bench/bench_protocol.h; default: rest 250 ms, 3
//   warm-ups, 20 samples, cold L2); TFLOP/s and GB/s are from the median sample.
#include <benchmark/benchmark.h>
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <memory>
#include <numeric>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "bench/cuda_bench_util.h"
#include "kernels/attention_mma.h"
#include "kernels/attention_ws.h"
#include "kernels/kernels.h"
#include "lib/batch.h"
#include "lib/export.h"
#include "lib/scenario.h"

namespace {

struct MixDef {
  const char* name;
  const char* streams_yaml;  // the scenario's `streams:` entries
};
const MixDef kMixes[] = {
    {"mixed", "  - tokens: 7\n  - tokens: 130\n  - tokens: 511\n  - tokens: 1024\n  - tokens: 2048\n"
              "  - tokens: 4096\n  - tokens: 333\n  - tokens: 8192\n"},
    {"8x4096", "  - generate: {dist: fixed, count: 8, tokens: 4096}\n"},
    {"32x512", "  - generate: {dist: fixed, count: 32, tokens: 512}\n"},
    {"chunked8x512at3584", "  - generate: {dist: fixed, count: 8, tokens: 512, chunk_start: 3584}\n"},
};
const int kHeadDims[] = {64, 128, 256};
const int kHeads[][2] = {{16, 2}, {16, 16}};
// Issue 15's single-shape rows outside the grid above (FA3's published shapes).
const MixDef kFa3Mixes[] = {{"1x16384", "  - tokens: 16384\n"},
                            {"4x4096", "  - generate: {dist: fixed, count: 4, tokens: 4096}\n"}};
struct ExtraConfig {
  const MixDef* mix;
  int D, hq, hkv;
};
const ExtraConfig kExtraConfigs[] = {{&kFa3Mixes[0], 128, 16, 16}, {&kFa3Mixes[0], 256, 8, 8},
                                     {&kFa3Mixes[0], 64, 32, 32}, {&kFa3Mixes[1], 128, 16, 16}};

std::string config_name(const MixDef& m, int D, int hq, int hkv) {
  return std::string(m.name) + "-d" + std::to_string(D) + "-h" + std::to_string(hq) + "x" + std::to_string(hkv);
}

pb::Scenario make_scenario(const MixDef& m, int D, int hq, int hkv) {
  const std::string name = config_name(m, D, hq, hkv);
  const std::string yaml = "name: bench-" + name + "\nseed: 7\nmodel:\n  num_q_heads: " + std::to_string(hq) +
                           "\n  num_kv_heads: " + std::to_string(hkv) + "\n  head_dim: " + std::to_string(D) +
                           "\n  block_size: 16\nlayers:\n  pattern: [attn]\nstreams:\n" + m.streams_yaml;
  return pb::parse_scenario(yaml, "bench:" + name);
}

uint64_t splitmix(uint64_t& s) {
  uint64_t z = (s += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}
// Random bf16 data (never zeros): 16 random bits per value keep the sign and
// 7 mantissa bits and pick one of four exponents, |x| in [amp/16, amp).
void fill_random_bf16(std::vector<uint16_t>& h, uint64_t& s, int amp_exp /* amp = 2^amp_exp */) {
  const uint16_t e0 = static_cast<uint16_t>(127 + amp_exp - 4);
  for (size_t i = 0; i < h.size(); i += 4) {
    const uint64_t r = splitmix(s);
    for (size_t j = 0; j < 4 && i + j < h.size(); ++j) {
      const uint16_t b = static_cast<uint16_t>(r >> (16 * j));
      h[i + j] = static_cast<uint16_t>((b & 0x807f) | ((e0 + ((b >> 7) & 3)) << 7));
    }
  }
}

constexpr int kFp32 = -2;     // the variant number bench_cuda gives the fp32 oracle
constexpr int kWs = -3;       // the warp-specialized kernel (attention_ws.cu)
constexpr int kDefault = -4;  // what pb-cuda's attention=auto runs: ws where supported, else the mma default

// One batch on the device, shaped like the harness's staged metadata.
struct DeviceBatch {
  std::string name;
  pb::LayerShape shape;
  int N = 0, T = 0, max_blocks = 0;
  std::vector<int32_t> cu, kv;
  double flops = 0, bytes = 0;
  void *q = nullptr, *k = nullptr, *v = nullptr, *out = nullptr, *cu_d = nullptr, *kv_d = nullptr,
       *tables = nullptr, *ptrs = nullptr, *work32 = nullptr, *work_mma = nullptr, *work_ws = nullptr,
       *schedule_ws = nullptr;
  int n_work32 = 0, n_work_mma = 0, n_work_ws = 0;

  DeviceBatch(const MixDef& m, int D, int hq, int hkv) : name(config_name(m, D, hq, hkv)) {
    const pb::Scenario s = make_scenario(m, D, hq, hkv);
    const std::vector<pb::StreamSpec> streams = pb::resolve_streams(s);
    N = static_cast<int>(streams.size());
    const int bs = s.model.block_size;
    cu.assign(N + 1, 0);
    int total_blocks = 0;
    double pairs = 0, kv_tokens = 0;
    for (int b = 0; b < N; ++b) {
      const int cs = streams[b].chunk_start, c = streams[b].tokens;
      cu[b + 1] = cu[b] + c;
      kv.push_back(cs + c);
      const int nb = (cs + c + bs - 1) / bs;
      max_blocks = std::max(max_blocks, nb);
      total_blocks += nb;
      pairs += static_cast<double>(c) * cs + 0.5 * c * (c + 1.0);
      kv_tokens += cs + c;
    }
    T = cu[N];
    flops = 4.0 * hq * D * pairs;
    bytes = 2.0 * T * hq * D + 2.0 * 2 * kv_tokens * hkv * D + 2.0 * T * hq * D;
    const int num_blocks = total_blocks + 1;  // + the poison block of the guard entries
    shape.num_q_heads = hq;
    shape.num_kv_heads = hkv;
    shape.head_dim = D;
    shape.rotary_dim = D;
    shape.block_size = bs;
    shape.num_blocks = num_blocks;
    std::vector<int32_t> perm(num_blocks);
    std::iota(perm.begin(), perm.end(), 0);
    std::shuffle(perm.begin(), perm.end(), std::mt19937_64(11));
    shape.poison_block = perm.back();
    const int stride = max_blocks + 2;
    std::vector<int32_t> tab(static_cast<size_t>(N) * stride, static_cast<int32_t>(0x7eadbeef));
    int at = 0;
    for (int b = 0; b < N; ++b) {
      const int nb = (kv[b] + bs - 1) / bs;
      for (int i = 0; i < nb; ++i) tab[static_cast<size_t>(b) * stride + i] = perm[at++];
      tab[static_cast<size_t>(b) * stride + nb] = shape.poison_block;
    }
    uint64_t seed = 0x5eed;
    std::vector<uint16_t> h(static_cast<size_t>(T) * hq * D);
    fill_random_bf16(h, seed, 1);
    q = upload(h.data(), h.size() * 2);
    const size_t cache = static_cast<size_t>(num_blocks) * bs * hkv * D;
    h.resize(cache);
    fill_random_bf16(h, seed, 1);
    k = upload(h.data(), cache * 2);
    fill_random_bf16(h, seed, 0);
    v = upload(h.data(), cache * 2);
    BCK(cudaMalloc(&out, static_cast<size_t>(T) * hq * D * 2));
    cu_d = upload(cu.data(), cu.size() * 4);
    kv_d = upload(kv.data(), kv.size() * 4);
    tables = upload(tab.data(), tab.size() * 4);
    std::vector<uint64_t> p(N);
    for (int b = 0; b < N; ++b)
      p[b] = reinterpret_cast<uint64_t>(static_cast<int32_t*>(tables) + static_cast<size_t>(b) * stride);
    ptrs = upload(p.data(), p.size() * 8);
    const auto w32 = pb::kernels::plan_attention_work(shape, cu, kv);
    const auto wm = pb::kernels::plan_attention_mma_work(shape, cu, kv);
    work32 = upload(w32.data(), w32.size() * sizeof(w32[0]));
    work_mma = upload(wm.data(), wm.size() * sizeof(wm[0]));
    n_work32 = static_cast<int>(w32.size());
    n_work_mma = static_cast<int>(wm.size());
    if (pb::kernels::attention_ws_rows_per_tile(shape) > 0) {
      const auto ww = pb::kernels::plan_attention_ws_work(shape, cu, kv);
      work_ws = upload(ww.data(), ww.size() * sizeof(ww[0]));
      n_work_ws = static_cast<int>(ww.size());
      const auto sw = pb::kernels::plan_attention_ws_schedule(shape, ww, cu, kv);
      schedule_ws = upload(sw.data(), sw.size() * sizeof(sw[0]));
    }
  }
  ~DeviceBatch() {
    for (void* p : {q, k, v, out, cu_d, kv_d, tables, ptrs, work32, work_mma, work_ws, schedule_ws}) cudaFree(p);
  }
  static void* upload(const void* h, size_t bytes) {
    void* d = nullptr;
    BCK(cudaMalloc(&d, std::max<size_t>(bytes, 256)));
    BCK(cudaMemcpy(d, h, bytes, cudaMemcpyHostToDevice));
    return d;
  }
  // variant: kFp32 (the fp32 kernel), kWs, kDefault (pb-cuda's auto), -1 (the mma
  // kernel's default variant) or an mma variant number.
  cudaError_t launch(int variant, cudaStream_t st) const {
    const float scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(shape.head_dim)));
    const auto* qb = static_cast<const pb::bf16*>(q);
    const auto* kb = static_cast<const pb::bf16*>(k);
    const auto* vb = static_cast<const pb::bf16*>(v);
    auto* ob = static_cast<pb::bf16*>(out);
    const uint64_t c = reinterpret_cast<uint64_t>(cu_d), l = reinterpret_cast<uint64_t>(kv_d),
                   t = reinterpret_cast<uint64_t>(ptrs);
    pb::kernels::AttnArgs a;
    a.shape = shape;
    a.batch_size = N;
    a.total_tokens = T;
    a.max_blocks_per_seq = max_blocks;
    a.cu_seqlens = c;
    a.kv_lens = l;
    a.block_table_ptrs = t;
    a.q_rot = qb;
    a.k_cache = kb;
    a.v_cache = vb;
    a.out = ob;
    a.scale = scale;
    if (variant == kFp32) {
      a.work = static_cast<const pb::kernels::AttnWorkItem*>(work32);
      a.num_work = n_work32;
      return pb::kernels::launch_attention(st, a);
    }
    a.work = static_cast<const pb::kernels::AttnWorkItem*>(work_mma);
    a.num_work = n_work_mma;
    if (variant == kWs || (variant == kDefault && pb::kernels::attention_ws_supported(shape))) {
      a.work = static_cast<const pb::kernels::AttnWorkItem*>(work_ws);
      a.num_work = n_work_ws;
      a.schedule = static_cast<const int32_t*>(schedule_ws);
      return pb::kernels::launch_attention_ws(st, a, true);
    }
    a.variant = variant == kDefault ? -1 : variant;
    return pb::kernels::launch_attention_mma(st, a);
  }
};

// The batch of the benchmark running now (benchmarks of one config run back to back).
const DeviceBatch& batch_for(const MixDef& m, int D, int hq, int hkv) {
  static std::unique_ptr<DeviceBatch> cur;
  const std::string n = config_name(m, D, hq, hkv);
  if (!cur || cur->name != n) {
    cur.reset();
    cur = std::make_unique<DeviceBatch>(m, D, hq, hkv);
  }
  return *cur;
}

void BM_Attention(benchmark::State& state, const MixDef* m, int D, int hq, int hkv, int variant) {
  const DeviceBatch* b = nullptr;
  try {
    b = &batch_for(*m, D, hq, hkv);
  } catch (const std::exception& e) {
    state.SkipWithError(e.what());
    return;
  }
  const BenchSamples t = time_launches(state, [&](cudaStream_t st) { return b->launch(variant, st); });
  if (t.n > 0) {
    state.counters["TFLOP/s"] = b->flops / t.median_s / 1e12;
    state.counters["GB/s"] = b->bytes / t.median_s / 1e9;
    state.counters["GFLOP"] = b->flops / 1e9;
  }
}

void register_config(const MixDef& m, int D, const int h[2]) {
  const std::string base = "attn/" + config_name(m, D, h[0], h[1]);
  for (const auto& [name, variant] : {std::pair{"default", kDefault}, std::pair{"mma.default", -1}, std::pair{"ws", kWs}})
    benchmark::RegisterBenchmark((base + "/" + name).c_str(), BM_Attention, &m, D, h[0], h[1], variant)
        ->Apply(apply_bench_protocol);
  for (const pb::kernels::AttnMmaVariant& v : pb::kernels::attention_mma_variants(D))
    benchmark::RegisterBenchmark((base + "/mma.v" + std::to_string(v.variant) + "." + v.name).c_str(),
                                 BM_Attention, &m, D, h[0], h[1], v.variant)
        ->Apply(apply_bench_protocol);
  if (h[1] == 2)  // the fp32 oracle: GQA 8 only (it is slow)
    benchmark::RegisterBenchmark((base + "/fp32").c_str(), BM_Attention, &m, D, h[0], h[1], kFp32)
        ->Apply(apply_bench_protocol);
}

void register_all() {
  for (const MixDef& m : kMixes)
    for (int D : kHeadDims)
      for (const auto& h : kHeads) register_config(m, D, h);
  for (const ExtraConfig& e : kExtraConfigs) {
    const int h[2] = {e.hq, e.hkv};
    register_config(*e.mix, e.D, h);
  }
}

}  // namespace

int main(int argc, char** argv) {
  for (int i = 1; i + 1 < argc; ++i) {
    if (std::strcmp(argv[i], "--export") != 0) continue;
    const std::string dir = argv[i + 1];
    try {
      std::filesystem::create_directories(dir);
      for (const MixDef& m : kMixes)
        for (int D : kHeadDims)
          for (const auto& h : kHeads) {
            const std::string path = dir + "/" + config_name(m, D, h[0], h[1]) + ".json";
            pb::export_batch(make_scenario(m, D, h[0], h[1]), path);
          }
      for (const ExtraConfig& e : kExtraConfigs)
        pb::export_batch(make_scenario(*e.mix, e.D, e.hq, e.hkv),
                         dir + "/" + config_name(*e.mix, e.D, e.hq, e.hkv) + ".json");
    } catch (const std::exception& e) {
      std::fprintf(stderr, "pb_bench_cuda --export: %s\n", e.what());
      return 1;
    }
    std::printf("exported %zu batches to %s\n",
                std::size(kMixes) * std::size(kHeadDims) * std::size(kHeads) + std::size(kExtraConfigs),
                dir.c_str());
    return 0;
  }
  std::string perr;
  if (!parse_bench_protocol(argc, argv, bench_protocol(), perr)) {
    std::fprintf(stderr, "pb_bench_cuda: %s\n", perr.c_str());
    return 2;
  }
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess || count == 0) {
    std::printf("skipped: no CUDA device\n");
    return 77;
  }
  cudaDeviceProp prop{};
  cudaGetDeviceProperties(&prop, 0);
  benchmark::AddCustomContext("device", prop.name);
  benchmark::AddCustomContext("sm_count", std::to_string(prop.multiProcessorCount));
  for (int D : kHeadDims)
    for (const pb::kernels::AttnMmaVariant& v : pb::kernels::attention_mma_variants(D)) {
      char buf[256];
      std::snprintf(buf, sizeof buf, "%s BM %d BN %d stages %d %s, %d threads: %d regs, %zu B local, %zu B smem, %d CTA/SM%s",
                    v.wgmma ? "wgmma" : "mma.sync", v.block_m, v.block_n, v.stages, v.q_in_regs ? "Q regs" : "Q smem",
                    v.threads, v.regs, v.local_bytes, v.smem_bytes, v.ctas_per_sm,
                    v.variant == pb::kernels::attention_mma_default_variant(D) ? " (default)" : "");
      benchmark::AddCustomContext("mma.d" + std::to_string(D) + ".v" + std::to_string(v.variant) + "." + v.name, buf);
      std::printf("mma d%d v%d %-14s %s\n", D, v.variant, v.name, buf);
    }
  register_all();
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
