// sub_batch.cpp: repacks a subset or permutation of a batch's streams (sub_batch.h).
#include "sub_batch.h"

#include <algorithm>
#include <stdexcept>

namespace pb {

namespace {

// Appends rows [begin, begin + count) of a [T, width] tensor to `out`.
template <typename T>
void take_rows(const std::vector<T>& in, size_t width, int begin, int count, std::vector<T>& out) {
  out.insert(out.end(), in.begin() + static_cast<ptrdiff_t>(begin * width),
             in.begin() + static_cast<ptrdiff_t>((begin + count) * width));
}

}  // namespace

Batch sub_batch(const Batch& batch, const std::vector<int>& order) {
  if (order.empty()) throw std::invalid_argument("sub_batch: no stream");
  std::vector<char> seen(batch.num_streams, 0);
  for (int i : order) {
    if (i < 0 || i >= batch.num_streams || seen[i]) throw std::invalid_argument("sub_batch: bad stream index");
    seen[i] = 1;
  }
  const int T = batch.total_tokens;
  Batch out;
  out.num_streams = static_cast<int>(order.size());
  out.block_size = batch.block_size;
  out.num_blocks = batch.num_blocks;
  out.poison_block = batch.poison_block;
  for (int i : order) {
    StreamTruth st = batch.streams[i];
    st.row_begin = out.total_tokens;
    out.total_tokens += st.count;
    out.chunk_len = std::max(out.chunk_len, st.count);
    out.max_blocks_per_seq = std::max(out.max_blocks_per_seq, static_cast<int>(st.blocks.size()));
    out.streams.push_back(std::move(st));
  }
  for (const LayerInputs& li : batch.layers) {
    LayerInputs sub;
    sub.kind = li.kind;
    if (li.kind == LayerKind::attn) {
      const AttnInputs& a = li.attn;
      const size_t wq = T ? a.q.size() / T : 0, wk = T ? a.k.size() / T : 0;
      for (int i : order) {
        const StreamTruth& st = batch.streams[i];
        take_rows(a.q, wq, st.row_begin, st.count, sub.attn.q);
        take_rows(a.k, wk, st.row_begin, st.count, sub.attn.k);
        take_rows(a.v, wk, st.row_begin, st.count, sub.attn.v);
        sub.attn.prior_k.push_back(a.prior_k[i]);
        sub.attn.prior_v.push_back(a.prior_v[i]);
      }
    } else {
      const GdnInputs& g = li.gdn;
      const size_t wx = T ? g.x.size() / T : 0, wg = T ? g.g.size() / T : 0;
      sub.gdn.conv_w = g.conv_w;
      for (int i : order) {
        const StreamTruth& st = batch.streams[i];
        take_rows(g.x, wx, st.row_begin, st.count, sub.gdn.x);
        take_rows(g.g, wg, st.row_begin, st.count, sub.gdn.g);
        take_rows(g.beta, wg, st.row_begin, st.count, sub.gdn.beta);
        sub.gdn.h0.push_back(g.h0[i]);
        sub.gdn.conv0.push_back(g.conv0[i]);
      }
    }
    out.layers.push_back(std::move(sub));
  }
  out.inputs_checksum = batch.inputs_checksum;  // the same generated inputs, repacked
  return out;
}

}  // namespace pb
