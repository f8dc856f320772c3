// check_invariance.cpp: one stream's outputs cut out of a layer's read-back
// (rows, written cache slots, states) and compared bit for bit between the
// co-batched run and a sub-batch run; findings name the first differing element.
#include <fmt/format.h>

#include <cstring>

#include "invariance.h"

namespace pb {

std::vector<StreamOutputs> split_by_stream(const Batch& batch, const LayerShape& shape, LayerKind kind,
                                           const LayerOutputs& o) {
  std::vector<StreamOutputs> out(batch.num_streams);
  const int T = batch.total_tokens;
  const size_t row = T ? o.out.size() / T : 0;
  for (int b = 0; b < batch.num_streams; ++b) {
    const StreamTruth& st = batch.streams[b];
    StreamOutputs& so = out[b];
    if (static_cast<size_t>(st.row_begin + st.count) * row <= o.out.size())
      so.out.assign(o.out.begin() + st.row_begin * row, o.out.begin() + (st.row_begin + st.count) * row);
    if (kind == LayerKind::attn) {
      const size_t kv_row = static_cast<size_t>(shape.num_kv_heads) * shape.head_dim;
      for (int p = st.chunk_start; p < st.kv_len; ++p) {
        const size_t slot = static_cast<size_t>(st.blocks[p / shape.block_size]) * shape.block_size +
                            p % shape.block_size;
        if ((slot + 1) * kv_row > o.k_cache.size() || (slot + 1) * kv_row > o.v_cache.size()) continue;
        so.k_written.insert(so.k_written.end(), o.k_cache.begin() + slot * kv_row, o.k_cache.begin() + (slot + 1) * kv_row);
        so.v_written.insert(so.v_written.end(), o.v_cache.begin() + slot * kv_row, o.v_cache.begin() + (slot + 1) * kv_row);
      }
    } else {
      if (static_cast<size_t>(b) < o.h_state.size()) so.h_state = o.h_state[b];
      const size_t per = batch.num_streams ? o.conv_state.size() / batch.num_streams : 0;
      so.conv_state.assign(o.conv_state.begin() + b * per, o.conv_state.begin() + (b + 1) * per);
    }
  }
  return out;
}

namespace {

std::string value(bf16 x) { return fmt::format("{:g} (0x{:04x})", to_float(x), x.bits); }
std::string value(float x) {
  uint32_t u;
  std::memcpy(&u, &x, 4);
  return fmt::format("{:.9g} (0x{:08x})", x, u);
}

template <typename T>
void compare(int layer, int stream, const std::string& where, const char* what, const std::vector<T>& want,
             const std::vector<T>& got, CheckResult& r) {
  if (want.size() != got.size()) {
    r.fail(layer, stream, fmt::format("stream {} {}: {} holds {} elements, co-batched {}", stream, what, where,
                                      got.size(), want.size()));
    return;
  }
  size_t first = want.size(), n = 0;
  for (size_t i = 0; i < want.size(); ++i)
    if (std::memcmp(&want[i], &got[i], sizeof(T)) != 0) {
      if (first == want.size()) first = i;
      ++n;
    }
  if (!n) return;
  r.fail(layer, stream,
         fmt::format("stream {} {}: {} of {} elements differ between the co-batched run and {}; first at "
                     "element {}: {} co-batched, {} in {}",
                     stream, what, n, want.size(), where, first, value(want[first]), value(got[first]), where));
}

}  // namespace

void check_invariance(int layer, int stream, const std::string& where, const StreamOutputs& want,
                      const StreamOutputs& got, CheckResult& r) {
  compare(layer, stream, where, "out", want.out, got.out, r);
  compare(layer, stream, where, "k_cache (its chunk's slots)", want.k_written, got.k_written, r);
  compare(layer, stream, where, "v_cache (its chunk's slots)", want.v_written, got.v_written, r);
  compare(layer, stream, where, "h_state", want.h_state, got.h_state, r);
  compare(layer, stream, where, "conv_state", want.conv_state, got.conv_state, r);
}

}  // namespace pb
