// check_gdn.cpp: numeric (the layer output) and state (each stream's h_state
// against the reference's final state, each stream's conv_state bit for bit)
// for one Gated DeltaNet layer. Each stream's own storage is compared, so a
// state written through another stream's pointer shows on both.
#include <fmt/format.h>

#include "checks.h"
#include "diff_stats.h"

namespace pb {

void check_gdn(const Batch& batch, const LayerShape& shape, int layer, const GdnReference& ref,
               const LayerOutputs& out, const Tolerance& tol, CheckResult& numeric,
               CheckResult& state) {
  const size_t row = static_cast<size_t>(shape.num_v_heads) * shape.v_dim;
  const size_t W = shape.d_conv - 1;
  const size_t C = 2 * static_cast<size_t>(shape.num_k_heads) * shape.k_dim + row;
  for (int b = 0; b < batch.num_streams; ++b) {
    const StreamTruth& st = batch.streams[b];
    DiffStats o;
    long long unwritten_rows = 0, unwritten_elems = 0;
    int first_unwritten = -1;
    for (int t = 0; t < st.count; ++t) {
      bool row_unwritten = false;
      for (size_t i = (st.row_begin + t) * row; i < (st.row_begin + t + 1) * row; ++i) {
        o.add(to_float(out.out[i]), ref.out_hp[i], ref.out_lp[i]);
        const bool unwritten = out.out[i].bits == kBf16OutputPoisonBits;
        unwritten_elems += unwritten;
        row_unwritten = row_unwritten || unwritten;
      }
      if (row_unwritten && unwritten_rows++ == 0) first_unwritten = t;
    }
    Figure fo = o.figure(layer, b, "out", tol);
    fo.never_written = unwritten_elems;
    fo.precision = gdn_precision_name(ref.lp_precision);
    numeric.figures.push_back(fo);
    if (unwritten_rows)
      numeric.fail(layer, b, fmt::format("stream {} ({} tokens): {} of {} gdn output rows never written (first "
                                         "token {}): they still hold the output poison 0x{:04x}, so no kernel "
                                         "stored them", b, st.count, unwritten_rows, st.count, first_unwritten,
                                         kBf16OutputPoisonBits));
    if (!fo.pass && (fo.max_abs > fo.limit || fo.nonfinite > fo.never_written))
      numeric.fail(layer, b, fmt::format("stream {} ({} tokens): gdn output {}", b, st.count,
                                         numeric_verdict(fo)));
    DiffStats h;
    for (size_t i = 0; i < ref.h_hp[b].size(); ++i) h.add(out.h_state[b][i], ref.h_hp[b][i], ref.h_lp[b][i]);
    Figure fh = h.figure(layer, b, "h_state", tol);
    fh.precision = fo.precision;
    state.figures.push_back(fh);
    if (!fh.pass)
      state.fail(layer, b, fmt::format("stream {}: h_state after the chunk differs from the "
                                       "reference: max_abs {:.3g} over limit {:.3g} (rel_l2 {:.3g})",
                                       b, fh.max_abs, fh.limit, fh.rel_l2));
    long long wrong = 0;
    size_t first = 0;
    for (size_t i = 0; i < C * W; ++i) {
      const size_t at = b * C * W + i;
      if (out.conv_state[at].bits != ref.conv_state[at].bits && wrong++ == 0) first = i;
    }
    Figure fc;
    fc.layer = layer;
    fc.stream = b;
    fc.what = "conv_state";
    fc.mismatched = wrong;
    fc.elements = static_cast<long long>(C * W);
    fc.pass = wrong == 0;
    state.figures.push_back(fc);
    if (wrong)
      state.fail(layer, b, fmt::format("stream {}: conv_state differs in {} of {} entries; first at "
                                       "channel {} tap {}: expected {}, found {}", b, wrong, C * W,
                                       first / W, first % W, to_float(ref.conv_state[b * C * W + first]),
                                       to_float(out.conv_state[b * C * W + first])));
  }
}

}  // namespace pb
