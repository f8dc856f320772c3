// attention_ref.cpp: the causal GQA attention reference and the expected paged
// KV cache, from the Batch's ground truth only (streams, positions, block ids,
// prior KV), never from staged metadata.
// Per stream and kv head, K and V for cache indices 0..kv_len-1 are built
// contiguously (prior KV as given, new k roped with the token's positions);
// query rows are then taken kBlockRows at a time against the keys the last of
// them needs (Eigen float GEMMs for Q*K^T and P*V), each row masked to its own
// causal bound. hp: RoPE in double kept unrounded in float, softmax max/exp/sum
// in double, no P rounding, output unrounded; lp: the kernels' precision (the
// contract in reference.h). Tasks (q head, row block) of one stream and kv head
// run on parallel_for; sampled rows are drawn before, in a fixed order.
#include <Eigen/Core>
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <set>
#include <stdexcept>
#include <string>

#include "lib/backend.h"
#include "lib/rng.h"
#include "reference/reference.h"
#include "lib/parallel.h"
#include "reference/reference_internal.h"

namespace pb {

namespace detail {

// The hp softmax numerators: glibc's double exp (its FMA variant where the CPU
// has one) beat an SSE2 polynomial here, and Eigen's double exp is scalar on SSE2.
double exp_scores_hp(const float* s, int n, double scale, double m, double* e) {
  double sum = 0;
  for (int j = 0; j < n; ++j) {
    e[j] = std::exp(static_cast<double>(s[j]) * scale - m);
    sum += e[j];
  }
  return sum;
}

}  // namespace detail

namespace {

using MatR = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;

// Query rows per GEMM: large enough for Eigen's kernels, small enough that the
// masked-out triangle past the causal bound of the first row stays cheap.
constexpr int kBlockRows = 128;

[[noreturn]] void fail(const std::string& what) {
  throw std::invalid_argument("attention_reference: " + what);
}

// K (roped) and V of one stream and kv head, rows = cache index 0..kv_len-1.
struct KvHead {
  MatR k_hp, k_lp, v;
};

struct StreamCtx {
  const StreamTruth* st = nullptr;
  const AttnInputs* in = nullptr;
  const detail::RopeTable* rope = nullptr;
  const KvHead* kv = nullptr;
  int Hq = 0, D = 0;
};

// Rounds every value to bf16 in place (finite values only: these are exp() results).
void round_bf16_inplace(float* p, int n) {
  for (int i = 0; i < n; ++i) {
    uint32_t u;
    std::memcpy(&u, &p[i], 4);
    u += 0x7fffu + ((u >> 16) & 1u);
    u &= 0xffff0000u;
    std::memcpy(&p[i], &u, 4);
  }
}

// One q head h of one stream, the query rows `rows[0..n)` (sorted token indices
// within the chunk): writes out_hp/out_lp of those rows.
void attend_rows(const StreamCtx& c, int h, const int* rows, int n, float* out_hp, float* out_lp) {
  const StreamTruth& st = *c.st;
  const int D = c.D, Hq = c.Hq, half = c.rope->half;
  const int kend = st.chunk_start + rows[n - 1] + 1;  // keys the last row needs
  const double scale_hp = 1.0 / std::sqrt(static_cast<double>(D));
  const float scale_lp = 1.0f / std::sqrt(static_cast<float>(D));

  MatR q_hp(n, D), q_lp(n, D);
  for (int r = 0; r < n; ++r) {
    const size_t tok = static_cast<size_t>(rows[r]);
    const bf16* x = c.in->q.data() + ((st.row_begin + tok) * Hq + h) * D;
    detail::rope_head_hp(&c.rope->cos_hp[tok * half], &c.rope->sin_hp[tok * half], half, D, x,
                         q_hp.row(r).data());
    detail::rope_head_lp(&c.rope->cos_lp[tok * half], &c.rope->sin_lp[tok * half], half, D, x,
                         q_lp.row(r).data());
  }

  MatR s(n, kend), o(n, D);
  std::vector<double> e_hp(kend);
  std::vector<double> l_hp(n);
  std::vector<float> l_lp(n);

  // hp: float GEMM of unrounded roped q/k, softmax max/exp/sum in double.
  s.noalias() = q_hp * c.kv->k_hp.topRows(kend).transpose();
  for (int r = 0; r < n; ++r) {
    const int len = st.chunk_start + rows[r] + 1;
    float* srow = s.row(r).data();
    Eigen::Map<Eigen::ArrayXf> sv(srow, len);
    const double m = static_cast<double>(sv.maxCoeff()) * scale_hp;
    l_hp[r] = detail::exp_scores_hp(srow, len, scale_hp, m, e_hp.data());
    sv = Eigen::Map<const Eigen::ArrayXd>(e_hp.data(), len).cast<float>();
    std::fill(srow + len, srow + kend, 0.0f);
  }
  o.noalias() = s * c.kv->v.topRows(kend);
  for (int r = 0; r < n; ++r) {
    float* dst = out_hp + ((st.row_begin + static_cast<size_t>(rows[r])) * Hq + h) * D;
    for (int d = 0; d < D; ++d) dst[d] = static_cast<float>(o(r, d) / l_hp[r]);
  }

  // lp: bf16 roped q/k, softmax in float, unnormalised P rounded to bf16 before
  // P*V (flash style), the float row sum divides at the end, output to bf16.
  s.noalias() = q_lp * c.kv->k_lp.topRows(kend).transpose();
  for (int r = 0; r < n; ++r) {
    const int len = st.chunk_start + rows[r] + 1;
    float* srow = s.row(r).data();
    Eigen::Map<Eigen::ArrayXf> sv(srow, len);
    sv *= scale_lp;
    const float m = sv.maxCoeff();
    sv = (sv - m).exp();
    l_lp[r] = sv.sum();
    round_bf16_inplace(srow, len);
    std::fill(srow + len, srow + kend, 0.0f);
  }
  o.noalias() = s * c.kv->v.topRows(kend);
  for (int r = 0; r < n; ++r) {
    float* dst = out_lp + ((st.row_begin + static_cast<size_t>(rows[r])) * Hq + h) * D;
    for (int d = 0; d < D; ++d) dst[d] = round_bf16(o(r, d) / l_lp[r]);
  }
}

// `want` distinct rows of [0, count), always the first and the last, the rest
// uniform (Floyd's algorithm over the interior), sorted.
std::vector<int> sample_rows(int count, int want, Rng& rng) {
  std::vector<int> rows;
  if (want >= count) {
    rows.resize(count);
    for (int i = 0; i < count; ++i) rows[i] = i;
    return rows;
  }
  std::set<int> pick = {0, count - 1};
  const int interior = count - 2;            // rows 1..count-2
  const int extra = std::max(0, want - 2);   // want < count, so extra <= interior
  for (int j = interior - extra; j < interior; ++j) {
    const int t = static_cast<int>(rng.uniform_int(0, j));
    pick.insert(pick.count(t + 1) ? j + 1 : t + 1);
  }
  rows.assign(pick.begin(), pick.end());
  return rows;
}

void check_inputs(const Batch& batch, const LayerShape& shape, int layer) {
  if (layer < 0 || layer >= static_cast<int>(batch.layers.size()))
    fail("layer " + std::to_string(layer) + " out of range");
  if (batch.layers[layer].kind != LayerKind::attn)
    fail("layer " + std::to_string(layer) + " is not an attention layer");
  if (shape.num_q_heads <= 0 || shape.num_kv_heads <= 0 || shape.head_dim <= 0 ||
      shape.num_q_heads % shape.num_kv_heads != 0)
    fail("num_q_heads " + std::to_string(shape.num_q_heads) + " must be a positive multiple of num_kv_heads " +
         std::to_string(shape.num_kv_heads));
  if (shape.block_size <= 0) fail("block_size must be positive");
  const AttnInputs& in = batch.layers[layer].attn;
  const size_t T = batch.total_tokens, D = shape.head_dim;
  if (in.q.size() != T * shape.num_q_heads * D || in.k.size() != T * shape.num_kv_heads * D ||
      in.v.size() != T * shape.num_kv_heads * D)
    fail("q/k/v sizes do not match total_tokens " + std::to_string(T));
  if (batch.streams.size() != static_cast<size_t>(batch.num_streams) ||
      in.prior_k.size() != batch.streams.size() || in.prior_v.size() != batch.streams.size())
    fail("streams / prior_k / prior_v count differ from num_streams");
  int row = 0;
  for (size_t b = 0; b < batch.streams.size(); ++b) {
    const StreamTruth& st = batch.streams[b];
    const std::string name = "stream " + std::to_string(b);
    if (st.row_begin != row || st.kv_len != st.chunk_start + st.count || st.count < 0)
      fail(name + ": row_begin/count/kv_len inconsistent");
    row += st.count;
    const size_t prior = static_cast<size_t>(st.chunk_start) * shape.num_kv_heads * D;
    if (in.prior_k[b].size() != prior || in.prior_v[b].size() != prior)
      fail(name + ": prior_k/prior_v must hold chunk_start * num_kv_heads * head_dim values");
    const size_t need = (static_cast<size_t>(st.kv_len) + shape.block_size - 1) / shape.block_size;
    if (st.blocks.size() < need)
      fail(name + ": " + std::to_string(st.blocks.size()) + " blocks for kv_len " +
           std::to_string(st.kv_len) + ", need " + std::to_string(need));
  }
  if (row != batch.total_tokens) fail("sum of counts differs from total_tokens");
}

}  // namespace

AttnReference attention_reference(const Batch& batch, const LayerShape& shape, int layer,
                                  int sample, uint64_t seed) {
  check_inputs(batch, shape, layer);
  const AttnInputs& in = batch.layers[layer].attn;
  const int Hq = shape.num_q_heads, Hkv = shape.num_kv_heads, D = shape.head_dim;
  const int group = Hq / Hkv, bs = shape.block_size;
  const size_t T = batch.total_tokens;
  const float nan = std::numeric_limits<float>::quiet_NaN();

  AttnReference ref;
  ref.out_hp.assign(T * Hq * D, nan);
  ref.out_lp.assign(T * Hq * D, nan);
  ref.computed.assign(T * Hq, 0);
  ref.sampled = sample > 0;
  ref.k_cache = initial_cache(batch, shape, layer, false);
  ref.v_cache = initial_cache(batch, shape, layer, true);
  const size_t slot_elems = static_cast<size_t>(Hkv) * D;
  if (ref.k_cache.size() != ref.v_cache.size() || ref.k_cache.size() % (slot_elems * bs) != 0)
    fail("initial_cache size is not [num_blocks, block_size, num_kv_heads, head_dim]");
  const int64_t cache_blocks = static_cast<int64_t>(ref.k_cache.size() / (slot_elems * bs));

  // Rows per stream and q head, drawn in stream-then-head order from the seed.
  const int N = batch.num_streams;
  std::vector<std::vector<int>> rows(static_cast<size_t>(N) * Hq);
  Rng rng = Rng::for_purpose(seed, kRngSample);
  for (int b = 0; b < N; ++b) {
    const int count = batch.streams[b].count;
    for (int h = 0; h < Hq; ++h) {
      if (count == 0) continue;
      auto& r = rows[static_cast<size_t>(b) * Hq + h];
      r = sample > 0 ? sample_rows(count, sample, rng) : sample_rows(count, count, rng);
      for (int i : r) ref.computed[(batch.streams[b].row_begin + static_cast<size_t>(i)) * Hq + h] = 1;
    }
  }

  const detail::RopeFreqs freqs = detail::rope_freqs(shape);
  for (int b = 0; b < N; ++b) {
    const StreamTruth& st = batch.streams[b];
    if (st.count == 0) continue;
    const detail::RopeTable rope = detail::rope_table(freqs, st);
    const int cs = st.chunk_start, kv_len = st.kv_len, half = rope.half;

    for (int g = 0; g < Hkv; ++g) {
      KvHead kv;
      kv.k_hp.resize(kv_len, D);
      kv.k_lp.resize(kv_len, D);
      kv.v.resize(kv_len, D);
      for (int p = 0; p < cs; ++p) {
        const size_t at = (static_cast<size_t>(p) * Hkv + g) * D;
        for (int d = 0; d < D; ++d) {
          kv.k_hp(p, d) = kv.k_lp(p, d) = to_float(in.prior_k[b][at + d]);
          kv.v(p, d) = to_float(in.prior_v[b][at + d]);
        }
      }
      for (int i = 0; i < st.count; ++i) {
        const int p = cs + i;
        const size_t at = ((static_cast<size_t>(st.row_begin) + i) * Hkv + g) * D;
        const size_t ti = static_cast<size_t>(i) * half;
        detail::rope_head_hp(&rope.cos_hp[ti], &rope.sin_hp[ti], half, D, &in.k[at],
                             kv.k_hp.row(p).data());
        detail::rope_head_lp(&rope.cos_lp[ti], &rope.sin_lp[ti], half, D, &in.k[at],
                             kv.k_lp.row(p).data());
        // The KV write: what the kernel stores, lp roped k (exact in bf16) and v.
        const int32_t block = st.blocks[p / bs];
        if (block < 0 || block >= cache_blocks)
          fail("stream " + std::to_string(b) + ": block id " + std::to_string(block) +
               " outside the cache's " + std::to_string(cache_blocks) + " blocks");
        const size_t slot = static_cast<size_t>(block) * bs + p % bs;
        const size_t dst = slot * slot_elems + static_cast<size_t>(g) * D;
        for (int d = 0; d < D; ++d) {
          ref.k_cache[dst + d] = to_bf16(kv.k_lp(p, d));
          kv.v(p, d) = to_float(in.v[at + d]);
          ref.v_cache[dst + d] = in.v[at + d];
        }
      }

      // Tasks: (q head of this group, block of its rows), the costliest first.
      struct Task {
        int h, first, n;
        double work;
      };
      std::vector<Task> tasks;
      double work = 0;
      for (int h = g * group; h < (g + 1) * group; ++h) {
        const auto& r = rows[static_cast<size_t>(b) * Hq + h];
        for (int first = 0; first < static_cast<int>(r.size()); first += kBlockRows) {
          const int n = std::min<int>(kBlockRows, static_cast<int>(r.size()) - first);
          const double w = 8.0 * n * (cs + r[first + n - 1] + 1) * D;  // 2 precisions x 2 GEMMs
          tasks.push_back({h, first, n, w});
          work += w;
        }
      }
      std::stable_sort(tasks.begin(), tasks.end(),
                       [](const Task& a, const Task& c) { return a.work > c.work; });
      StreamCtx ctx{&st, &in, &rope, &kv, Hq, D};
      parallel_for(static_cast<int>(tasks.size()), work, [&](int t) {
        const Task& task = tasks[t];
        attend_rows(ctx, task.h, rows[static_cast<size_t>(b) * Hq + task.h].data() + task.first,
                    task.n, ref.out_hp.data(), ref.out_lp.data());
      });
    }
  }
  return ref;
}

}  // namespace pb
