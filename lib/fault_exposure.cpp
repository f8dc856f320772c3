// fault_exposure.cpp: when each fault can reach its check (see fault_exposure.h).
// conv-state-bleed corrupts only the conv window of a stream's first d_conv-1
// tokens; the recurrence then scales that error by the stream's cumulative
// decay exp(sum g), so it reaches the final h_state only where some later
// stream's decay leaves more than kBleedVisible of it. mrope-section-swap shows
// only where an image token's H and W positions differ enough on an H or W
// frequency (a low-frequency section under a large rope_theta hides it).
#include "fault_exposure.h"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>

#include "backend.h"
#include "graph_bucket.h"
#include "reference/reference.h"
#include "check_result.h"
#include "host_kernels/host_kernels.h"
#include "invariance.h"

namespace pb {

namespace {

constexpr double kBleedVisible = 1e-2;
// A rotation change of this many radians moves a roped key well past the
// positions check's 2-ulp bf16 tolerance.
constexpr double kSwapVisible = 0.1;

bool has(const Scenario& s, LayerKind k) { return std::count(s.layers.begin(), s.layers.end(), k) > 0; }

double best_bleed_survival(const Scenario& s, const Batch& batch) {
  const int Hv = s.model.gdn.num_v_heads, W = s.model.gdn.d_conv - 1;
  double best = 0;
  for (const LayerInputs& li : batch.layers) {
    if (li.kind != LayerKind::gdn) continue;
    for (int b = 1; b < batch.num_streams; ++b) {
      const StreamTruth& st = batch.streams[b];
      for (int h = 0; h < Hv; ++h) {
        double sum = 0;
        for (int i = std::min(W, st.count); i < st.count; ++i)
          sum += li.gdn.g[static_cast<size_t>(st.row_begin + i) * Hv + h];
        best = std::max(best, std::exp(sum));
      }
    }
  }
  return best;
}

// The largest rotation change (radians, folded into [0, pi]) that swapping the
// H and W positions makes on any token at any frequency of the H or W section.
double best_swap_angle(const Scenario& s, const Batch& batch) {
  const LayerShape shape = layer_shape(s, batch);
  const int half = shape.rotary_dim / 2;
  double best = 0;
  for (int i = 0; i < half; ++i) {
    if (rope_section(shape, i) == 0) continue;
    const double inv = std::pow(static_cast<double>(shape.rope_theta), -2.0 * i / shape.rotary_dim);
    for (const StreamTruth& st : batch.streams)
      for (int t = 0; t < st.count; ++t) {
        const double d = std::fmod(std::abs(double(st.pos_h[t]) - double(st.pos_w[t])) * inv, 2 * M_PI);
        best = std::max(best, std::min(d, 2 * M_PI - d));
      }
  }
  return best;
}

}  // namespace

Exposure fault_exposure(Fault f, const Scenario& s, const Batch& batch) {
  const int N = batch.num_streams;
  auto no = [](std::string why) { return Exposure{false, std::move(why)}; };
  const bool attn = has(s, LayerKind::attn), gdn = has(s, LayerKind::gdn);
  switch (f) {
    case Fault::kv_lens_max: {
      if (!attn) return no("no attention layer reads kv_lens");
      bool differ = false;
      for (const StreamTruth& st : batch.streams) differ = differ || st.kv_len != batch.streams[0].kv_len;
      return differ ? Exposure{} : no("every stream has the same kv_len, so the maximum is each one's own");
    }
    case Fault::staged_bytes_undercount:
      return Exposure{};
    case Fault::slot_off_by_one:
      return attn ? Exposure{} : no("no attention layer writes the KV cache");
    case Fault::block_table_swap:
      if (!attn) return no("no attention layer reads block tables");
      if (N < 2) return no("one stream: there is no second table to swap with");
      if (batch.streams[0].kv_len == batch.streams[1].kv_len)
        return no("streams 0 and 1 have the same kv_len: each reads only live keys of the other "
                  "(numeric catches it, the causal bound cannot)");
      return Exposure{};
    case Fault::cu_seqlens_off_by_one:
      if (!attn) return no("no attention layer writes the KV cache");
      return N >= 2 ? Exposure{} : no("one stream: there is no interior boundary to shift");
    case Fault::causal_off_by_one:
      return attn ? Exposure{} : no("no attention layer");
    case Fault::mrope_hw_alias: {
      if (!s.model.mrope.enabled) return no("no MRoPE: H and W alias T by design");
      bool image = false;
      for (const StreamTruth& st : batch.streams) image = image || st.has_image;
      return image ? Exposure{} : no("no image token in this chunk: H = W = T for text");
    }
    case Fault::conv_state_bleed:
      if (!gdn) return no("no gdn layer");
      if (N < 2) return no("one stream: there is no previous stream to bleed from");
      if (best_bleed_survival(s, batch) < kBleedVisible)
        return no("every later stream is long enough that the recurrence's decay washes the bleed "
                  "out of its final h_state (the numeric check still sees its first tokens)");
      return Exposure{};
    case Fault::h_state_ptr_swap:
      if (!gdn) return no("no gdn layer");
      return N >= 2 ? Exposure{} : no("one stream: there is no second pointer to swap with");
    case Fault::seq_len_ptr_stride:
      return N >= 2 ? Exposure{} : no("one stream: its pointer is right whatever the stride");
    case Fault::table_guard_last_block:
      return Exposure{};
    case Fault::mrope_section_swap: {
      if (!attn) return no("no attention layer applies RoPE");
      if (!s.model.mrope.enabled) return no("no MRoPE: there are no H and W sections to swap");
      const double angle = best_swap_angle(s, batch);
      if (angle < kSwapVisible)
        return no(fmt::format("no image token's H and W positions differ enough on a frequency of the H or W "
                              "section to move its rotation past bf16 rounding (largest angle {:.3g} rad)",
                              angle));
      return Exposure{};
    }
    case Fault::graph_baked_kv_len: {
      // Shows only under --graph, on the bucket's second batch, where some
      // stream's kv_len differs from the capture's.
      if (!attn) return no("no attention layer reads kv_lens");
      const Batch second = generate_bucket_batch(s, batch);
      for (int b = 0; b < N; ++b)
        if (second.streams[b].kv_len != batch.streams[b].kv_len) return Exposure{};
      return no("the bucket's second batch has every stream's kv_len of the first");
    }
    case Fault::gdn_state_race:
      if (!gdn) return no("no gdn layer");
      if (N * s.model.gdn.num_v_heads < 2) return no("one stream with one v head: no neighbour to race with");
      if (!s.checks.empty() && std::count(s.checks.begin(), s.checks.end(), kCheckDeterminism) == 0)
        return no("the scenario does not ask for the determinism check");
      return Exposure{};
    case Fault::grid_short_by_one:
      return Exposure{};
    case Fault::out_row_past_end:
      return batch.total_tokens > 0 ? Exposure{} : no("no token: there is no last row");
    case Fault::inputs_in_place: {
      if (gdn) return Exposure{};  // conv1d's activations are never its inputs
      if (layer_shape(s, batch).rotary_dim == 0) return no("no rotary dims: rope leaves q as it is");
      for (const StreamTruth& st : batch.streams)
        for (int t = 0; t < st.count; ++t)
          if (st.pos_t[t] || st.pos_h[t] || st.pos_w[t]) return Exposure{};
      return no("every token sits at position 0, where rope leaves q as it is");
    }
    case Fault::batch_dependent_split: {
      if (!attn) return no("no attention layer");
      if (!s.checks.empty() && std::count(s.checks.begin(), s.checks.end(), kCheckInvariance) == 0)
        return no("the scenario does not ask for the invariance check");
      // Only a stream run alone changes the batch's total tokens; it shows when
      // that changes the key tile and the stream has full key tiles (keys before
      // a query tile's first row: a chunk start past the tile, or more than one
      // 64-row query tile), whose products then sum in other groups. Keys on the
      // diagonal are summed one by one whatever the tile, and a short stream's
      // fp32 differences vanish in its bf16 output.
      const int full = host_kernels::batch_dependent_key_tile(batch.total_tokens);
      for (const InvarianceBatch& ib : invariance_plan(batch, s.invariance_streams, s.seed)) {
        if (ib.order.size() != 1) continue;
        const StreamTruth& st = batch.streams[ib.order[0]];
        const int own = host_kernels::batch_dependent_key_tile(st.count);
        if (own != full && (st.chunk_start >= std::max(own, full) || st.count > 64)) return Exposure{};
      }
      return no("no stream the invariance check runs alone both gets another key tile than the whole "
                "batch and has full key tiles (chunk_start past the tile or more than 64 tokens)");
    }
  }
  return Exposure{};
}

}  // namespace pb
