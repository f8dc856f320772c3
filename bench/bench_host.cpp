// bench_host.cpp: host-side costs a user pays per batch: generating the batch,
// staging its metadata (the engine's stage_batched_attn_metadata), and one
// attention / gdn layer on the host backend. Counters: tokens/s, bytes staged.
#include <benchmark/benchmark.h>

#include <map>

#include "lib/backend.h"
#include "lib/staging.h"

namespace pb {
namespace {

const Scenario& scenario(const char* name) {
  static std::map<std::string, Scenario> cache;
  auto it = cache.find(name);
  if (it == cache.end())
    it = cache.emplace(name, load_scenario(std::string(PB_SOURCE_DIR) + "/scenarios/" + name + ".yaml")).first;
  return it->second;
}

void BM_Stage(benchmark::State& state, const char* name) {
  const Scenario& s = scenario(name);
  const Batch batch = generate_batch(s);
  size_t bytes = 0;
  for (auto _ : state) {
    StagedImage img = stage_batch(batch, s.model.mrope.enabled, 0, 0x10000, 0x20000, FaultSet{});
    bytes = img.meta.staged_bytes;
    benchmark::DoNotOptimize(img.scratch.data());
  }
  state.counters["staged_bytes"] = static_cast<double>(bytes);
  state.counters["tokens/s"] = benchmark::Counter(batch.total_tokens, benchmark::Counter::kIsIterationInvariantRate);
}

void BM_HostLayer(benchmark::State& state, const char* name, int layer) {
  const Scenario& s = scenario(name);
  const Batch batch = generate_batch(s);
  const LayerShape shape = layer_shape(s, batch);
  auto backend = make_host_backend();
  const StagedLayout L = compute_layout(batch.num_streams, batch.total_tokens, s.model.mrope.enabled);
  const ScratchPlan plan = plan_scratch(L, 0);
  backend->allocate(batch, shape, plan.capacity, plan_table_arena(batch).bytes);
  StagedImage img = stage_batch(batch, s.model.mrope.enabled, 0, backend->scratch_base(), backend->arena_base(), FaultSet{});
  backend->upload_metadata(img.scratch, img.arena);
  std::vector<uint64_t> ptrs;
  for (int b = 0; b < batch.num_streams; ++b) ptrs.push_back(backend->h_state_address(layer, b));
  backend->write_scratch(img.plan.h_state_ptrs, ptrs.data(), 8 * ptrs.size());
  for (auto _ : state) {
    state.PauseTiming();
    backend->reset_layer(layer);
    state.ResumeTiming();
    backend->run_layer(layer, img.meta, backend->scratch_base() + img.plan.h_state_ptrs);
  }
  state.counters["tokens/s"] = benchmark::Counter(batch.total_tokens, benchmark::Counter::kIsIterationInvariantRate);
}

BENCHMARK_CAPTURE(BM_Stage, mixed_lengths, "mixed-lengths");
BENCHMARK_CAPTURE(BM_Stage, mrope_image, "mrope-image");
BENCHMARK_CAPTURE(BM_HostLayer, smoke_attn, "smoke", 0)->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_HostLayer, smoke_gdn, "smoke", 1)->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace pb

BENCHMARK_MAIN();
