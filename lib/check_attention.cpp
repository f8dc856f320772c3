// check_attention.cpp: numeric and causal_bound for one attention layer. The
// causal bound check counts, per stream, output rows that went NaN while the
// reference is finite. Every input is finite, so that is a read of poisoned KV
// (a position at or past the stream's kv_len, the guard entry of its table, or a
// block it does not own) or a NaN of the kernel's own making (an exp that
// overflowed); the finding names both, since the bits cannot tell them apart on
// every device. A row still holding the output
// poison bits was never written: numeric names it, the causal bound does not.
#include <fmt/format.h>

#include "checks.h"
#include "diff_stats.h"

namespace pb {

void check_attention(const Batch& batch, const LayerShape& shape, int layer,
                     const AttnReference& ref, const LayerOutputs& out, const Tolerance& tol,
                     const std::vector<int32_t>& staged_kv_lens, CheckResult& numeric,
                     CheckResult& causal) {
  const int Hq = shape.num_q_heads, D = shape.head_dim;
  for (int b = 0; b < batch.num_streams; ++b) {
    const StreamTruth& st = batch.streams[b];
    DiffStats stats;
    // Rows a kernel never stored (an element still holds the output poison) and
    // rows that read poisoned KV (a NaN that is not the output poison).
    long long nan_rows = 0, unwritten_rows = 0, unwritten_elems = 0;
    int first_nan = -1, last_nan = -1, first_unwritten = -1;
    for (int i = 0; i < st.count; ++i) {
      bool row_nan = false, row_unwritten = false;
      for (int h = 0; h < Hq; ++h) {
        const size_t rh = static_cast<size_t>(st.row_begin + i) * Hq + h;
        const bool computed = ref.computed[rh] != 0;
        for (int d = 0; d < D; ++d) {
          const bf16 bits = out.out[rh * D + d];
          const float got = to_float(bits);
          const bool unwritten = bits.bits == kBf16OutputPoisonBits;
          row_unwritten = row_unwritten || unwritten;
          row_nan = row_nan || (std::isnan(got) && !unwritten);
          if (computed) {
            stats.add(got, ref.out_hp[rh * D + d], ref.out_lp[rh * D + d]);
            unwritten_elems += unwritten;
          }
        }
      }
      if (row_unwritten && unwritten_rows++ == 0) first_unwritten = i;
      if (row_nan) {
        ++nan_rows;
        if (first_nan < 0) first_nan = i;
        last_nan = i;
      }
    }
    Figure f = stats.figure(layer, b, "out", tol);
    f.precision = kAttentionPrecision;
    f.never_written = unwritten_elems;
    numeric.figures.push_back(f);
    if (unwritten_rows)
      numeric.fail(layer, b, fmt::format("stream {} (kv_len {}): {} of {} attention output rows never written "
                                         "(first token {}, position {}): they still hold the output poison "
                                         "0x{:04x}, so no kernel stored them", b, st.kv_len, unwritten_rows,
                                         st.count, first_unwritten, st.chunk_start + first_unwritten,
                                         kBf16OutputPoisonBits));
    if (!f.pass && (f.max_abs > f.limit || f.nonfinite > f.never_written))
      numeric.fail(layer, b, fmt::format("stream {} (kv_len {}): attention output {}", b, st.kv_len,
                                         numeric_verdict(f)));
    Figure c;
    c.layer = layer;
    c.stream = b;
    c.what = "out_rows";
    c.read_poison = nan_rows;
    c.never_written = unwritten_rows;
    c.elements = st.count;
    c.pass = nan_rows == 0;
    causal.figures.push_back(c);
    if (nan_rows == 0) continue;
    const int p_first = st.chunk_start + first_nan, p_last = st.chunk_start + last_nan;
    std::string why;
    const int staged = b < static_cast<int>(staged_kv_lens.size()) ? staged_kv_lens[b] : st.kv_len;
    if (staged != st.kv_len)
      why = fmt::format("its staged kv_len is {}, expected {}: its tokens were placed at positions "
                        "{}..{} and read keys up to {}, past its {} blocks", staged, st.kv_len,
                        std::max(staged - st.count, 0), staged - 1, staged - 1, st.blocks.size());
    else if (nan_rows == 1 && last_nan == st.count - 1)
      why = fmt::format("only its last token (position {}) is poisoned: it read key position {} "
                        "= kv_len, one past its causal bound", p_last, st.kv_len);
    else
      why = fmt::format("tokens at positions {}..{} read poisoned KV (a key position at or past its "
                        "kv_len {}, its table's guard entry, or a block it does not own), or the "
                        "kernel's own arithmetic made a NaN there (an exp that overflowed)",
                        p_first, p_last, st.kv_len);
    causal.fail(layer, b, fmt::format("stream {} (chunk_start {}, kv_len {}, {} blocks): {} of {} "
                                      "output rows NaN where the reference is finite; {}", b, st.chunk_start, st.kv_len,
                                      st.blocks.size(), nan_rows, st.count, why));
  }
}

}  // namespace pb
