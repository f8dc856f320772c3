// run.cpp: one scenario end to end. Generate the ground truth, let the backend
// allocate, stage against its addresses and upload with one copy, then per
// layer: reset, place h_state_ptrs at off + staged_bytes, run (warmup +
// repeat times), read back, and check against the reference. The reference
// never sees the staged image; the backend never sees the truth.
#include "run.h"

#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <map>
#include <optional>

#include "check_layer.h"
#include "check_plan.h"
#include "checks.h"
#include "expected_scratch.h"
#include "graph_run.h"
#include "invariance.h"
#include "trace.h"
#include "verdict.h"
#include "work_counts.h"

namespace pb {

bool RunResult::passed() const { return verdict(*this) == Verdict::passed; }

const CheckResult* RunResult::check(const std::string& name) const {
  for (const CheckResult& c : checks)
    if (c.name == name) return &c;
  return nullptr;
}

std::unique_ptr<Backend> make_configured_backend(const RunOptions& opt, FaultSet faults) {
  std::unique_ptr<Backend> backend = make_backend(opt.backend, opt.kernels);
  KernelLibrary& lib = backend->library();
  // --graph asks for a check this library cannot give: refused before anything runs.
  if (opt.graph && !(lib.table().capabilities & PB_CAP_GRAPH))
    throw InputError(fmt::format("--graph: kernel library {} does not declare PB_CAP_GRAPH: its entries may not be "
                                 "captured and replayed (docs/KERNEL-ABI.md \"Graph capture\")", lib.label()));
  for (const auto& [key, value] : parse_impl(opt.impl))
    if (std::string why = lib.set_option(key, value); !why.empty())
      throw InputError(fmt::format("--impl {}={}: {} refuses it: {}", key, value, lib.label(), why));
  for (const FaultInfo& f : all_faults()) {
    if (!faults.has(f.fault) || !fault_in_kernels(f.fault)) continue;
    if (std::string why = lib.set_option("fault", f.name); !why.empty())
      throw InputError(fmt::format("fault {} does not apply to library {}: it lives inside our kernels and {} "
                                   "does not have it ({})", f.name, lib.label(), lib.table().name, why));
  }
  return backend;
}

namespace {

// Progress lines on stderr, only when it is a terminal and only once the
// scenario has taken more than a second (short runs stay quiet).
class Progress {
 public:
  explicit Progress(bool on, const std::string& name)
      : on_(on && isatty(2)), name_(name), start_(std::chrono::steady_clock::now()) {}
  void say(const std::string& what) {
    if (!on_ || std::chrono::steady_clock::now() - start_ < std::chrono::seconds(1)) return;
    fmt::print(stderr, "\r\033[K{}: {}", name_, what);
    shown_ = true;
  }
  ~Progress() {
    if (shown_) fmt::print(stderr, "\r\033[K");
  }

