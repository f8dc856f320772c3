// reference_test.cpp: the CPU reference against numbers worked out by hand and
// against its own invariants (causality, GQA mapping, stream isolation, chunk
// splitting, the expected paged cache, sampling). Every Batch here is built by
// hand: these tests do not depend on the generator.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "lib/backend.h"
#include "lib/bf16.h"
#include "lib/rng.h"
#include "reference/reference.h"
#include "lib/parallel.h"
#include "reference/reference_internal.h"

namespace pb {
namespace {

// ---------------------------------------------------------------- builders

LayerShape attn_shape(int hq, int hkv, int d, int rot, int block_size, int num_blocks) {
  LayerShape s;
  s.num_q_heads = hq;
  s.num_kv_heads = hkv;
  s.head_dim = d;
  s.rotary_dim = rot;
  s.rope_theta = 10000.0f;
  s.block_size = block_size;
  s.num_blocks = num_blocks;
  s.poison_block = num_blocks - 1;
  return s;
}

struct StreamDef {
  int chunk_start = 0, count = 0;
  std::vector<int32_t> blocks;
};

// Streams packed in order, positions = cache index, tensors zero-filled.
Batch attn_batch(const LayerShape& shape, const std::vector<StreamDef>& defs) {
  Batch b;
  b.num_streams = static_cast<int>(defs.size());
  b.num_blocks = shape.num_blocks;
  b.poison_block = shape.poison_block;
  int row = 0;
  for (const auto& d : defs) {
    StreamTruth st;
    st.chunk_start = d.chunk_start;
    st.count = d.count;
    st.kv_len = d.chunk_start + d.count;
    st.row_begin = row;
    for (int i = 0; i < d.count; ++i) {
      const uint32_t p = static_cast<uint32_t>(d.chunk_start + i);
      st.pos_t.push_back(p);
      st.pos_h.push_back(p);
      st.pos_w.push_back(p);
    }
    st.blocks = d.blocks;
    row += d.count;
    b.chunk_len = std::max(b.chunk_len, d.count);
    b.max_blocks_per_seq = std::max(b.max_blocks_per_seq, static_cast<int>(d.blocks.size()));
    b.streams.push_back(st);
  }
  b.total_tokens = row;
  LayerInputs li;
  li.kind = LayerKind::attn;
  const size_t T = row, D = shape.head_dim;
  li.attn.q.assign(T * shape.num_q_heads * D, bf16{});
  li.attn.k.assign(T * shape.num_kv_heads * D, bf16{});
  li.attn.v.assign(T * shape.num_kv_heads * D, bf16{});
  for (const auto& d : defs) {
    li.attn.prior_k.emplace_back(static_cast<size_t>(d.chunk_start) * shape.num_kv_heads * D, bf16{});
    li.attn.prior_v.emplace_back(static_cast<size_t>(d.chunk_start) * shape.num_kv_heads * D, bf16{});
  }
  b.layers.push_back(li);
  return b;
}

void fill_random(std::vector<bf16>* v, Rng& rng, double scale = 1.0) {
  for (auto& x : *v) x = to_bf16(static_cast<float>(scale * rng.normal()));
}

void randomize_attn(Batch* b, uint64_t seed) {
  Rng rng(seed);
  AttnInputs& in = b->layers[0].attn;
  fill_random(&in.q, rng);
  fill_random(&in.k, rng);
  fill_random(&in.v, rng);
  for (auto& p : in.prior_k) fill_random(&p, rng);
  for (auto& p : in.prior_v) fill_random(&p, rng);
}

bf16 B(double x) { return to_bf16(static_cast<float>(x)); }

// Blocks 0..n-1 in a scrambled order (never the identity).
std::vector<int32_t> scrambled_blocks(int n, int num_blocks, int offset) {
  std::vector<int32_t> v;
  for (int i = 0; i < n; ++i) v.push_back((offset + 7 * i) % (num_blocks - 1));
  return v;
}

double max_abs_diff(const std::vector<float>& a, const std::vector<float>& b) {
  double m = 0;
  for (size_t i = 0; i < a.size(); ++i) m = std::max(m, std::fabs(double(a[i]) - b[i]));
  return m;
}
double max_abs(const std::vector<float>& a) {
  double m = 0;
  for (float x : a) m = std::max(m, std::fabs(double(x)));
  return m;
}

// ------------------------------------------------------------ (a) by hand

// head_dim 2 = rotary_dim: one frequency, inv_freq[0] = theta^0 = 1, so the
// angle is the position. rot(x, p) = (x0 cos p - x1 sin p, x1 cos p + x0 sin p).
struct V2 {
  double x, y;
};
V2 rot(V2 a, double p) { return {a.x * std::cos(p) - a.y * std::sin(p), a.y * std::cos(p) + a.x * std::sin(p)}; }
double dot(V2 a, V2 b) { return a.x * b.x + a.y * b.y; }

TEST(AttentionReference, HandWorkedTwoStreams) {
  const LayerShape shape = attn_shape(1, 1, 2, 2, 4, 4);
  // Stream 0: a first chunk of 2 tokens (cache indices 0, 1), block 2.
  // Stream 1: chunk_start 1 (one cached token), 2 new tokens at indices 1, 2, block 0.
  Batch batch = attn_batch(shape, {{0, 2, {2}}, {1, 2, {0}}});
  AttnInputs& in = batch.layers[0].attn;
  const V2 q[4] = {{1, 0}, {0.5, -1}, {1, 1}, {-0.5, 2}};
  const V2 k[4] = {{1, 0.5}, {-1, 1}, {0.25, 1}, {2, -0.5}};
  const V2 v[4] = {{1, 2}, {-1, 0.5}, {3, -2}, {0.5, 0.25}};
  for (int r = 0; r < 4; ++r) {
    in.q[2 * r] = B(q[r].x), in.q[2 * r + 1] = B(q[r].y);
    in.k[2 * r] = B(k[r].x), in.k[2 * r + 1] = B(k[r].y);
    in.v[2 * r] = B(v[r].x), in.v[2 * r + 1] = B(v[r].y);
  }
  const V2 pk = {0.5, 0.5}, pv = {2, 1};  // stream 1's cached token, already roped
  in.prior_k[1] = {B(pk.x), B(pk.y)};
  in.prior_v[1] = {B(pv.x), B(pv.y)};

  const AttnReference ref = attention_reference(batch, shape, 0, 0, 1);
  const double sc = 1 / std::sqrt(2.0);
  V2 want[4];
  // Stream 0, token 0 (p 0): only key 0 -> v0.
  want[0] = v[0];
  // Stream 0, token 1 (p 1): keys rot(k0,0), rot(k1,1).
  {
    const V2 Q = rot(q[1], 1);
    const double s0 = dot(Q, rot(k[0], 0)) * sc, s1 = dot(Q, rot(k[1], 1)) * sc;
    const double m = std::max(s0, s1), e0 = std::exp(s0 - m), e1 = std::exp(s1 - m), l = e0 + e1;
    want[1] = {(e0 * v[0].x + e1 * v[1].x) / l, (e0 * v[0].y + e1 * v[1].y) / l};
  }
  // Stream 1, token 0 (row 2, p 1): keys pk (as cached), rot(k2,1).
  {
    const V2 Q = rot(q[2], 1);
    const double s0 = dot(Q, pk) * sc, s1 = dot(Q, rot(k[2], 1)) * sc;
    const double m = std::max(s0, s1), e0 = std::exp(s0 - m), e1 = std::exp(s1 - m), l = e0 + e1;
    want[2] = {(e0 * pv.x + e1 * v[2].x) / l, (e0 * pv.y + e1 * v[2].y) / l};
  }
  // Stream 1, token 1 (row 3, p 2): keys pk, rot(k2,1), rot(k3,2).
  {
    const V2 Q = rot(q[3], 2);
    const double s0 = dot(Q, pk) * sc, s1 = dot(Q, rot(k[2], 1)) * sc, s2 = dot(Q, rot(k[3], 2)) * sc;
    const double m = std::max({s0, s1, s2});
    const double e0 = std::exp(s0 - m), e1 = std::exp(s1 - m), e2 = std::exp(s2 - m), l = e0 + e1 + e2;
    want[3] = {(e0 * pv.x + e1 * v[2].x + e2 * v[3].x) / l, (e0 * pv.y + e1 * v[2].y + e2 * v[3].y) / l};
  }
  for (int r = 0; r < 4; ++r) {
    SCOPED_TRACE("row " + std::to_string(r));
    EXPECT_NEAR(ref.out_hp[2 * r], want[r].x, 1e-6);
    EXPECT_NEAR(ref.out_hp[2 * r + 1], want[r].y, 1e-6);
    EXPECT_NEAR(ref.out_lp[2 * r], want[r].x, 2e-2 * (1 + std::fabs(want[r].x)));
    EXPECT_NEAR(ref.out_lp[2 * r + 1], want[r].y, 2e-2 * (1 + std::fabs(want[r].y)));
    EXPECT_EQ(ref.computed[r], 1);
  }
  EXPECT_FALSE(ref.sampled);
}

// ------------------------------------------------------------- (b) RoPE

TEST(RopeReference, SectionTables) {
  LayerShape s = attn_shape(1, 1, 8, 8, 4, 2);
  for (int i = 0; i < 4; ++i) EXPECT_EQ(rope_section(s, i), 0) << "no MRoPE: always T";
  s.mrope = true;
  s.mrope_sections[0] = 2, s.mrope_sections[1] = 1, s.mrope_sections[2] = 1;
  const std::vector<int> sec211 = {0, 0, 1, 2};
  const std::vector<int> int211 = {0, 1, 2, 0};
  s.rotary_dim = s.head_dim = 8;
  for (int i = 0; i < 4; ++i) EXPECT_EQ(rope_section(s, i), sec211[i]) << "sectioned [2,1,1] i=" << i;
  s.mrope_interleaved = true;
  for (int i = 0; i < 4; ++i) EXPECT_EQ(rope_section(s, i), int211[i]) << "interleaved [2,1,1] i=" << i;

  s.mrope_interleaved = false;
  s.mrope_sections[0] = 4, s.mrope_sections[1] = 6, s.mrope_sections[2] = 6;
  const std::vector<int> sec466 = {0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 2, 2, 2, 2, 2, 2};
  // interleaved: i%3==1 && i<18 -> H, i%3==2 && i<18 -> W, else T.
  const std::vector<int> int466 = {0, 1, 2, 0, 1, 2, 0, 1, 2, 0, 1, 2, 0, 1, 2, 0};
  for (int i = 0; i < 16; ++i) EXPECT_EQ(rope_section(s, i), sec466[i]) << "sectioned [4,6,6] i=" << i;
  s.mrope_interleaved = true;
  for (int i = 0; i < 16; ++i) EXPECT_EQ(rope_section(s, i), int466[i]) << "interleaved [4,6,6] i=" << i;
  // Qwen3-VL [24,20,20]: the last H/W frequencies are 58 and 59, then T.
  s.mrope_sections[0] = 24, s.mrope_sections[1] = 20, s.mrope_sections[2] = 20;
  EXPECT_EQ(rope_section(s, 58), 1);
  EXPECT_EQ(rope_section(s, 59), 2);
  EXPECT_EQ(rope_section(s, 61), 0);
  EXPECT_EQ(rope_section(s, 62), 0);
}

TEST(RopeReference, PositionZeroIsIdentity) {
  const LayerShape shape = attn_shape(1, 1, 8, 8, 4, 3);
  Batch batch = attn_batch(shape, {{0, 1, {1}}});
  randomize_attn(&batch, 11);
  const auto& in = batch.layers[0].attn;
  const AttnReference ref = attention_reference(batch, shape, 0, 0, 1);
  const size_t slot = 1 * 4 + 0;  // block 1, offset 0
  for (int d = 0; d < 8; ++d) {
    EXPECT_EQ(ref.k_cache[slot * 8 + d].bits, in.k[d].bits) << d;
    EXPECT_EQ(ref.v_cache[slot * 8 + d].bits, in.v[d].bits) << d;
  }
  // hp and lp helpers at position 0: exactly the input.
  const auto f = detail::rope_freqs(shape);
  const auto t = detail::rope_table_one(f, 0, 0, 0);
  float hp[8], lp[8];
  detail::rope_head_hp(t.cos_hp.data(), t.sin_hp.data(), f.half, 8, in.q.data(), hp);
  detail::rope_head_lp(t.cos_lp.data(), t.sin_lp.data(), f.half, 8, in.q.data(), lp);
  for (int d = 0; d < 8; ++d) {
    EXPECT_EQ(hp[d], to_float(in.q[d]));
    EXPECT_EQ(lp[d], to_float(in.q[d]));
  }
  // A single token attends only itself: the output is its v.
  for (int d = 0; d < 8; ++d) EXPECT_NEAR(ref.out_hp[d], to_float(in.v[d]), 1e-6);
}

TEST(RopeReference, PartialRotaryLeavesTailUntouched) {
  const LayerShape shape = attn_shape(1, 1, 8, 4, 4, 4);  // rotary over dims 0..3 only
  Batch batch = attn_batch(shape, {{5, 1, {0, 2}}});      // cache index 5: block 2, offset 1
  randomize_attn(&batch, 12);
  const auto& in = batch.layers[0].attn;
  const AttnReference ref = attention_reference(batch, shape, 0, 0, 1);
  const size_t slot = 2 * 4 + 1;
  int changed = 0;
  for (int d = 0; d < 8; ++d) {
    if (d >= 4) {
      EXPECT_EQ(ref.k_cache[slot * 8 + d].bits, in.k[d].bits) << "tail dim " << d;
    } else {
      changed += ref.k_cache[slot * 8 + d].bits != in.k[d].bits;
    }
  }
  EXPECT_GE(changed, 3) << "the rotary dims must rotate at position 5";
  const auto f = detail::rope_freqs(shape);
  const auto t = detail::rope_table_one(f, 5, 5, 5);
  float hp[8];
  detail::rope_head_hp(t.cos_hp.data(), t.sin_hp.data(), f.half, 8, in.k.data(), hp);
  for (int d = 4; d < 8; ++d) EXPECT_EQ(hp[d], to_float(in.k[d]));
}

TEST(RopeReference, KnownAngles) {
  // head_dim 4, theta 10000: inv_freq = {1, 10000^(-1/2) = 0.01}; at position 100
  // the angles are 100 and 1. x = (1, 1, 0, 0) -> (cos 100, cos 1, sin 100, sin 1).
  const LayerShape shape = attn_shape(1, 1, 4, 4, 128, 2);
  const auto f = detail::rope_freqs(shape);
  ASSERT_EQ(f.half, 2);
  EXPECT_DOUBLE_EQ(f.inv_hp[0], 1.0);
  EXPECT_NEAR(f.inv_hp[1], 0.01, 1e-17);
  EXPECT_EQ(f.inv_lp[1], 0.01f);
  const bf16 x[4] = {B(1), B(1), B(0), B(0)};
  const auto t = detail::rope_table_one(f, 100, 100, 100);
  float hp[4], lp[4];
  detail::rope_head_hp(t.cos_hp.data(), t.sin_hp.data(), 2, 4, x, hp);
  detail::rope_head_lp(t.cos_lp.data(), t.sin_lp.data(), 2, 4, x, lp);
  const double want[4] = {std::cos(100.0), std::cos(1.0), std::sin(100.0), std::sin(1.0)};
  for (int d = 0; d < 4; ++d) {
    EXPECT_NEAR(hp[d], want[d], 1e-7) << d;
    EXPECT_NEAR(lp[d], want[d], std::fabs(want[d]) * (1.0 / 256) + 1e-5) << d;  // one bf16 ulp
    EXPECT_EQ(lp[d], round_bf16(lp[d])) << "lp is stored as bf16";
  }
  // Through the public API: the cache holds the lp rotation of the token at index 100.
  Batch batch = attn_batch(shape, {{100, 1, {0}}});
  batch.layers[0].attn.k = {x[0], x[1], x[2], x[3]};
  const AttnReference ref = attention_reference(batch, shape, 0, 0, 1);
  for (int d = 0; d < 4; ++d) EXPECT_EQ(to_float(ref.k_cache[100 * 4 + d]), lp[d]) << d;
}

// Under MRoPE each frequency takes its angle from T, H or W: with T = 0 the T
// frequencies do not rotate, H and W rotate by 3 and 11 times inv_freq.
void check_mrope(bool interleaved, const std::vector<int>& expect_sel) {
  LayerShape shape = attn_shape(1, 1, 32, 32, 4, 3);
  shape.mrope = true;
  shape.mrope_interleaved = interleaved;
  shape.mrope_sections[0] = 4, shape.mrope_sections[1] = 6, shape.mrope_sections[2] = 6;
  Batch batch = attn_batch(shape, {{0, 1, {0}}});
  StreamTruth& st = batch.streams[0];
  st.has_image = true;
  st.pos_t = {0};
  st.pos_h = {3};
  st.pos_w = {11};
  auto& k = batch.layers[0].attn.k;
  for (int i = 0; i < 16; ++i) k[i] = B(1), k[i + 16] = B(0);  // y[i] = cos, y[i+16] = sin
  const AttnReference ref = attention_reference(batch, shape, 0, 0, 1);
  const double pos[3] = {0, 3, 11};
  for (int i = 0; i < 16; ++i) {
    SCOPED_TRACE("frequency " + std::to_string(i));
    const double inv = std::pow(10000.0, -2.0 * i / 32);
    const double a = pos[expect_sel[i]] * inv;
    const double c = to_float(ref.k_cache[i]), s = to_float(ref.k_cache[i + 16]);
    EXPECT_NEAR(c, std::cos(a), 1.0 / 256 + 1e-6);
    EXPECT_NEAR(s, std::sin(a), std::fabs(std::sin(a)) / 128 + 1e-7);
    if (expect_sel[i] != 0) {
      EXPECT_NE(s, 0.0) << "an H/W frequency must rotate";
    } else {
      EXPECT_EQ(s, 0.0) << "a T frequency must not rotate (T = 0)";
    }
    // The other H/W position would give a visibly different sine.
    const double other = pos[expect_sel[i] == 1 ? 2 : 1] * inv;
    if (expect_sel[i] != 0) {
      EXPECT_GT(std::fabs(std::sin(other) - s), std::fabs(s) / 32);
    }
  }
}

TEST(RopeReference, MropeSectionedPicksHWPositions) {
  check_mrope(false, {0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 2, 2, 2, 2, 2, 2});
}
TEST(RopeReference, MropeInterleavedPicksHWPositions) {
  check_mrope(true, {0, 1, 2, 0, 1, 2, 0, 1, 2, 0, 1, 2, 0, 1, 2, 0});
}

// ------------------------------------------------------------- (c) GQA

TEST(AttentionReference, GqaHeadMapping) {
  const LayerShape shape = attn_shape(4, 2, 8, 8, 4, 8);
  Batch batch = attn_batch(shape, {{3, 5, {4, 1}}});
  randomize_attn(&batch, 21);
  const AttnReference ref = attention_reference(batch, shape, 0, 0, 1);

  // The same keys duplicated per q head (num_kv_heads = num_q_heads): q head h
  // must then see old kv head h / 2, so the outputs must agree.
  const LayerShape wide = attn_shape(4, 4, 8, 8, 4, 8);
  Batch dup = attn_batch(wide, {{3, 5, {4, 1}}});
  const AttnInputs& a = batch.layers[0].attn;
  AttnInputs& w = dup.layers[0].attn;
  w.q = a.q;
  auto widen = [](const std::vector<bf16>& src, std::vector<bf16>* dst, int rows) {
    for (int r = 0; r < rows; ++r)
      for (int h = 0; h < 4; ++h)
        for (int d = 0; d < 8; ++d) (*dst)[(r * 4 + h) * 8 + d] = src[(r * 2 + h / 2) * 8 + d];
  };
  widen(a.k, &w.k, 5);
  widen(a.v, &w.v, 5);
  widen(a.prior_k[0], &w.prior_k[0], 3);
  widen(a.prior_v[0], &w.prior_v[0], 3);
  const AttnReference ref2 = attention_reference(dup, wide, 0, 0, 1);
  EXPECT_LT(max_abs_diff(ref.out_hp, ref2.out_hp), 1e-6);
  EXPECT_LT(max_abs_diff(ref.out_lp, ref2.out_lp), 1e-6);

  // Constant v per kv head: q heads 0,1 read 1.0, q heads 2,3 read -2.0.
  AttnInputs& c = batch.layers[0].attn;
  for (int r = 0; r < 5; ++r)
    for (int d = 0; d < 8; ++d) c.v[(r * 2 + 0) * 8 + d] = B(1), c.v[(r * 2 + 1) * 8 + d] = B(-2);
  for (int p = 0; p < 3; ++p)
    for (int d = 0; d < 8; ++d) c.prior_v[0][(p * 2 + 0) * 8 + d] = B(1), c.prior_v[0][(p * 2 + 1) * 8 + d] = B(-2);
  const AttnReference ref3 = attention_reference(batch, shape, 0, 0, 1);
  for (int r = 0; r < 5; ++r)
    for (int h = 0; h < 4; ++h)
      EXPECT_NEAR(ref3.out_hp[(r * 4 + h) * 8 + 3], h < 2 ? 1.0 : -2.0, 1e-6) << "row " << r << " head " << h;
}

// ---------------------------------------------------------- (d) causality

TEST(AttentionReference, CausalKeysAfterPDoNotMatter) {
  const LayerShape shape = attn_shape(2, 1, 8, 8, 4, 6);
  Batch batch = attn_batch(shape, {{2, 6, {3, 0}}});
  randomize_attn(&batch, 31);
  const AttnReference base = attention_reference(batch, shape, 0, 0, 1);
  for (int j = 0; j < 6; ++j) {
    Batch changed = batch;
    for (int d = 0; d < 8; ++d) {
      changed.layers[0].attn.k[j * 8 + d] = B(5.0 + d);
      changed.layers[0].attn.v[j * 8 + d] = B(-7.0 - d);
    }
    const AttnReference ref = attention_reference(changed, shape, 0, 0, 1);
    for (int i = 0; i < 6; ++i) {
      bool same = true;
      for (int e = 0; e < 2 * 8; ++e) {
        same &= ref.out_hp[i * 16 + e] == base.out_hp[i * 16 + e];
        same &= ref.out_lp[i * 16 + e] == base.out_lp[i * 16 + e];
      }
      if (i < j) {
        EXPECT_TRUE(same) << "token " << i << " saw the key of token " << j;
      } else {
        EXPECT_FALSE(same) << "token " << i << " did not see the key of token " << j;
      }
    }
  }
}

// ------------------------------------------------------ (e) lp vs hp drift

TEST(AttentionReference, LowPrecisionDriftIsBf16Sized) {
  const LayerShape shape = attn_shape(4, 2, 64, 64, 16, 16);
  Batch batch = attn_batch(shape, {{0, 70, scrambled_blocks(5, 16, 1)}, {33, 50, scrambled_blocks(6, 16, 9)}});
  randomize_attn(&batch, 41);
  const AttnReference ref = attention_reference(batch, shape, 0, 0, 1);
  double num = 0, den = 0;
  for (size_t i = 0; i < ref.out_hp.size(); ++i) {
    ASSERT_TRUE(std::isfinite(ref.out_hp[i]) && std::isfinite(ref.out_lp[i])) << i;
    num += (double(ref.out_lp[i]) - ref.out_hp[i]) * (double(ref.out_lp[i]) - ref.out_hp[i]);
    den += double(ref.out_hp[i]) * ref.out_hp[i];
  }
  const double rel_max = max_abs_diff(ref.out_lp, ref.out_hp) / max_abs(ref.out_hp);
  const double rel_l2 = std::sqrt(num / den);
  EXPECT_GT(rel_max, 0.0);
  EXPECT_LT(rel_max, 1e-2);
  EXPECT_GT(rel_l2, 1e-4) << "bf16 rounding must show";
  EXPECT_LT(rel_l2, 1e-2);
  for (float x : ref.out_lp) EXPECT_EQ(x, round_bf16(x));
}

// lp rounds the unnormalised P to bf16 before P*V and divides by the unrounded
// float sum: with one-hot values, out = (P0, bf16(P1)) / (P0 + P1). The RoPE
// position of the token is 0 (positions are ground truth, apart from the cache
// index), so nothing rotates: s0 = 0 (prior key 0), s1 = k1 / sqrt(2) ~ ln 0.3.
TEST(AttentionReference, LowPrecisionRoundsPBeforePV) {
  const LayerShape shape = attn_shape(1, 1, 2, 2, 4, 2);
  Batch batch = attn_batch(shape, {{1, 1, {0}}});
  batch.streams[0].pos_t = batch.streams[0].pos_h = batch.streams[0].pos_w = {0};
  AttnInputs& in = batch.layers[0].attn;
  const float k1 = round_bf16(static_cast<float>(std::sqrt(2.0) * std::log(0.3)));
  in.q = {B(1), B(0)};
  in.k = {to_bf16(k1), B(0)};
  in.v = {B(0), B(1)};
  in.prior_k[0] = {B(0), B(0)};
  in.prior_v[0] = {B(1), B(0)};
  const AttnReference ref = attention_reference(batch, shape, 0, 0, 1);

  const float p1 = std::exp(k1 * (1.0f / std::sqrt(2.0f)));  // P0 = exp(0) = 1
  const float l = 1.0f + p1;
  const float want1 = round_bf16(round_bf16(p1) / l), unrounded_p = round_bf16(p1 / l);
  ASSERT_NE(want1, unrounded_p) << "the case must tell P rounding apart";
  EXPECT_EQ(ref.out_lp[0], round_bf16(1.0f / l));
  EXPECT_EQ(ref.out_lp[1], want1);
  const double p1d = std::exp(double(k1) / std::sqrt(2.0));
  EXPECT_NEAR(ref.out_hp[0], 1 / (1 + p1d), 1e-7);
  EXPECT_NEAR(ref.out_hp[1], p1d / (1 + p1d), 1e-7);
}

TEST(AttentionReference, SoftmaxExpIsDoubleAccurate) {
  // exp_scores_hp is the hp softmax's exp: 1 ulp-level against std::exp.
  std::vector<float> s;
  for (int i = 0; i <= 20000; ++i) s.push_back(-0.0375f * i);  // down to -750
  s.push_back(std::numeric_limits<float>::quiet_NaN());
  s.push_back(-std::numeric_limits<float>::infinity());
  std::vector<double> e(s.size());
  const double scale = 0.7, m = -1.25;
  const double sum = detail::exp_scores_hp(s.data(), static_cast<int>(s.size()), scale, m, e.data());
  double want_sum = 0, worst = 0;
  for (size_t j = 0; j + 2 < s.size(); ++j) {
    const double x = double(s[j]) * scale - m;
    const double want = std::exp(x);
    want_sum += want;
    if (x > -708) {
      worst = std::max(worst, std::fabs(e[j] - want) / want);
    } else {
      EXPECT_LT(e[j], 1e-300);
    }
  }
  EXPECT_LT(worst, 1e-15);
  EXPECT_TRUE(std::isnan(e[s.size() - 2]));
  EXPECT_LT(e[s.size() - 1], 1e-300);
  EXPECT_TRUE(std::isnan(sum));
  const double sum_finite = detail::exp_scores_hp(s.data(), static_cast<int>(s.size()) - 2, scale, m, e.data());
  EXPECT_NEAR(sum_finite, want_sum, 1e-13 * want_sum);
  const float zero = 0;
  double one = 0;
  detail::exp_scores_hp(&zero, 1, 1.0, 0.0, &one);
  EXPECT_EQ(one, 1.0);
}

// ------------------------------------------------------ (g) expected cache

TEST(AttentionReference, ExpectedCacheSlots) {
  const int bs = 4, nb = 9, D = 4, Hkv = 2;
  LayerShape shape = attn_shape(2, Hkv, D, 4, bs, nb);
  // Stream 0: 2 cached + 5 new (indices 0..6) in blocks 5, 2. Stream 1: 3 new in block 7.
  Batch batch = attn_batch(shape, {{2, 5, {5, 2}}, {0, 3, {7}}});
  randomize_attn(&batch, 51);
  const AttnInputs& in = batch.layers[0].attn;
  const AttnReference ref = attention_reference(batch, shape, 0, 0, 1);
  const size_t slot_elems = Hkv * D;
  ASSERT_EQ(ref.k_cache.size(), size_t(nb) * bs * slot_elems);
  ASSERT_EQ(ref.v_cache.size(), ref.k_cache.size());
  std::vector<int> kind(nb * bs, 0);  // 0 untouched, 1 prior, 2 new
  const auto freqs = detail::rope_freqs(shape);
  for (int b = 0; b < 2; ++b) {
    const StreamTruth& st = batch.streams[b];
    for (int p = 0; p < st.kv_len; ++p) {
      const int slot = st.blocks[p / bs] * bs + p % bs;
      for (int h = 0; h < Hkv; ++h) {
        const bf16* kc = &ref.k_cache[slot * slot_elems + h * D];
        const bf16* vc = &ref.v_cache[slot * slot_elems + h * D];
        if (p < st.chunk_start) {
          kind[slot] = 1;
          for (int d = 0; d < D; ++d) {
            EXPECT_EQ(kc[d].bits, in.prior_k[b][(p * Hkv + h) * D + d].bits);
            EXPECT_EQ(vc[d].bits, in.prior_v[b][(p * Hkv + h) * D + d].bits);
          }
        } else {
          kind[slot] = 2;
          const int row = st.row_begin + p - st.chunk_start;
          const auto t = detail::rope_table_one(freqs, p, p, p);
          float roped[D];
          detail::rope_head_lp(t.cos_lp.data(), t.sin_lp.data(), freqs.half, D,
                               &in.k[(row * Hkv + h) * D], roped);
          for (int d = 0; d < D; ++d) {
            EXPECT_EQ(kc[d].bits, to_bf16(roped[d]).bits) << "stream " << b << " p " << p;
            EXPECT_EQ(vc[d].bits, in.v[(row * Hkv + h) * D + d].bits) << "stream " << b << " p " << p;
          }
        }
      }
    }
  }
  int untouched = 0;
  for (int slot = 0; slot < nb * bs; ++slot) {
    if (kind[slot] != 0) continue;
    ++untouched;
    for (size_t e = 0; e < slot_elems; ++e) {
      EXPECT_TRUE(std::isnan(to_float(ref.k_cache[slot * slot_elems + e]))) << "slot " << slot;
      EXPECT_TRUE(std::isnan(to_float(ref.v_cache[slot * slot_elems + e]))) << "slot " << slot;
    }
  }
  EXPECT_EQ(untouched, nb * bs - 10);
}

// ------------------------------------------------------------ (h) sampled

TEST(AttentionReference, SampledRowsIncludeFirstAndLast) {
  const LayerShape shape = attn_shape(2, 1, 16, 16, 16, 12);
  Batch batch = attn_batch(shape, {{0, 50, scrambled_blocks(4, 12, 0)}, {7, 30, scrambled_blocks(3, 12, 5)}, {2, 3, {10}}});
  randomize_attn(&batch, 61);
  const AttnReference full = attention_reference(batch, shape, 0, 0, 5);
  const AttnReference smp = attention_reference(batch, shape, 0, 5, 5);
  EXPECT_TRUE(smp.sampled);
  const int Hq = 2, D = 16;
  for (int b = 0; b < 3; ++b) {
    const StreamTruth& st = batch.streams[b];
    for (int h = 0; h < Hq; ++h) {
      int n = 0;
      for (int i = 0; i < st.count; ++i) {
        const size_t r = st.row_begin + i;
        const bool c = smp.computed[r * Hq + h];
        n += c;
        for (int d = 0; d < D; ++d) {
          const size_t e = (r * Hq + h) * D + d;
          if (c) {
            EXPECT_NEAR(smp.out_hp[e], full.out_hp[e], 1e-6);
            EXPECT_NEAR(smp.out_lp[e], full.out_lp[e], std::fabs(full.out_lp[e]) / 128 + 1e-6);
          } else {
            EXPECT_TRUE(std::isnan(smp.out_hp[e]) && std::isnan(smp.out_lp[e]));
          }
        }
      }
      EXPECT_EQ(n, std::min(5, st.count)) << "stream " << b << " head " << h;
      EXPECT_TRUE(smp.computed[size_t(st.row_begin) * Hq + h]) << "first row";
      EXPECT_TRUE(smp.computed[size_t(st.row_begin + st.count - 1) * Hq + h]) << "last row";
    }
  }
  // Same seed, same rows; the full reference computes everything.
  const AttnReference again = attention_reference(batch, shape, 0, 5, 5);
  EXPECT_EQ(again.computed, smp.computed);
  for (auto c : full.computed) EXPECT_EQ(c, 1);
  // The cache does not depend on sampling.
  for (size_t e = 0; e < full.k_cache.size(); ++e) EXPECT_EQ(full.k_cache[e].bits, smp.k_cache[e].bits);
}

TEST(AttentionReference, ThreadCountDoesNotChangeResults) {
  const LayerShape shape = attn_shape(4, 2, 64, 64, 16, 80);
  Batch batch = attn_batch(shape, {{0, 600, scrambled_blocks(38, 80, 0)}, {100, 300, scrambled_blocks(25, 80, 3)}});
  randomize_attn(&batch, 71);
  const char* old = std::getenv("PB_THREADS");
  const std::string saved = old ? old : "";
  setenv("PB_THREADS", "1", 1);
  const AttnReference one = attention_reference(batch, shape, 0, 0, 1);
  setenv("PB_THREADS", "3", 1);
  const AttnReference three = attention_reference(batch, shape, 0, 0, 1);
  if (old) setenv("PB_THREADS", saved.c_str(), 1);
  else unsetenv("PB_THREADS");
  EXPECT_EQ(std::memcmp(one.out_hp.data(), three.out_hp.data(), one.out_hp.size() * 4), 0);
  EXPECT_EQ(std::memcmp(one.out_lp.data(), three.out_lp.data(), one.out_lp.size() * 4), 0);
}

// ------------------------------------------------------------------ (f) GDN

LayerShape gdn_shape(int hk, int hv, int dk, int dv, int dc) {
  LayerShape s;
  s.num_k_heads = hk;
  s.num_v_heads = hv;
  s.k_dim = dk;
  s.v_dim = dv;
  s.d_conv = dc;
  return s;
}
int conv_dim(const LayerShape& s) { return 2 * s.num_k_heads * s.k_dim + s.num_v_heads * s.v_dim; }

Batch gdn_batch(const LayerShape& shape, const std::vector<StreamDef>& defs) {
  Batch b;
  b.num_streams = static_cast<int>(defs.size());
  int row = 0;
  for (const auto& d : defs) {
    StreamTruth st;
    st.chunk_start = d.chunk_start;
    st.count = d.count;
    st.kv_len = d.chunk_start + d.count;
    st.row_begin = row;
    for (int i = 0; i < d.count; ++i) st.pos_t.push_back(d.chunk_start + i);
    st.pos_h = st.pos_w = st.pos_t;
    row += d.count;
    b.streams.push_back(st);
  }
  b.total_tokens = row;
  LayerInputs li;
  li.kind = LayerKind::gdn;
  const size_t C = conv_dim(shape), Hv = shape.num_v_heads;
  li.gdn.x.assign(row * C, bf16{});
  li.gdn.conv_w.assign(C * shape.d_conv, bf16{});
  li.gdn.g.assign(row * Hv, 0.0f);
  li.gdn.beta.assign(row * Hv, 0.5f);
  for (size_t i = 0; i < defs.size(); ++i) {
    li.gdn.h0.emplace_back(Hv * shape.v_dim * shape.k_dim, 0.0f);
    li.gdn.conv0.emplace_back(C * (shape.d_conv - 1), bf16{});
  }
  b.layers.push_back(li);
  return b;
}

void randomize_gdn(Batch* b, uint64_t seed) {
  Rng rng(seed);
  GdnInputs& in = b->layers[0].gdn;
  fill_random(&in.x, rng);
  fill_random(&in.conv_w, rng, 0.5);
  for (auto& g : in.g) g = -rng.uniform(0.0f, 0.5f);
  for (auto& x : in.beta) x = rng.uniform(0.05f, 0.95f);
  for (size_t s = 0; s < in.h0.size(); ++s) {
    if (b->streams[s].chunk_start == 0) continue;  // a first chunk starts from zero
    for (auto& h : in.h0[s]) h = static_cast<float>(0.3 * rng.normal());
    fill_random(&in.conv0[s], rng);
  }
}

double silu(double u) { return u / (1 + std::exp(-u)); }

TEST(GdnReference, HandWorkedSingleToken) {
  // d_conv 2, one k head and one v head of dim 2: channels q0 q1 k0 k1 v0 v1.
  const LayerShape shape = gdn_shape(1, 1, 2, 2, 2);
  Batch batch = gdn_batch(shape, {{4, 1, {}}});
  GdnInputs& in = batch.layers[0].gdn;
  const double x[6] = {1, -0.5, 0.25, 2, -1, 0.75};
  const double xprev[6] = {0.5, 1, -1, 0.5, 2, -0.25};  // conv0, the one previous input
  const double w0[6] = {0.5, -0.25, 1, 0.125, -0.5, 1};  // conv_w[c][0] (older tap)
  const double w1[6] = {1, 0.75, -0.5, 1, 0.25, 0.5};    // conv_w[c][1] (current tap)
  for (int c = 0; c < 6; ++c) {
    in.x[c] = B(x[c]);
    in.conv0[0][c] = B(xprev[c]);
    in.conv_w[c * 2] = B(w0[c]);
    in.conv_w[c * 2 + 1] = B(w1[c]);
  }
  const double S0[2][2] = {{0.5, -0.25}, {0.125, 1}};  // [v][k]
  in.h0[0] = {0.5f, -0.25f, 0.125f, 1.0f};
  const double g = -0.25, beta = 0.75;
  in.g[0] = static_cast<float>(g);
  in.beta[0] = static_cast<float>(beta);

  double y[6];
  for (int c = 0; c < 6; ++c) y[c] = silu(w0[c] * xprev[c] + w1[c] * x[c]);
  const double qn = std::sqrt(y[0] * y[0] + y[1] * y[1] + 1e-6);
  const double kn = std::sqrt(y[2] * y[2] + y[3] * y[3] + 1e-6);
  const double q[2] = {y[0] / qn, y[1] / qn}, k[2] = {y[2] / kn, y[3] / kn}, v[2] = {y[4], y[5]};
  const double a = std::exp(g);
  double S[2][2], delta[2], o[2];
  for (int i = 0; i < 2; ++i)
    for (int j = 0; j < 2; ++j) S[i][j] = a * S0[i][j];
  for (int i = 0; i < 2; ++i) delta[i] = beta * (v[i] - (S[i][0] * k[0] + S[i][1] * k[1]));
  for (int i = 0; i < 2; ++i)
    for (int j = 0; j < 2; ++j) S[i][j] += delta[i] * k[j];
  for (int i = 0; i < 2; ++i) o[i] = (S[i][0] * q[0] + S[i][1] * q[1]) / std::sqrt(2.0);

  // The same chain at the kernels' precision: float conv and SiLU, the conv
  // output rounded to bf16, norm and recurrence in float, o rounded to bf16.
  float yl[6];
  for (int c = 0; c < 6; ++c) {
    float u = 0;
    u += float(w0[c]) * float(xprev[c]);
    u += float(w1[c]) * float(x[c]);
    yl[c] = round_bf16(u / (1.0f + std::exp(-u)));
  }
  const float qnl = 1.0f / std::sqrt(yl[0] * yl[0] + yl[1] * yl[1] + 1e-6f);
  const float knl = 1.0f / std::sqrt(yl[2] * yl[2] + yl[3] * yl[3] + 1e-6f);
  const float ql[2] = {yl[0] * qnl, yl[1] * qnl}, kl[2] = {yl[2] * knl, yl[3] * knl};
  const float al = std::exp(float(g));
  float Sl[2][2], ol[2];
  for (int i = 0; i < 2; ++i) {
    const float sk = float(S0[i][0]) * kl[0] + float(S0[i][1]) * kl[1];
    const float dl = float(beta) * (yl[4 + i] - al * sk);
    for (int j = 0; j < 2; ++j) Sl[i][j] = al * float(S0[i][j]) + dl * kl[j];
    ol[i] = round_bf16((Sl[i][0] * ql[0] + Sl[i][1] * ql[1]) / std::sqrt(2.0f));
  }

  const GdnReference ref = gdn_reference(batch, shape, 0);
  for (int i = 0; i < 2; ++i) {
    EXPECT_NEAR(ref.out_lp[i], ol[i], std::fabs(ol[i]) / 256) << "within one bf16 ulp";
    for (int j = 0; j < 2; ++j) EXPECT_NEAR(ref.h_lp[0][i * 2 + j], Sl[i][j], 1e-6);
  }
  std::vector<double> out64, h64;
  detail::gdn_stream_hp(batch, shape, 0, 0, {}, &out64, &h64);
  for (int i = 0; i < 2; ++i) {
    EXPECT_NEAR(out64[i], o[i], 1e-12);
    EXPECT_NEAR(ref.out_hp[i], o[i], 1e-6);
    EXPECT_NEAR(ref.out_lp[i], o[i], 2e-2 * (std::fabs(o[i]) + 0.1));
    for (int j = 0; j < 2; ++j) {
      EXPECT_NEAR(h64[i * 2 + j], S[i][j], 1e-12);
      EXPECT_NEAR(ref.h_hp[0][i * 2 + j], S[i][j], 1e-6);
      EXPECT_NEAR(ref.h_lp[0][i * 2 + j], S[i][j], 2e-2 * (std::fabs(S[i][j]) + 0.1));
    }
  }
  // conv_state (d_conv - 1 = 1 input): the token's own x.
  for (int c = 0; c < 6; ++c) EXPECT_EQ(ref.conv_state[c].bits, in.x[c].bits);
}

TEST(GdnReference, ConvStateCarriesConv0ForShortChunks) {
  const LayerShape shape = gdn_shape(1, 1, 2, 2, 4);  // conv_state holds 3 inputs
  Batch batch = gdn_batch(shape, {{5, 1, {}}, {2, 5, {}}});
  randomize_gdn(&batch, 81);
  const GdnInputs& in = batch.layers[0].gdn;
  const GdnReference ref = gdn_reference(batch, shape, 0);
  const int C = 6;
  for (int c = 0; c < C; ++c) {
    // Stream 0, one token: conv0[1], conv0[2], x[0].
    EXPECT_EQ(ref.conv_state[c * 3 + 0].bits, in.conv0[0][c * 3 + 1].bits);
    EXPECT_EQ(ref.conv_state[c * 3 + 1].bits, in.conv0[0][c * 3 + 2].bits);
    EXPECT_EQ(ref.conv_state[c * 3 + 2].bits, in.x[0 * C + c].bits);
    // Stream 1 (rows 1..5): its last three inputs, rows 3, 4, 5.
    for (int k = 0; k < 3; ++k) EXPECT_EQ(ref.conv_state[(C + c) * 3 + k].bits, in.x[(3 + k) * C + c].bits);
  }
}

// Stream 0's tokens [from, from + n) as a chunk of its own, carrying `conv0` and `h0`.
Batch gdn_slice(const LayerShape& shape, const Batch& full, int from, int n, const std::vector<bf16>& conv0) {
  const StreamTruth& st = full.streams[0];
  Batch b = gdn_batch(shape, {{st.chunk_start + from, n, {}}});
  const GdnInputs& src = full.layers[0].gdn;
  GdnInputs& dst = b.layers[0].gdn;
  const size_t C = conv_dim(shape), Hv = shape.num_v_heads;
  std::copy(src.x.begin() + from * C, src.x.begin() + (from + n) * C, dst.x.begin());
  std::copy(src.g.begin() + from * Hv, src.g.begin() + (from + n) * Hv, dst.g.begin());
  std::copy(src.beta.begin() + from * Hv, src.beta.begin() + (from + n) * Hv, dst.beta.begin());
  dst.conv_w = src.conv_w;
  dst.conv0[0] = conv0;
  return b;
}

// `pieces` add up to the whole chunk; the reference walks tokens in tiles of 64,
// so chunks past 64 tokens also cross tile boundaries.
void check_split(const std::vector<int>& pieces) {
  const LayerShape shape = gdn_shape(2, 4, 8, 6, 4);
  int total = 0;
  for (int n : pieces) total += n;
  Batch full = gdn_batch(shape, {{9, total, {}}});
  randomize_gdn(&full, 91);
  std::vector<double> out_full, h_full;
  detail::gdn_stream_hp(full, shape, 0, 0, {}, &out_full, &h_full);
  const GdnReference ref_full = gdn_reference(full, shape, 0);

  const size_t per_tok = static_cast<size_t>(shape.num_v_heads) * shape.v_dim;
  std::vector<bf16> conv0 = full.layers[0].gdn.conv0[0];
  std::vector<double> h(full.layers[0].gdn.h0[0].begin(), full.layers[0].gdn.h0[0].end());
  std::vector<float> h32 = full.layers[0].gdn.h0[0];
  int from = 0;
  for (int n : pieces) {
    SCOPED_TRACE("piece at " + std::to_string(from));
    Batch part = gdn_slice(shape, full, from, n, conv0);
    part.layers[0].gdn.h0[0] = h32;
    std::vector<double> out, h_next;
    detail::gdn_stream_hp(part, shape, 0, 0, h, &out, &h_next);
    const GdnReference ref = gdn_reference(part, shape, 0);
    for (size_t e = 0; e < out.size(); ++e) {
      EXPECT_NEAR(out[e], out_full[from * per_tok + e], 1e-9);
      // The public API rounds the state to f32 between chunks: f32-level agreement.
      EXPECT_NEAR(ref.out_hp[e], out_full[from * per_tok + e], 1e-5);
    }
    conv0 = ref.conv_state;
    h = h_next;
    h32 = ref.h_hp[0];
    from += n;
  }
  for (size_t e = 0; e < h.size(); ++e) {
    EXPECT_NEAR(h[e], h_full[e], 1e-9);
    EXPECT_NEAR(h32[e], h_full[e], 1e-5);
    EXPECT_NEAR(ref_full.h_hp[0][e], h_full[e], 1e-6);
  }
  for (size_t e = 0; e < conv0.size(); ++e) EXPECT_EQ(conv0[e].bits, ref_full.conv_state[e].bits);
  for (size_t e = 0; e < out_full.size(); ++e) EXPECT_NEAR(ref_full.out_hp[e], out_full[e], 1e-6);
}

TEST(GdnReference, SplitChunkEqualsUnsplit) {
  check_split({2, 1, 8});  // a piece of 1 < d_conv - 1: conv0 is carried through it
  check_split({70, 2, 1, 77});
}

TEST(GdnReference, ConvNeverReadsThePreviousStream) {
  const LayerShape shape = gdn_shape(1, 2, 4, 4, 4);
  Batch batch = gdn_batch(shape, {{0, 6, {}}, {3, 5, {}}});
  randomize_gdn(&batch, 101);
  const GdnReference base = gdn_reference(batch, shape, 0);
  Batch changed = batch;
  const int C = conv_dim(shape), Hv = 2, dv = 4;
  for (int r = 3; r < 6; ++r) {  // stream 0's last three tokens
    for (int c = 0; c < C; ++c) changed.layers[0].gdn.x[r * C + c] = B(3.0 + c % 5);
    changed.layers[0].gdn.g[r * Hv] = -2.0f;
  }
  const GdnReference ref = gdn_reference(changed, shape, 0);
  const size_t s1 = 6 * Hv * dv;
  EXPECT_NE(std::memcmp(base.out_hp.data(), ref.out_hp.data(), s1 * 4), 0) << "stream 0 must change";
  for (size_t e = s1; e < ref.out_hp.size(); ++e) {
    EXPECT_EQ(ref.out_hp[e], base.out_hp[e]) << e;
    EXPECT_EQ(ref.out_lp[e], base.out_lp[e]) << e;
  }
  EXPECT_EQ(ref.h_hp[1], base.h_hp[1]);
  EXPECT_EQ(ref.h_lp[1], base.h_lp[1]);
  const size_t cs1 = static_cast<size_t>(C) * 3;
  for (size_t e = cs1; e < ref.conv_state.size(); ++e) EXPECT_EQ(ref.conv_state[e].bits, base.conv_state[e].bits);

  // Stream 1 alone gives the same numbers as stream 1 behind stream 0.
  Batch solo = gdn_batch(shape, {{3, 5, {}}});
  const GdnInputs& src = batch.layers[0].gdn;
  GdnInputs& dst = solo.layers[0].gdn;
  std::copy(src.x.begin() + 6 * C, src.x.end(), dst.x.begin());
  std::copy(src.g.begin() + 6 * Hv, src.g.end(), dst.g.begin());
  std::copy(src.beta.begin() + 6 * Hv, src.beta.end(), dst.beta.begin());
  dst.conv_w = src.conv_w;
  dst.conv0[0] = src.conv0[1];
  dst.h0[0] = src.h0[1];
  const GdnReference alone = gdn_reference(solo, shape, 0);
  for (size_t e = 0; e < alone.out_hp.size(); ++e) {
    EXPECT_EQ(alone.out_hp[e], base.out_hp[s1 + e]);
    EXPECT_EQ(alone.out_lp[e], base.out_lp[s1 + e]);
  }
}

// v head h reads k head h / (Hv / Hk): the same layer with the q/k channels of
// each k head duplicated per v head (Hk = Hv) must give the same numbers.
TEST(GdnReference, GqaHeadMapping) {
  const LayerShape shape = gdn_shape(2, 4, 4, 3, 3);
  Batch batch = gdn_batch(shape, {{2, 7, {}}});
  randomize_gdn(&batch, 121);
  const LayerShape wide = gdn_shape(4, 4, 4, 3, 3);
  Batch dup = gdn_batch(wide, {{2, 7, {}}});
  const GdnInputs& a = batch.layers[0].gdn;
  GdnInputs& w = dup.layers[0].gdn;
  const int C = conv_dim(shape), CW = conv_dim(wide), dk = 4, dc = 3;
  // wide channel -> narrow channel: q heads 0..3 -> 0,0,1,1; k likewise; v as is.
  auto src_ch = [&](int c) {
    if (c < 4 * dk) return (c / dk / 2) * dk + c % dk;
    if (c < 8 * dk) return 2 * dk + ((c - 4 * dk) / dk / 2) * dk + c % dk;
    return c - 4 * dk;
  };
  for (int t = 0; t < 7; ++t)
    for (int c = 0; c < CW; ++c) w.x[t * CW + c] = a.x[t * C + src_ch(c)];
  for (int c = 0; c < CW; ++c)
    for (int j = 0; j < dc; ++j) {
      w.conv_w[c * dc + j] = a.conv_w[src_ch(c) * dc + j];
      if (j < dc - 1) w.conv0[0][c * (dc - 1) + j] = a.conv0[0][src_ch(c) * (dc - 1) + j];
    }
  w.g = a.g;
  w.beta = a.beta;
  w.h0 = a.h0;
  const GdnReference ref = gdn_reference(batch, shape, 0);
  const GdnReference ref2 = gdn_reference(dup, wide, 0);
  EXPECT_EQ(ref.out_hp, ref2.out_hp);
  EXPECT_EQ(ref.out_lp, ref2.out_lp);
  EXPECT_EQ(ref.h_hp[0], ref2.h_hp[0]);
}

TEST(GdnReference, LowPrecisionDriftIsBf16Sized) {
  const LayerShape shape = gdn_shape(2, 4, 32, 32, 4);
  Batch batch = gdn_batch(shape, {{0, 40, {}}, {17, 25, {}}});
  randomize_gdn(&batch, 111);
  const GdnReference ref = gdn_reference(batch, shape, 0);
  const double rel = max_abs_diff(ref.out_lp, ref.out_hp) / max_abs(ref.out_hp);
  EXPECT_GT(rel, 0.0);
  EXPECT_LT(rel, 2e-2);
  for (float x : ref.out_lp) EXPECT_EQ(x, round_bf16(x));
  for (int b = 0; b < 2; ++b) {
    const double hrel = max_abs_diff(ref.h_lp[b], ref.h_hp[b]) / max_abs(ref.h_hp[b]);
    EXPECT_GT(hrel, 0.0);
    EXPECT_LT(hrel, 2e-2);
  }
}

// -------------------------------------------------------------- timings
// Run with --gtest_also_run_disabled_tests --gtest_filter='ReferencePerf.*'.

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

void time_attention(int tokens, int hq, int hkv, int d) {
  const int bs = 16, nblk = (tokens + bs - 1) / bs;
  const LayerShape shape = attn_shape(hq, hkv, d, d, bs, nblk + 1);
  std::vector<int32_t> blocks;
  for (int i = 0; i < nblk; ++i) blocks.push_back((i * 7919) % nblk);
  Batch batch = attn_batch(shape, {{0, tokens, blocks}});
  randomize_attn(&batch, 5);
  const auto t0 = std::chrono::steady_clock::now();
  const AttnReference ref = attention_reference(batch, shape, 0, 0, 1);
  std::printf("attention_reference: 1 stream x %d tokens, %d q / %d kv heads, head_dim %d, "
              "%d threads: %.2f s (hp + lp)\n",
              tokens, hq, hkv, d, worker_threads(), seconds_since(t0));
  EXPECT_TRUE(std::isfinite(ref.out_hp.back()));
}

TEST(ReferencePerf, DISABLED_Attention8k) {
  time_attention(8192, 4, 4, 64);
  time_attention(8192, 4, 1, 64);
}
TEST(ReferencePerf, DISABLED_Attention16k) { time_attention(16384, 8, 8, 128); }

void time_gdn(int tokens, int hk, int hv, int dk, int dv) {
  const LayerShape shape = gdn_shape(hk, hv, dk, dv, 4);
  Batch batch = gdn_batch(shape, {{0, tokens, {}}});
  randomize_gdn(&batch, 6);
  const auto t0 = std::chrono::steady_clock::now();
  const GdnReference ref = gdn_reference(batch, shape, 0);
  std::printf("gdn_reference: 1 stream x %d tokens, %d k / %d v heads, %dx%d state, %d threads: "
              "%.2f s (hp + lp)\n",
              tokens, hk, hv, dv, dk, worker_threads(), seconds_since(t0));
  EXPECT_TRUE(std::isfinite(ref.out_hp.back()));
}

TEST(ReferencePerf, DISABLED_Gdn8k) { time_gdn(8192, 4, 8, 128, 128); }
TEST(ReferencePerf, DISABLED_Gdn16k) { time_gdn(16384, 16, 32, 128, 128); }

}  // namespace
}  // namespace pb
