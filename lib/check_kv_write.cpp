// check_kv_write.cpp: the KV write check: the whole paged cache after the layer
// against the expected cache, slot by slot. v must match bit for bit (a copy);
// k within 2 bf16 ulps of its value plus one ulp of its head row's largest
// value (RoPE's sin/cos differ by ulps between libms, and where x1*cos and
// x2*sin cancel the error scales with the inputs, not the result), NaN exactly
// where expected. Findings name the slot, its block and its owner.
#include <fmt/format.h>

#include <cmath>
#include <map>

#include "checks.h"

namespace pb {

namespace {

bool same_k(bf16 got, bf16 want, float row_max) {
  const float g = to_float(got), w = to_float(want);
  if (std::isnan(g) || std::isnan(w)) return std::isnan(g) && std::isnan(w);
  return std::abs(g - w) <= std::ldexp(std::abs(w), -7) + std::ldexp(row_max, -8) + 1e-30f;
}

// The largest finite |k| of the head row that element `at` belongs to.
float head_row_max(const std::vector<bf16>& k, size_t at, int head_dim) {
  const size_t first = at - at % head_dim;
  float m = 0;
  for (int i = 0; i < head_dim; ++i) {
    const float v = std::abs(to_float(k[first + i]));
    if (std::isfinite(v)) m = std::max(m, v);
  }
  return m;
}

}  // namespace

void check_kv_write(const Batch& batch, const LayerShape& shape, int layer,
                    const AttnReference& ref, const LayerOutputs& out, CheckResult& r) {
  const int bs = shape.block_size;
  const size_t row = static_cast<size_t>(shape.num_kv_heads) * shape.head_dim;
  std::map<int, std::pair<int, int>> owner;  // block -> (stream, table entry)
  for (int b = 0; b < batch.num_streams; ++b)
    for (size_t e = 0; e < batch.streams[b].blocks.size(); ++e)
      owner[batch.streams[b].blocks[e]] = {b, static_cast<int>(e)};
  std::vector<long long> wrong(batch.num_streams, 0);
  long long wrong_unowned = 0;
  const size_t slots = static_cast<size_t>(shape.num_blocks) * bs;
  for (size_t s = 0; s < slots; ++s) {
    bool ok = true, expect_nan = false, got_nan = false;
    float row_max = 0;
    for (size_t i = 0; i < row && ok; ++i) {
      const size_t at = s * row + i;
      if (i % shape.head_dim == 0) row_max = head_row_max(ref.k_cache, at, shape.head_dim);
      ok = same_k(out.k_cache[at], ref.k_cache[at], row_max) && out.v_cache[at].bits == ref.v_cache[at].bits;
      expect_nan = std::isnan(to_float(ref.k_cache[at]));
      got_nan = std::isnan(to_float(out.k_cache[at]));
    }
    if (ok) continue;
    const int blk = static_cast<int>(s / bs), o = static_cast<int>(s % bs);
    auto it = owner.find(blk);
    std::string whose;
    int stream = -1;
    if (it != owner.end()) {
      stream = it->second.first;
      const int p = it->second.second * bs + o;
      const StreamTruth& st = batch.streams[stream];
      whose = fmt::format("stream {} position {}{}", stream, p,
                          p >= st.kv_len ? " (past its kv_len " + std::to_string(st.kv_len) + ")"
                          : p < st.chunk_start ? " (prior KV)" : "");
      ++wrong[stream];
    } else {
      whose = blk == shape.poison_block ? "the poison block" : "a block no stream owns";
      ++wrong_unowned;
    }
    const char* what = expect_nan ? "expected untouched poison, found a write"
                       : got_nan  ? "expected the roped k/v of this token, found it unwritten (NaN)"
                                  : "expected the roped k/v of this token, found other values";
    r.fail(layer, stream, fmt::format("slot {} (block {}, offset {}; {}): {}", s, blk, o, whose, what));
  }
  for (int b = 0; b < batch.num_streams; ++b) {
    Figure f;
    f.layer = layer;
    f.stream = b;
    f.what = "kv_slots";
    f.mismatched = wrong[b];
    f.elements = batch.streams[b].kv_len;
    f.pass = wrong[b] == 0;
    r.figures.push_back(f);
  }
  if (wrong_unowned) {
    Figure f;
    f.layer = layer;
    f.what = "unowned_slots";
    f.mismatched = wrong_unowned;
    f.pass = false;
    r.figures.push_back(f);
  }
}

}  // namespace pb
