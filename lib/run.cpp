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

#include "check_plan.h"
#include "checks.h"
#include "expected_scratch.h"
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

namespace {

// The backend the options ask for, with --impl and the kernel-internal faults
// applied to its library.
std::unique_ptr<Backend> make_configured_backend(const RunOptions& opt, FaultSet faults) {
  std::unique_ptr<Backend> backend = make_backend(opt.backend, opt.kernels);
  KernelLibrary& lib = backend->library();
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

KernelTiming summarise(int layer, const std::string& kernel, std::vector<double> ms) {
  KernelTiming t;
  t.layer = layer;
  t.kernel = kernel;
  t.samples = static_cast<int>(ms.size());
  if (ms.empty()) return t;
  std::sort(ms.begin(), ms.end());
  auto q = [&](double f) { return ms[static_cast<size_t>(f * (ms.size() - 1) + 0.5)]; };
  t.min_ms = ms.front();
  t.max_ms = ms.back();
  t.median_ms = ms.size() % 2 ? ms[ms.size() / 2] : 0.5 * (ms[ms.size() / 2 - 1] + ms[ms.size() / 2]);
  t.q1_ms = q(0.25);
  t.q3_ms = q(0.75);
  return t;
}

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

void validate_kernels(const RunOptions& opt) { make_configured_backend(opt, opt.inject); }

ResourceEstimate validate_resources(const Scenario& s, const ResourceLimits& limits) {
  const std::vector<StreamSpec> streams = resolve_streams(s);
  validate_batch(s, streams);
  int total = 0;
  for (const StreamSpec& st : streams) total += st.tokens;
  check_scratch_capacity(s, compute_layout(static_cast<int>(streams.size()), total, s.model.mrope.enabled));
  const ResourceEstimate e = estimate_resources(s, streams, limits.ref_sample.value_or(s.ref_sample));
  check_resources(s, e, limits);
  return e;
}

RunResult run_scenario(const Scenario& s, const RunOptions& opt) {
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
  const TableArena arena = plan_table_arena(batch);

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
  const int warmup = opt.profile ? 1 : std::max(0, opt.warmup.value_or(s.warmup));
  int repeat = opt.profile ? 1 : std::max(1, opt.repeat.value_or(s.repeat));
  // The host clock on a shared CPU is no timing signal: one timed run by default.
  if (host && !opt.repeat) repeat = 1;
  const int host_warmup = host && !opt.warmup ? 0 : warmup;
  // The timed runs all use the library's normal work order; determinism adds one
  // untimed run after them in another order (schedule 1), so --repeat N gives N
  // samples and the check never silently drops out.
  const int timed_end = host_warmup + repeat;
  const int runs = timed_end + (on(kCheckDeterminism) ? 1 : 0);

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
  // invariance: each layer's co-batched outputs per stream, and the layers not run.
  std::vector<std::vector<StreamOutputs>> cobatched(s.layers.size());
  std::vector<bool> skipped(s.layers.size(), false);

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
    std::vector<uint64_t> ptrs;
    if (!attn) {
      std::vector<uint64_t> own;
      for (int b = 0; b < batch.num_streams; ++b) own.push_back(backend->h_state_address(layer, b));
      ptrs = make_h_state_ptrs(own, faults);
      std::memcpy(expected_scratch.data() + true_h, own.data(), 8 * own.size());
    }
    std::map<std::string, std::vector<double>> times;
    LayerOutputs first;
    for (int rep = 0; rep < runs; ++rep) {
      progress.say(fmt::format("layer {}/{} run {}/{}", layer + 1, s.layers.size(), rep + 1, runs));
      backend->reset_layer(layer);
      if (!attn) backend->write_scratch(img.plan.h_state_ptrs, ptrs.data(), 8 * ptrs.size());
      // The determinism rerun (the last, untimed run) asks the library for another
      // order of the same work, so a same-launch race shows every time.
      const bool rerun = rep == timed_end && on(kCheckDeterminism);
      const std::vector<KernelTime> kt =
          backend->run_layer(layer, kernel_meta, backend->scratch_base() + img.plan.h_state_ptrs, rerun ? 1u : 0u);
      if (rep >= host_warmup && rep < timed_end)
        for (const KernelTime& k : kt) times[k.kernel].push_back(k.ms);
      if (opt.profile) continue;
      if (rep == 0) {
        first = backend->read_layer(layer);
        res.output_checksums.push_back(fmt::format("{:016x}", outputs_checksum(first)));
        if (on(kCheckInvariance)) cobatched[l] = split_by_stream(batch, shape, s.layers[l], first);
        if (on(kCheckScratchGuard))
          check_scratch_guard(batch, mrope, img, expected_scratch, backend->read_scratch(),
                              backend->read_arena(), layer, checks[kCheckScratchGuard]);
      } else if (rep == runs - 1 && on(kCheckDeterminism)) {
        check_determinism(layer, first, backend->read_layer(layer), checks[kCheckDeterminism]);
      }
    }
    for (auto& [kernel, ms] : times) {
      KernelTiming t = summarise(layer, kernel, ms);
      const WorkCount w = count_work(kernel, batch, shape);
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
    if (attn) {
      const AttnReference ref = attention_reference(batch, shape, layer, ref_sample, s.seed);
      if (on(kCheckNumeric) || on(kCheckCausalBound)) {
        CheckResult numeric = checks[kCheckNumeric], causal = checks[kCheckCausalBound];
        check_attention(batch, shape, layer, ref, first, s.tol_bf16, staged_kv_lens, numeric, causal);
        if (on(kCheckNumeric)) checks[kCheckNumeric] = numeric;
        if (on(kCheckCausalBound)) checks[kCheckCausalBound] = causal;
      }
      if (on(kCheckKvWrite)) check_kv_write(batch, shape, layer, ref, first, checks[kCheckKvWrite]);
      if (on(kCheckPositions)) check_rope_sections(batch, shape, layer, first, checks[kCheckPositions]);
    } else {
      const GdnReference ref = gdn_reference(batch, shape, layer, backend->gdn_precision(layer));
      if (on(kCheckNumeric) || on(kCheckState)) {
        CheckResult numeric = checks[kCheckNumeric], state = checks[kCheckState];
        check_gdn(batch, shape, layer, ref, first, s.tol_bf16, numeric, state);
        if (on(kCheckNumeric)) checks[kCheckNumeric] = numeric;
        if (on(kCheckState)) checks[kCheckState] = state;
      }
    }
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
  res.wall_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return res;
}

}  // namespace pb
