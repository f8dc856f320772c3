// graph_run.cpp: --graph's second batch (graph_run.h). The same steps as batch 1
// in run.cpp (stage, upload, layout/metadata/positions, per layer: reset,
// h_state_ptrs, run, read, scratch guard, output checks) with replay_layer in
// place of the eager run and no new allocation: every address stays batch 1's.
#include "graph_run.h"

#include <fmt/format.h>

#include <cstring>

#include "check_layer.h"
#include "checks.h"
#include "expected_scratch.h"

namespace pb {

void run_graph_second_batch(const Scenario& s, const Batch& batch2, Backend& backend, size_t capacity,
                            FaultSet faults, int ref_sample, const std::map<std::string, CheckResult>& plan,
                            const std::vector<bool>& captured, CheckResult& graph) {
  const bool mrope = s.model.mrope.enabled;
  const LayerShape shape = layer_shape(s, batch2);
  std::map<std::string, CheckResult> checks;
  for (const auto& [name, c] : plan) {
    checks[name].name = name;
    checks[name].ran = c.ran;
    checks[name].not_run_why = c.not_run_why;
  }
  checks[kCheckDeterminism].ran = false;  // one replay per layer
  auto on = [&](const char* name) { return checks[name].ran; };

  const StagedImage img = stage_batch(batch2, mrope, capacity, backend.scratch_base(), backend.arena_base(), faults);
  backend.upload_metadata(img.scratch, img.arena);
  backend.upload_inputs(batch2);
  std::vector<int32_t> staged_kv_lens;
  {
    const std::vector<uint8_t> scratch = backend.read_scratch();
    if (on(kCheckLayout)) check_layout(batch2, mrope, img, backend.scratch_base(), checks[kCheckLayout]);
    if (on(kCheckMetadata))
      check_metadata(batch2, img.meta, scratch, backend.scratch_base(), backend.read_arena(), backend.arena_base(),
                     checks[kCheckMetadata]);
    if (on(kCheckPositions))
      check_positions(batch2, mrope, img, scratch, backend.scratch_base(), checks[kCheckPositions]);
    const uint64_t at = img.meta.kv_lens - backend.scratch_base();
    if (at + 4 * batch2.num_streams <= scratch.size()) {
      staged_kv_lens.resize(batch2.num_streams);
      std::memcpy(staged_kv_lens.data(), scratch.data() + at, 4 * batch2.num_streams);
    }
  }
  BatchedAttnMetadata kernel_meta = img.meta;
  if (faults.has(Fault::mrope_section_swap)) std::swap(kernel_meta.positions_h_stacked, kernel_meta.positions_w_stacked);
  std::vector<uint8_t> expected_scratch = expected_scratch_image(batch2, mrope, capacity, backend.arena_base());
  const uint64_t h_ptrs = backend.scratch_base() + img.plan.h_state_ptrs;

  for (size_t l = 0; l < s.layers.size(); ++l) {
    const int layer = static_cast<int>(l);
    if (l >= captured.size() || !captured[l]) continue;  // skipped on batch 1 (unsupported): reported there
    const bool attn = s.layers[l] == LayerKind::attn;
    std::vector<uint64_t> ptrs;
    if (!attn) {
      std::vector<uint64_t> own;
      for (int b = 0; b < batch2.num_streams; ++b) own.push_back(backend.h_state_address(layer, b));
      ptrs = make_h_state_ptrs(own, faults);
      std::memcpy(expected_scratch.data() + plan_scratch(compute_layout(batch2.num_streams, batch2.total_tokens, mrope),
                                                         capacity).h_state_ptrs,
                  own.data(), 8 * own.size());
    }
    backend.reset_layer(layer);
    if (!attn) backend.write_scratch(img.plan.h_state_ptrs, ptrs.data(), 8 * ptrs.size());
    backend.replay_layer(layer, kernel_meta, h_ptrs);
    const LayerOutputs out = backend.read_layer(layer);
    if (on(kCheckScratchGuard))
      check_scratch_guard(batch2, mrope, img, expected_scratch, backend.read_scratch(), backend.read_arena(), layer,
                          checks[kCheckScratchGuard]);
    if (on(kCheckBufferGuard))
      check_buffer_guard(batch2, layer, backend.read_inputs(layer), img.meta, kernel_meta, backend.read_guards(layer),
                         checks[kCheckBufferGuard]);
    check_layer(s, batch2, shape, layer, backend, out, ref_sample, staged_kv_lens, checks);
  }
  fold_second_batch(checks, graph);
}

void fold_second_batch(const std::map<std::string, CheckResult>& second, CheckResult& graph) {
  for (const std::string& name : all_check_names()) {
    const auto it = second.find(name);
    if (it == second.end() || !it->second.ran) continue;
    const CheckResult& c = it->second;
    // Batch 2's stream indices are not batch 1's (the report's streams): they go into
    // the text, and the entry is filed under no stream.
    auto tag = [&](int stream) { return stream >= 0 ? fmt::format("batch 2 stream {} {}", stream, name) : "batch 2 " + name; };
    for (Figure f : c.figures) {
      f.what = tag(f.stream) + " " + f.what;
      f.stream = -1;
      graph.figures.push_back(f);
    }
    for (const Finding& f : c.findings) graph.fail(f.layer, -1, tag(f.stream) + ": " + f.message);
    if (!c.passed && c.findings.empty()) graph.fail(-1, -1, "batch 2 " + name + ": failed");
    graph.finding_count += std::max<long long>(0, c.finding_count - static_cast<long long>(c.findings.size()));
  }
}

}  // namespace pb
