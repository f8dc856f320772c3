// run_invariance.cpp: the invariance check's runs. Each sub-batch of the plan is
// built from the truth, staged into its own backend's scratch and arena exactly
// as a batch is (same faults), run layer by layer through the same library in
// its normal work order, read back, and compared stream by stream with the
// co-batched run. One backend at a time, freed before the next.
#include <fmt/format.h>

#include <algorithm>
#include <utility>

#include "invariance.h"
#include "staging.h"
#include "sub_batch.h"
#include "trace.h"

namespace pb {

void run_invariance(const Scenario& s, const Batch& batch, const std::vector<InvarianceBatch>& plan,
                    const std::function<std::unique_ptr<Backend>()>& make, FaultSet faults,
                    const std::vector<std::vector<StreamOutputs>>& cobatched, const std::vector<bool>& skip,
                    CheckResult& r) {
  const bool mrope = s.model.mrope.enabled;
  for (const InvarianceBatch& ib : plan) {
    TraceRange range("invariance " + ib.name);
    const Batch sub = sub_batch(batch, ib.order);
    const LayerShape shape = layer_shape(s, sub);
    const ScratchPlan sp = plan_scratch(compute_layout(sub.num_streams, sub.total_tokens, mrope),
                                        static_cast<size_t>(s.scratch_capacity));
    std::unique_ptr<Backend> backend = make();
    backend->allocate(sub, shape, sp.capacity, plan_table_arena(sub).bytes);
    const StagedImage img = stage_batch(sub, mrope, sp.capacity, backend->scratch_base(), backend->arena_base(), faults);
    backend->upload_metadata(img.scratch, img.arena);
    BatchedAttnMetadata meta = img.meta;
    if (faults.has(Fault::mrope_section_swap)) std::swap(meta.positions_h_stacked, meta.positions_w_stacked);
    for (size_t l = 0; l < s.layers.size(); ++l) {
      const int layer = static_cast<int>(l);
      if (skip[l] || !backend->unsupported(layer).empty()) continue;
      const bool attn = s.layers[l] == LayerKind::attn;
      backend->reset_layer(layer);
      if (!attn) {
        std::vector<uint64_t> own;
        for (int b = 0; b < sub.num_streams; ++b) own.push_back(backend->h_state_address(layer, b));
        const std::vector<uint64_t> ptrs = make_h_state_ptrs(own, faults);
        backend->write_scratch(img.plan.h_state_ptrs, ptrs.data(), 8 * ptrs.size());
      }
      backend->run_layer(layer, meta, backend->scratch_base() + img.plan.h_state_ptrs, 0);
      const std::vector<StreamOutputs> got = split_by_stream(sub, shape, s.layers[l], backend->read_layer(layer));
      for (size_t j = 0; j < ib.order.size(); ++j)
        check_invariance(layer, ib.order[j], ib.name, cobatched[l][ib.order[j]], got[j], r);
    }
  }
}

}  // namespace pb
