// host_attention.cpp: the attention layer's host kernels: RoPE/MRoPE, KV write,
// and paged varlen causal GQA attention, per (stream, kv head, q tile) with
// full key tiles as matrix products and the diagonal tile per row.
// Invariants: reads only the ABI arguments; a block id outside the cache reads
// as NaN, a slot outside it is skipped, kv_len is clamped into the stream's table.
#include <Eigen/Dense>
#include <cmath>
#include <limits>

#include "host_kernel_util.h"
#include "lib/bf16.h"

namespace pb::host_kernels {

namespace {

constexpr int kQTile = 64;  // query tokens per work item
constexpr int kKTile = 64;  // keys per tile
using MatF = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
const float kNaN = std::numeric_limits<float>::quiet_NaN();

uint64_t round256(uint64_t n) { return (n + 255) & ~uint64_t(255); }

// q_rot [T, Hq, D] then k_rot [T, Hkv, D], bf16, in the workspace.
bf16* q_rot_of(const pb_attn_layer_args& a) { return at<bf16>(a.workspace.data); }
bf16* k_rot_of(const pb_attn_layer_args& a) {
  const uint64_t q_bytes = round256(uint64_t(a.metadata.total_tokens) * a.shape.num_q_heads * a.shape.head_dim * 2);
  return at<bf16>(a.workspace.data + q_bytes);
}

void check_args(const pb_attn_layer_args& a) {
  const pb_attn_shape& s = a.shape;
  if (s.num_q_heads <= 0 || s.num_kv_heads <= 0 || s.num_q_heads % s.num_kv_heads || s.head_dim <= 0 ||
      s.rotary_dim < 0 || s.rotary_dim > s.head_dim || s.rotary_dim % 2 || s.block_size <= 0 || s.num_blocks < 0)
    throw KernelError{PB_ERR_INVALID, "attention shape out of range"};
  const uint64_t T = a.metadata.total_tokens;
  expect_tensor(a.q, PB_DTYPE_BF16, T * s.num_q_heads * s.head_dim, "q");
  expect_tensor(a.k, PB_DTYPE_BF16, T * s.num_kv_heads * s.head_dim, "k");
  expect_tensor(a.v, PB_DTYPE_BF16, T * s.num_kv_heads * s.head_dim, "v");
  expect_tensor(a.out, PB_DTYPE_BF16, T * s.num_q_heads * s.head_dim, "out");
  const uint64_t cache = uint64_t(s.num_blocks) * s.block_size * s.num_kv_heads * s.head_dim;
  expect_tensor(a.k_cache, PB_DTYPE_BF16, cache, "k_cache");
  expect_tensor(a.v_cache, PB_DTYPE_BF16, cache, "v_cache");
  if (a.workspace.bytes < attn_workspace_bytes(s, a.metadata.total_tokens))
    throw KernelError{PB_ERR_INVALID, "workspace smaller than workspace_bytes asked for"};
}

// RoPE section of frequency i: 0 = T, 1 = H, 2 = W.
int section(const pb_attn_shape& s, int i) {
  if (!s.mrope_enabled) return 0;
  const int32_t* sec = s.mrope_sections;
  if (s.mrope_interleaved) {
    if (i % 3 == 1 && i < 3 * sec[1]) return 1;
    if (i % 3 == 2 && i < 3 * sec[2]) return 2;
    return 0;
  }
  return i < sec[0] ? 0 : i < sec[0] + sec[1] ? 1 : 2;
}

}  // namespace

int batch_dependent_key_tile(int total_tokens) { return 16 + total_tokens % 49; }

uint64_t attn_workspace_bytes(const pb_attn_shape& s, uint32_t total_tokens) {
  const uint64_t T = total_tokens;
  return round256(T * s.num_q_heads * s.head_dim * 2) + round256(T * s.num_kv_heads * s.head_dim * 2);
}

void rope(const Options& o, const pb_attn_layer_args& a) {
  check_args(a);
  const pb_attn_shape& s = a.shape;
  const pb_batched_attn_metadata& m = a.metadata;
  const int T = rows_of(m, a.q);
  const uint32_t* pos[3] = {at<const uint32_t>(m.positions_stacked), at<const uint32_t>(m.positions_h_stacked),
                            at<const uint32_t>(m.positions_w_stacked)};
  if (!pos[0] || !pos[1] || !pos[2]) throw KernelError{PB_ERR_INVALID, "null positions address"};
  const int D = s.head_dim, half = s.rotary_dim / 2;
  std::vector<float> inv_freq(half);
  std::vector<int> sec(half);
  for (int i = 0; i < half; ++i) {
    inv_freq[i] = static_cast<float>(std::pow(static_cast<double>(s.rope_theta), -2.0 * i / s.rotary_dim));
    sec[i] = section(s, i);
  }
  const bf16* q = at<const bf16>(a.q.data);
  const bf16* k = at<const bf16>(a.k.data);
  bf16* q_rot = q_rot_of(a);
  bf16* k_rot = k_rot_of(a);
  for_work(T, a.schedule, [&](int r) {
    std::vector<float> c(half), sn(half);
    for (int i = 0; i < half; ++i) {
      const float ang = static_cast<float>(pos[sec[i]][r]) * inv_freq[i];
      c[i] = std::cos(ang);
      sn[i] = std::sin(ang);
    }
    auto rot = [&](const bf16* in, bf16* out, int heads) {
      for (int h = 0; h < heads; ++h) {
        const bf16* x = &in[(size_t(r) * heads + h) * D];
        bf16* y = &out[(size_t(r) * heads + h) * D];
        for (int i = 0; i < half; ++i) {
          const float x1 = to_float(x[i]), x2 = to_float(x[i + half]);
          y[i] = to_bf16(x1 * c[i] - x2 * sn[i]);
          y[i + half] = to_bf16(x2 * c[i] + x1 * sn[i]);
        }
        for (int i = 2 * half; i < D; ++i) y[i] = x[i];
      }
    };
    rot(q, q_rot, s.num_q_heads);
    rot(k, k_rot, s.num_kv_heads);
  });
  // inputs-in-place: the roped q also written over the input q.
  if (o.inputs_in_place) std::copy_n(q_rot, size_t(T) * s.num_q_heads * D, at<bf16>(a.q.data));
}

void kv_write(const Options&, const pb_attn_layer_args& a) {
  check_args(a);
  const pb_attn_shape& s = a.shape;
  const int T = rows_of(a.metadata, a.k);
  const int64_t* slots = at<const int64_t>(a.metadata.slot_stacked);
  if (!slots) throw KernelError{PB_ERR_INVALID, "null slot_stacked address"};
  const size_t row = size_t(s.num_kv_heads) * s.head_dim;
  const int64_t nslots = int64_t(s.num_blocks) * s.block_size;
  const bf16* k_rot = k_rot_of(a);
  const bf16* v = at<const bf16>(a.v.data);
  bf16* k_cache = at<bf16>(a.k_cache.data);
  bf16* v_cache = at<bf16>(a.v_cache.data);
  for (int i = 0; i < T; ++i) {
    const int r = a.schedule ? T - 1 - i : i;
    const int64_t slot = slots[r];
    if (slot < 0 || slot >= nslots) continue;
    std::copy_n(&k_rot[r * row], row, &k_cache[slot * row]);
    std::copy_n(&v[r * row], row, &v_cache[slot * row]);
  }
}

void attention(const Options& o, const pb_attn_layer_args& a) {
  check_args(a);
  const pb_attn_shape& s = a.shape;
  const pb_batched_attn_metadata& m = a.metadata;
  const int N = static_cast<int>(m.batch_size);
  const int T = rows_of(m, a.q);
  const int32_t* kv_lens = at<const int32_t>(m.kv_lens);
  const uint64_t* tables = at<const uint64_t>(m.block_table_ptrs);
  if (!kv_lens || !tables) throw KernelError{PB_ERR_INVALID, "null kv_lens or block_table_ptrs address"};
  const StreamRows rows = stream_rows(m, T);
  const int Hq = s.num_q_heads, Hkv = s.num_kv_heads, G = Hq / Hkv;
  const int D = s.head_dim, bs = s.block_size;
  const int max_entries = static_cast<int>(m.max_blocks_per_seq);
  const int extra = o.causal_off_by_one ? 1 : 0;
  // batch-dependent-split: 16 to 64 keys per tile from the batch's total tokens.
  const int kt = o.batch_dependent_split ? batch_dependent_key_tile(T) : kKTile;
  const float scale = s.scale;
  const bf16* q_rot = q_rot_of(a);
  const bf16* k_cache = at<const bf16>(a.k_cache.data);
  const bf16* v_cache = at<const bf16>(a.v_cache.data);
  bf16* out = at<bf16>(a.out.data);

  struct Item { int b, h, i0, i1; };
  std::vector<Item> items;
  const int grid = o.grid_short_by_one ? std::max(N - 1, 0) : N;  // grid-short-by-one leaves out the last stream
  for (int b = 0; b < grid; ++b)
    for (int h = 0; h < Hkv; ++h)
      for (int i0 = 0; i0 < rows.count(b); i0 += kQTile) items.push_back({b, h, i0, std::min(i0 + kQTile, rows.count(b))});
  for_work(static_cast<int>(items.size()), a.schedule, [&](int it) {
    const Item w = items[it];
    const int begin = rows.begin[w.b], count = rows.count(w.b);
    // graph-baked-kv-len: the host copy, current in an eager run, the capture's under a replay.
    const bool baked = o.graph_baked_kv_len && m.kv_lens_host && uint32_t(w.b) < m.kv_lens_host_count;
    const int kv_len = std::clamp(baked ? m.kv_lens_host[w.b] : kv_lens[w.b], 0, max_entries * bs);
    const int cs = std::max(kv_len - count, 0);
    // The table is read for up to max_blocks_per_seq + 1 entries (the guard
    // entry after the stream's blocks holds the poison block).
    const int32_t* table = at<const int32_t>(tables[w.b]);
    if (!table || tables[w.b] % alignof(int32_t)) return;  // output stays poisoned
    const int nr = w.i1 - w.i0, nrows = nr * G;
    MatF Q(nrows, D), O = MatF::Zero(nrows, D);
    std::vector<float> mrow(nrows, -std::numeric_limits<float>::infinity()), lrow(nrows, 0.f);
    for (int i = 0; i < nr; ++i)
      for (int g = 0; g < G; ++g) {
        const bf16* q = &q_rot[((begin + w.i0 + i) * size_t(Hq) + w.h * G + g) * D];
        for (int d = 0; d < D; ++d) Q(i * G + g, d) = to_float(q[d]) * scale;
      }
    const size_t kv_row = size_t(Hkv) * D;
    auto load_key = [&](int j, float* k, float* v) {
      const int e = j / bs;
      const int32_t blk = e <= max_entries ? table[e] : -1;
      if (blk < 0 || blk >= s.num_blocks) {
        std::fill_n(k, D, kNaN);
        std::fill_n(v, D, kNaN);
        return;
      }
      const size_t base = (size_t(blk) * bs + j % bs) * kv_row + size_t(w.h) * D;
      for (int d = 0; d < D; ++d) {
        k[d] = to_float(k_cache[base + d]);
        v[d] = to_float(v_cache[base + d]);
      }
    };
    const int first_bound = cs + w.i0 + extra;     // the smallest row bound in the tile
    const int last_bound = cs + w.i1 - 1 + extra;  // the largest
    MatF K(kt, D), V(kt, D), S;
    for (int j0 = 0; j0 <= last_bound; j0 += kt) {
      const int nk = std::min(kt, last_bound + 1 - j0);
      for (int j = 0; j < nk; ++j) load_key(j0 + j, &K(j, 0), &V(j, 0));
      if (j0 + nk - 1 <= first_bound) {
        // Full tile: every row sees every key.
        S.noalias() = Q * K.topRows(nk).transpose();
        MatF P(nrows, nk);
        for (int r = 0; r < nrows; ++r) {
          const float mnew = std::max(mrow[r], S.row(r).maxCoeff());
          const float alpha = std::exp(mrow[r] - mnew);
          float sum = 0;
          for (int j = 0; j < nk; ++j) {
            const float p = std::exp(S(r, j) - mnew);
            sum += p;
            P(r, j) = round_bf16(p);
          }
          lrow[r] = lrow[r] * alpha + sum;
          O.row(r) *= alpha;
          mrow[r] = mnew;
        }
        O.noalias() += P * V.topRows(nk);
      } else {
        // Diagonal tile: each row takes only the keys up to its own bound.
        for (int r = 0; r < nrows; ++r) {
          const int bound = cs + w.i0 + r / G + extra;
          const int n = std::min(nk, bound - j0 + 1);
          if (n <= 0) continue;
          float mnew = mrow[r];
          std::vector<float> sc(n);
          for (int j = 0; j < n; ++j) {
            sc[j] = Q.row(r).dot(K.row(j));
            mnew = std::max(mnew, sc[j]);
          }
          if (std::isnan(mnew)) mnew = kNaN;
          const float alpha = std::exp(mrow[r] - mnew);
          O.row(r) *= alpha;
          float sum = 0;
          for (int j = 0; j < n; ++j) {
            const float p = std::exp(sc[j] - mnew);
            sum += p;
            O.row(r) += round_bf16(p) * V.row(j);
          }
          lrow[r] = lrow[r] * alpha + sum;
          mrow[r] = mnew;
        }
      }
    }
    for (int i = 0; i < nr; ++i)
      for (int g = 0; g < G; ++g) {
        bf16* dst = &out[((begin + w.i0 + i) * size_t(Hq) + w.h * G + g) * D];
        const int r = i * G + g;
        for (int d = 0; d < D; ++d) dst[d] = to_bf16(O(r, d) / lrow[r]);
      }
  });
  // out-row-past-end: the last row stored again one row further, past out's end.
  const size_t row = size_t(Hq) * D;
  if (o.out_row_past_end && T > 0) std::copy_n(&out[(T - 1) * row], row, &out[T * row]);
}

}  // namespace pb::host_kernels