 private:
  bool on_, shown_ = false;
  std::string name_;
  std::chrono::steady_clock::time_point start_;
};

void check_scratch_capacity(const Scenario& s, const StagedLayout& layout) {
  const ScratchPlan plan = plan_scratch(layout, 0);
  if (s.scratch_capacity && static_cast<size_t>(s.scratch_capacity) < plan.needed())
    throw s.error("scratch.capacity_bytes",
                  fmt::format("{} bytes is too small: the staged layout needs {} ({} guard + {} "
                              "staged_bytes + {} h_state_ptrs + {} guard)", s.scratch_capacity,
                              plan.needed(), kGuardBytes, layout.staged_bytes,
                              8 * layout.num_streams, kGuardBytes));
}

}  // namespace

std::vector<std::pair<std::string, std::string>> parse_impl(const std::string& impl) {
  std::vector<std::pair<std::string, std::string>> out;
  if (impl.empty()) return out;
  size_t start = 0;
  while (start <= impl.size()) {
    const size_t comma = std::min(impl.find(',', start), impl.size());
    const std::string item = impl.substr(start, comma - start);
    const size_t eq = item.find('=');
    if (eq == std::string::npos || eq == 0 || eq + 1 == item.size())
      throw InputError(fmt::format("--impl: expected kernel=variant[,kernel=variant], found '{}'", item));
    out.emplace_back(item.substr(0, eq), item.substr(eq + 1));
    start = comma + 1;
  }
  return out;
}

std::vector<EstimateItem> library_workspace(const Scenario& s, const std::vector<StreamSpec>& streams,
                                           const KernelLibrary& lib) {
  std::vector<int32_t> cu(1, 0), kv;
  uint32_t chunk_len = 0, max_blocks = 0;
  const int64_t bs = std::max(1, s.model.block_size);
  for (const StreamSpec& st : streams) {
    cu.push_back(cu.back() + st.tokens);  // validate_resources bounded the sums to i32
    kv.push_back(st.chunk_start + st.tokens);
    chunk_len = std::max<uint32_t>(chunk_len, st.tokens);
    max_blocks = std::max<uint32_t>(max_blocks, static_cast<uint32_t>((int64_t(kv.back()) + bs - 1) / bs));
  }
  pb_batched_attn_metadata m;
  std::memset(&m, 0, sizeof m);  // no device arrays yet: workspace_bytes plans from counts and host copies
  m.batch_size = static_cast<uint32_t>(streams.size());
  m.chunk_len = chunk_len;
  m.total_tokens = static_cast<uint32_t>(cu.back());
  m.cu_seqlens_host = cu.data();
  m.cu_seqlens_host_count = static_cast<uint32_t>(cu.size());
  m.kv_lens_host = kv.data();
  m.kv_lens_host_count = static_cast<uint32_t>(kv.size());
  m.max_blocks_per_seq = max_blocks;
  Batch shape_of;  // layer_shape reads the cache's block count and poison block only
  shape_of.num_blocks = static_cast<int>(std::min<uint64_t>(planned_num_blocks(s, streams), INT32_MAX));
  shape_of.poison_block = 0;
  const LayerShape shape = layer_shape(s, shape_of);
  std::vector<EstimateItem> items;
  for (LayerKind kind : {LayerKind::attn, LayerKind::gdn}) {
    const auto layers = std::count(s.layers.begin(), s.layers.end(), kind);
    const pb_layer_shape abi = abi_layer_shape(kind, shape);
    if (!layers || !lib.unsupported(abi).empty()) continue;  // an unsupported layer is skipped, not run
    const uint64_t ws = lib.workspace_bytes(abi, m);
    if (ws)
      items.push_back({fmt::format("kernel library workspace ({} {} layers x {} bytes, asked of {})", layers,
                                   kind == LayerKind::attn ? "attn" : "gdn", ws, lib.label()),
                       "streams", double(layers) * double(ws)});
  }
  return items;
}

void validate_kernels(const RunOptions& opt, const std::vector<Scenario>& scenarios, const ResourceLimits& limits) {
  const std::unique_ptr<Backend> backend = make_configured_backend(opt, opt.inject);
  for (const Scenario& s : scenarios) validate_resources(s, limits, &backend->library());
}

ResourceEstimate validate_resources(const Scenario& s, const ResourceLimits& limits, const KernelLibrary* library) {
  const std::vector<StreamSpec> streams = resolve_streams(s);
  validate_batch(s, streams);
  int total = 0;
  for (const StreamSpec& st : streams) total += st.tokens;
  check_scratch_capacity(s, compute_layout(static_cast<int>(streams.size()), total, s.model.mrope.enabled));
  ResourceEstimate e = estimate_resources(s, streams, limits.ref_sample.value_or(s.ref_sample), limits.graph);
  if (library)
    for (EstimateItem& w : library_workspace(s, streams, *library)) e.device.push_back(std::move(w));
  check_resources(s, e, limits);
  return e;
}

RunResult run_scenario(const Scenario& s, const RunOptions& opt) {
  if (opt.graph && opt.profile) throw InputError("--graph and --profile: --profile runs no checks, --graph is checks");
  const auto t0 = std::chrono::steady_clock::now();
  TraceRange scenario_range("scenario " + s.name);
  Progress progress(opt.progress, s.name);
  FaultSet faults = s.faults;
  faults.bits |= opt.inject.bits;

  progress.say("generating");
  Batch batch;
  {
    TraceRange r("generate");
    batch = generate_batch(s);
  }
  const LayerShape shape = layer_shape(s, batch);
  const bool mrope = s.model.mrope.enabled;
  const StagedLayout true_layout = compute_layout(batch.num_streams, batch.total_tokens, mrope);
  const ScratchPlan true_plan = plan_scratch(true_layout, static_cast<size_t>(s.scratch_capacity));
  check_scratch_capacity(s, true_layout);

  std::unique_ptr<Backend> backend = make_configured_backend(opt, faults);
  TableArena arena = plan_table_arena(batch);
  // --graph: the bucket's second batch, drawn now so the arena holds either
  // batch's tables at the same address (docs/DESIGN.md "Graph mode").
  const bool graph = opt.graph && (backend->library().table().capabilities & PB_CAP_GRAPH);
  Batch batch2;
  if (graph) {
    batch2 = generate_bucket_batch(s, batch);
    arena.bytes = std::max(arena.bytes, plan_table_arena(batch2).bytes);
  }

  RunResult res;
  res.scenario_path = s.path;
  res.scenario_name = s.name;
  res.seed = s.seed;
  res.backend = backend->name();
  res.device = backend->device();
  res.library = backend->library().info();
  res.faults = faults;
  res.total_tokens = batch.total_tokens;
  res.chunk_len = batch.chunk_len;
  res.max_blocks_per_seq = batch.max_blocks_per_seq;
  res.inputs_checksum = batch.inputs_checksum;
  const int ref_sample = opt.ref_sample.value_or(s.ref_sample);
  res.ref_sample = ref_sample;
  for (const StreamTruth& st : batch.streams)
    res.streams.push_back({st.chunk_start, st.count, st.kv_len, static_cast<int>(st.blocks.size()), st.has_image});
  for (LayerKind k : s.layers) res.layer_kinds.push_back(k == LayerKind::attn ? "attn" : "gdn");
  CheckResult graph_check;
  graph_check.name = kCheckGraph;
  res.graph.requested = opt.graph;
  if (opt.graph) {
    res.graph.captured = graph;
    res.graph.clock = res.backend == "cuda" ? "cuda events" : "host clock";
    graph_check.ran = graph;
    if (!graph)
      graph_check.not_run_why = fmt::format("kernel library {} does not declare PB_CAP_GRAPH: its entries may not be "
                                            "captured and replayed (docs/KERNEL-ABI.md \"Graph capture\")",
                                            backend->library().label());
    for (const StreamTruth& st : batch2.streams)
      res.graph.batch2.push_back({st.chunk_start, st.count, st.kv_len, static_cast<int>(st.blocks.size()), st.has_image});
    res.graph.batch2_inputs_checksum = batch2.inputs_checksum;
    if (graph) {
      res.graph.diff = bucket_diff(batch, batch2);
      if (!res.graph.diff.any())
        graph_check.fail(-1, -1, "the second batch does not differ from the first in any count, chunk start, kv_len "
                                 "or block table: the replay would prove nothing");
    }
  }
  std::vector<bool> captured(s.layers.size(), false);

  std::map<std::string, CheckResult> checks;
  for (const PlannedCheck& p : plan_checks(s, opt.profile)) {
    checks[p.name].name = p.name;
    checks[p.name].ran = p.run;
    checks[p.name].not_run_why = p.why;
  }
  auto on = [&](const char* name) { return checks[name].ran; };

  progress.say("staging");
  StagedImage img;
  {
    TraceRange r("stage");
    backend->allocate(batch, shape, true_plan.capacity, arena.bytes);
    img = stage_batch(batch, mrope, true_plan.capacity, backend->scratch_base(),
                      backend->arena_base(), faults);
  }
  res.staged_bytes = img.meta.staged_bytes;
  {
    TraceRange r("upload");
    backend->upload_metadata(img.scratch, img.arena);
  }
  std::vector<int32_t> staged_kv_lens;  // as uploaded, to explain causal findings
  {
    TraceRange r("checks");
    const std::vector<uint8_t> scratch = backend->read_scratch();
    if (on(kCheckLayout)) check_layout(batch, mrope, img, backend->scratch_base(), checks[kCheckLayout]);
    if (on(kCheckMetadata))
      check_metadata(batch, img.meta, scratch, backend->scratch_base(), backend->read_arena(),
                     backend->arena_base(), checks[kCheckMetadata]);
    if (on(kCheckPositions))
      check_positions(batch, mrope, img, scratch, backend->scratch_base(), checks[kCheckPositions]);
    const uint64_t at = img.meta.kv_lens - backend->scratch_base();
    if (at + 4 * batch.num_streams <= scratch.size()) {
      staged_kv_lens.resize(batch.num_streams);
      std::memcpy(staged_kv_lens.data(), scratch.data() + at, 4 * batch.num_streams);
    }
  }

  const bool host = res.backend == "host";
  // The timing policy is lib/timing's; the timed runs all use the library's normal
  // work order; determinism adds one untimed run after them in another order
  // (schedule 1), so --repeat N gives N samples and the check never drops out.
  res.timing = resolve_timing(s.warmup, s.repeat, s.noise, s.l2_flush, opt.warmup, opt.repeat, opt.l2_flush,
                              opt.profile, host);
  res.l2_flush_bytes = backend->set_l2_flush(res.timing.l2_flush);
  res.l2 = res.l2_flush_bytes ? "cold" : "hot";
  const bool determinism = on(kCheckDeterminism);
  if (!host) res.clocks_before = read_gpu_clocks();
  else res.clocks_before.unavailable_why = res.clocks_after.unavailable_why = "not read on the host backend";

  // What the kernels are given: the staged metadata, or under mrope-section-swap
  // the H and W positions arrays exchanged (a kernel reading the wrong section's).
  BatchedAttnMetadata kernel_meta = img.meta;
  if (faults.has(Fault::mrope_section_swap))
    std::swap(kernel_meta.positions_h_stacked, kernel_meta.positions_w_stacked);

  // What the scratch must hold, built from the truth (never from the staged
  // image): the metadata block, canaries, and the current layer's h_state_ptrs
  // at the TRUE off + staged_bytes.
  std::vector<uint8_t> expected_scratch =
      expected_scratch_image(batch, mrope, true_plan.capacity, backend->arena_base());
  const size_t true_h = true_plan.h_state_ptrs;
  const bool guard_scratch = !opt.profile && on(kCheckScratchGuard);
  std::vector<uint8_t> scratch_seen, arena_seen;  // at the last scratch_guard check
  // invariance: each layer's co-batched outputs per stream, and the layers not run.
  std::vector<std::vector<StreamOutputs>> cobatched(s.layers.size());
  std::vector<bool> skipped(s.layers.size(), false);

  // A GDN precision the reference cannot model is refused before any layer runs.
  for (size_t l = 0; l < s.layers.size(); ++l)
    if (s.layers[l] == LayerKind::gdn && backend->unsupported(static_cast<int>(l)).empty())
      backend->gdn_precision(static_cast<int>(l));

  for (size_t l = 0; l < s.layers.size(); ++l) {
    const int layer = static_cast<int>(l);
    const bool attn = s.layers[l] == LayerKind::attn;
    TraceRange layer_range(fmt::format("L{} {}", layer, attn ? "attn" : "gdn"));
    if (std::string why = backend->unsupported(layer); !why.empty()) {
      res.skipped_layers.push_back({layer, why});
      skipped[l] = true;
      res.output_checksums.emplace_back();
      continue;
    }
    // Each layer plans from the host copies as staged, whatever an earlier layer did to them.
    kernel_meta.cu_seqlens_host = img.meta.cu_seqlens_host;
    kernel_meta.kv_lens_host = img.meta.kv_lens_host;
    std::vector<uint64_t> ptrs;
    if (!attn) {
      std::vector<uint64_t> own;
      for (int b = 0; b < batch.num_streams; ++b) own.push_back(backend->h_state_address(layer, b));
      ptrs = make_h_state_ptrs(own, faults);
      std::memcpy(expected_scratch.data() + true_h, own.data(), 8 * own.size());
    }
    LayerOutputs first;
    SampleLoop loop(res.timing);
    int rep = 0;
    // buffer_guard reads the guard zones after every run of the layer and keeps the
    // first that show a write (a later run could write the same bytes back).
    std::optional<std::vector<GuardZones>> hit_zones;
    auto watch_guards = [&] {
      if (opt.profile || !on(kCheckBufferGuard) || hit_zones) return;
      std::vector<GuardZones> z = backend->read_guards(layer);
      if (!guard_zones_intact(z)) hit_zones = std::move(z);
    };
    // Before every run: the layer's initial state and this layer's h_state_ptrs.
    auto reset = [&] {
      backend->reset_layer(layer);
      if (!attn) backend->write_scratch(img.plan.h_state_ptrs, ptrs.data(), 8 * ptrs.size());
    };
    auto run_once = [&](uint32_t schedule) {
      reset();
      return backend->run_layer(layer, kernel_meta, backend->scratch_base() + img.plan.h_state_ptrs, schedule);
    };
    // The outputs every check reads (the first eager run's, or the first replay's
    // under --graph), their checksum, and the scratch guard right after that run.
    // scratch_guard reads scratch and the arena after the checked run and after the
    // layer's last run; each check leaves out bytes that held the same value at the
    // check before it (an earlier layer's, or the checked run's), so a write is named
    // once, at the layer and run that made it. Before the first layer nothing is left
    // out: a field staged wrong is named there.
    auto guard_scratch_since = [&](const std::string& when) {
      std::vector<uint8_t> scratch_now = backend->read_scratch(), arena_now = backend->read_arena();
      check_scratch_guard(batch, mrope, img, expected_scratch, scratch_now, arena_now, layer,
                          checks[kCheckScratchGuard], {&scratch_seen, &arena_seen}, when);
      scratch_seen = std::move(scratch_now);
      arena_seen = std::move(arena_now);
    };
    auto keep_first = [&] {
      first = backend->read_layer(layer);
      res.output_checksums.push_back(fmt::format("{:016x}", outputs_checksum(first)));
      if (guard_scratch) guard_scratch_since("");
    };
    // determinism also holds the layer's last timed run (or replay) to the checked
    // run's bits, read back after the timing ends, so a kernel that computes
    // otherwise on timed runs shows without a read-back between timed runs.
    auto last_run_same = [&](const std::string& last) {
      if (!opt.profile && determinism)
        check_determinism(layer, first, backend->read_layer(layer), checks[kCheckDeterminism],
                          "between the checked run and " + last, &batch);
    };
    // buffer_guard, prepare's contract: the layer as reset leaves it, then after
    // prepare alone (nothing when the library has no prepare for this kind).
    if (!opt.profile && on(kCheckBufferGuard) && backend->has_prepare(layer)) {
      reset();
      const LayerOutputs before = backend->read_layer(layer);
      backend->prepare_only(layer, kernel_meta, backend->scratch_base() + img.plan.h_state_ptrs);
      check_prepare_writes(layer, attn ? "prepare_attn" : "prepare_ssm", before, backend->read_layer(layer),
                           checks[kCheckBufferGuard]);
    }
    for (; loop.more(); ++rep) {
      progress.say(fmt::format("layer {}/{} run {}{}", layer + 1, s.layers.size(), rep + 1,
                               loop.warming() ? " (warm-up)" : ""));
      loop.record(run_once(0));
      watch_guards();
      if (opt.profile || rep != 0 || graph) continue;  // under --graph the checks read the replay
      keep_first();
    }
    if (!graph && rep > 1) last_run_same(fmt::format("the last timed run (run {} of the layer)", rep));
    if (graph) {
      // Capture once (prepare on batch 1 first), then replay under the same timing
      // policy: the checks read the first replay; each replay is timed as the whole
      // layer between two marks, so launch gaps do not count.
      const uint64_t h_ptrs = backend->scratch_base() + img.plan.h_state_ptrs;
      reset();
      backend->capture_layer(layer, kernel_meta, h_ptrs);
      captured[l] = true;
      SampleLoop replays(res.timing);
      int r = 0;
      for (; replays.more(); ++r) {
        progress.say(fmt::format("layer {}/{} graph replay {}", layer + 1, s.layers.size(), r + 1));
        reset();
        replays.record({{"graph_replay", backend->replay_layer(layer, kernel_meta, h_ptrs)}});
        watch_guards();
        if (r == 0) keep_first();
      }
      if (r > 1) last_run_same(fmt::format("the last replay (replay {})", r));
      for (KernelTiming& t : replays.summaries(layer)) {
        // The layer's work: the sum of its kernels' counts.
        for (const char* k : attn ? std::vector<const char*>{"rope", "kv_write", "attention"}
                                  : std::vector<const char*>{"conv1d", "gdn"}) {
          const WorkCount w = count_work(k, batch, shape);
          t.flops += w.flops;
          t.bytes += w.bytes;
        }
        res.timings.push_back(t);
      }
    }
    if (!opt.profile && on(kCheckInvariance)) cobatched[l] = split_by_stream(batch, shape, s.layers[l], first);
    // The clocks right after each layer's timed runs (before the CPU reference lets
    // the GPU idle): the last layer's, with the throttle reasons seen after any layer.
    if (!host) {
      ClockSnapshot now = read_gpu_clocks();
      for (const std::string& t : res.clocks_after.throttle)
        if (std::find(now.throttle.begin(), now.throttle.end(), t) == now.throttle.end()) now.throttle.push_back(t);
      res.clocks_after = now;
    }
    // The determinism rerun (untimed) asks the library for another order of the
    // same work, so a same-launch race shows every time.
    if (!opt.profile && determinism) {
      run_once(1);
      watch_guards();
      check_determinism(layer, first, backend->read_layer(layer), checks[kCheckDeterminism],
                        "between the checked run and the rerun in another work order", &batch);
    }
    if (guard_scratch) guard_scratch_since(" (on a run after the checked one)");
    // After every run of the layer (warm-ups, timed, replays, the rerun): its inputs
    // as uploaded, nothing written outside its buffers.
    if (!opt.profile && on(kCheckBufferGuard))
      check_buffer_guard(batch, layer, backend->read_inputs(layer), img.meta, kernel_meta,
                         hit_zones ? *hit_zones : backend->read_guards(layer), checks[kCheckBufferGuard]);
    for (KernelTiming& t : loop.summaries(layer)) {
      const WorkCount w = count_work(t.kernel, batch, shape);
      t.flops = w.flops;
      t.bytes = w.bytes;
      res.timings.push_back(t);
    }
    if (opt.profile) {
      res.output_checksums.emplace_back();
      continue;
    }
    progress.say(fmt::format("layer {}/{} reference", layer + 1, s.layers.size()));
    TraceRange ref_range("reference+checks");
    check_layer(s, batch, shape, layer, *backend, first, ref_sample, staged_kv_lens, checks);
  }
  if (graph) {
    progress.say("graph: second batch");
    TraceRange r("graph second batch");
    run_graph_second_batch(s, batch2, *backend, true_plan.capacity, faults, ref_sample, checks, captured, graph_check);
  }
  if (on(kCheckInvariance)) {
    progress.say("invariance");
    backend.reset();  // one backend at a time: each sub-batch gets its own
    const std::vector<InvarianceBatch> plan = invariance_plan(batch, s.invariance_streams, s.seed);
    res.invariance_streams = s.invariance_streams;
    for (const InvarianceBatch& ib : plan) res.invariance_batches.push_back(ib.name);
    run_invariance(s, batch, plan, [&] { return make_configured_backend(opt, faults); }, faults, cobatched,
                   skipped, checks[kCheckInvariance]);
  }
  for (const std::string& name : all_check_names()) res.checks.push_back(checks[name]);
  if (opt.graph) res.checks.push_back(graph_check);
  res.wall_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return res;
}

}  // namespace pb
