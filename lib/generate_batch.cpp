// generate_batch.cpp: the seeded ground truth of one batch: per-stream
// positions (Qwen2-VL MRoPE rule for image segments), shuffled physical block
// tables and every layer's input tensors. Draw order is fixed and documented
// below; same scenario + seed gives identical bytes on every machine (rng.h).
#include <algorithm>
#include <cstring>
#include <numeric>

#include "batch.h"
#include "rng.h"

namespace pb {

namespace {

// Positions of every cache index 0..kv_len-1 of one stream. Text tokens: T = H
// = W = cur, cur += 1. An image of grid (t, h, w) at token `start`: T = cur +
// ti, H = cur + hi, W = cur + wi, then cur += max(t, h, w) (Qwen2-VL).
void sequence_positions(const StreamSpec& s, bool mrope, std::vector<uint32_t>& t,
                        std::vector<uint32_t>& h, std::vector<uint32_t>& w) {
  const int kv_len = s.chunk_start + s.tokens;
  t.resize(kv_len);
  h.resize(kv_len);
  w.resize(kv_len);
  uint32_t cur = 0;
  size_t next_image = 0;
  for (int p = 0; p < kv_len;) {
    if (mrope && next_image < s.images.size() && s.images[next_image].start == p) {
      const ImageSegment& img = s.images[next_image++];
      int q = p;
      for (int ti = 0; ti < img.grid_t; ++ti)
        for (int hi = 0; hi < img.grid_h; ++hi)
          for (int wi = 0; wi < img.grid_w; ++wi, ++q) {
            if (q >= kv_len) continue;
            t[q] = cur + ti;
            h[q] = cur + hi;
            w[q] = cur + wi;
          }
      cur += std::max({img.grid_t, img.grid_h, img.grid_w});
      p += img.tokens();
      continue;
    }
    t[p] = h[p] = w[p] = cur++;
    ++p;
  }
}

void fill_bf16(Rng& rng, std::vector<bf16>& v, size_t n, float lo, float hi) {
  v.resize(n);
  for (bf16& x : v) x = to_bf16(rng.uniform(lo, hi));
}

struct Fnv {
  uint64_t h = 1469598103934665603ull;
  void add(const void* p, size_t n) {
    const auto* b = static_cast<const uint8_t*>(p);
    for (size_t i = 0; i < n; ++i) h = (h ^ b[i]) * 1099511628211ull;
  }
  template <typename T>
  void vec(const std::vector<T>& v) { add(v.data(), v.size() * sizeof(T)); }
};

}  // namespace

Batch generate_batch(const Scenario& s) {
  const std::vector<StreamSpec> specs = resolve_streams(s);
  validate_batch(s, specs);
  return generate_batch(s, specs, s.seed, s.kv_num_blocks, -1);
}

Batch generate_batch(const Scenario& s, const std::vector<StreamSpec>& specs, uint64_t seed, int kv_num_blocks,
                     int poison_block) {
  const ModelSpec& m = s.model;
  const bool mrope = m.mrope.enabled;
  const int bs = m.block_size;

  Batch batch;
  batch.num_streams = static_cast<int>(specs.size());
  batch.block_size = bs;
  int needed = 0;
  for (const StreamSpec& sp : specs) {
    StreamTruth st;
    st.chunk_start = sp.chunk_start;
    st.count = sp.tokens;
    st.kv_len = sp.chunk_start + sp.tokens;
    st.row_begin = batch.total_tokens;
    std::vector<uint32_t> t, h, w;
    sequence_positions(sp, mrope, t, h, w);
    st.pos_t.assign(t.begin() + st.chunk_start, t.end());
    st.pos_h.assign(h.begin() + st.chunk_start, h.end());
    st.pos_w.assign(w.begin() + st.chunk_start, w.end());
    for (int i = 0; i < st.count; ++i)
      st.has_image = st.has_image || st.pos_h[i] != st.pos_t[i] || st.pos_w[i] != st.pos_t[i];
    batch.total_tokens += st.count;
    batch.chunk_len = std::max(batch.chunk_len, st.count);
    const int nb = (st.kv_len + bs - 1) / bs;
    batch.max_blocks_per_seq = std::max(batch.max_blocks_per_seq, nb);
    needed += nb;
    batch.streams.push_back(std::move(st));
  }

  // Physical blocks: a Fisher-Yates permutation of [0, num_blocks) (draws:
  // uniform_int(0, i) for i = n-1 down to 1). Explicit tables keep their ids;
  // the poison block and the other tables take ids in permutation order.
  batch.num_blocks = static_cast<int>(kv_num_blocks ? kv_num_blocks : default_num_blocks(uint64_t(needed)));
  std::vector<int32_t> perm(batch.num_blocks);
  std::iota(perm.begin(), perm.end(), 0);
  Rng block_rng = Rng::for_purpose(seed, kRngBlocks);
  for (int i = batch.num_blocks - 1; i > 0; --i)
    std::swap(perm[i], perm[block_rng.uniform_int(0, i)]);
  if (std::is_sorted(perm.begin(), perm.end()) && perm.size() >= 2) std::swap(perm[0], perm[1]);
  std::vector<uint8_t> taken(batch.num_blocks, 0);
  for (const StreamSpec& sp : specs)
    for (int32_t id : sp.blocks) taken[id] = 1;
  size_t next = 0;
  auto take = [&]() {
    while (taken[perm[next]]) ++next;
    taken[perm[next]] = 1;
    return perm[next];
  };
  if (poison_block >= 0 && poison_block < batch.num_blocks && !taken[poison_block]) {
    taken[poison_block] = 1;
    batch.poison_block = poison_block;
  } else {
    batch.poison_block = take();
  }
  for (size_t b = 0; b < specs.size(); ++b) {
    StreamTruth& st = batch.streams[b];
    if (!specs[b].blocks.empty()) {
      st.blocks = specs[b].blocks;
      continue;
    }
    const int nb = (st.kv_len + bs - 1) / bs;
    for (int j = 0; j < nb; ++j) st.blocks.push_back(take());
  }

  // Layer tensors, one Rng per layer (purpose kRngTensors * 1000 + layer), drawn
  // in this order. attn: q, k, v (uniform [-1, 1)), then per stream prior_k,
  // prior_v. gdn: x ([-1, 1)), conv_w ([-0.5, 0.5)), g = -(a + b u) with
  // a = -g_range[1], b = g_range[1] - g_range[0] (default -(0.01 + 0.3u)),
  // beta = 0.05 + 0.9u, then per stream with chunk_start > 0: h0 ([-0.5, 0.5)),
  // conv0 ([-1, 1); entries before the sequence start are 0).
  const int T = batch.total_tokens;
  const size_t q_row = static_cast<size_t>(m.num_q_heads) * m.head_dim;
  const size_t kv_row = static_cast<size_t>(m.num_kv_heads) * m.head_dim;
  for (size_t l = 0; l < s.layers.size(); ++l) {
    Rng rng = Rng::for_purpose(seed, kRngTensors * 1000 + l);
    LayerInputs li;
    li.kind = s.layers[l];
    if (li.kind == LayerKind::attn) {
      AttnInputs& a = li.attn;
      fill_bf16(rng, a.q, T * q_row, -1.f, 1.f);
      fill_bf16(rng, a.k, T * kv_row, -1.f, 1.f);
      fill_bf16(rng, a.v, T * kv_row, -1.f, 1.f);
      a.prior_k.resize(batch.num_streams);
      a.prior_v.resize(batch.num_streams);
      for (int b = 0; b < batch.num_streams; ++b) {
        const size_t n = batch.streams[b].chunk_start * kv_row;
        fill_bf16(rng, a.prior_k[b], n, -1.f, 1.f);
        fill_bf16(rng, a.prior_v[b], n, -1.f, 1.f);
      }
    } else {
      const GdnSpec& g = m.gdn;
      GdnInputs& d = li.gdn;
      const size_t C = g.conv_dim(), W = g.d_conv - 1;
      const size_t state = static_cast<size_t>(g.num_v_heads) * g.v_dim * g.k_dim;
      fill_bf16(rng, d.x, T * C, -1.f, 1.f);
      fill_bf16(rng, d.conv_w, C * g.d_conv, -0.5f, 0.5f);
      d.g.resize(static_cast<size_t>(T) * g.num_v_heads);
      const float ga = static_cast<float>(-g.g_range[1]);
      const float gb = static_cast<float>(g.g_range[1] - g.g_range[0]);
      for (float& x : d.g) x = -(ga + gb * rng.uniform01());
      d.beta.resize(d.g.size());
      for (float& x : d.beta) x = 0.05f + 0.9f * rng.uniform01();
      d.h0.assign(batch.num_streams, std::vector<float>(state, 0.f));
      d.conv0.assign(batch.num_streams, std::vector<bf16>(C * W, bf16{0}));
      for (int b = 0; b < batch.num_streams; ++b) {
        const int cs = batch.streams[b].chunk_start;
        if (cs == 0) continue;
        for (float& x : d.h0[b]) x = rng.uniform(-0.5f, 0.5f);
        for (size_t c = 0; c < C; ++c)
          for (size_t j = 0; j < W; ++j)
            if (cs - static_cast<int>(W) + static_cast<int>(j) >= 0)
              d.conv0[b][c * W + j] = to_bf16(rng.uniform(-1.f, 1.f));
      }
    }
    batch.layers.push_back(std::move(li));
  }

  Fnv f;
  for (const StreamTruth& st : batch.streams) {
    const int32_t head[3] = {st.chunk_start, st.count, st.kv_len};
    f.add(head, sizeof head);
    f.vec(st.pos_t);
    f.vec(st.pos_h);
    f.vec(st.pos_w);
    f.vec(st.blocks);
  }
  for (const LayerInputs& li : batch.layers) {
    f.vec(li.attn.q);
    f.vec(li.attn.k);
    f.vec(li.attn.v);
    for (const auto& v : li.attn.prior_k) f.vec(v);
    for (const auto& v : li.attn.prior_v) f.vec(v);
    f.vec(li.gdn.x);
    f.vec(li.gdn.conv_w);
    f.vec(li.gdn.g);
    f.vec(li.gdn.beta);
    for (const auto& v : li.gdn.h0) f.vec(v);
    for (const auto& v : li.gdn.conv0) f.vec(v);
  }
  batch.inputs_checksum = f.h;
  return batch;
}

}  // namespace pb
