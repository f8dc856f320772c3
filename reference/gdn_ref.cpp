// gdn_ref.cpp: the Gated DeltaNet layer reference (conv1d + SiLU, L2 norm, gated
// delta rule), per stream from its own conv0/h0, tokens in order; the conv
// window reads only the stream's own tokens and conv0, never another stream.
// One task per (stream, v head, precision); each walks the stream's tokens in
// tiles (conv, activation and norm of a tile's q/k/v channels, then the state
// recurrence). The lp recurrence follows the checked kernel's arithmetic
// (GdnPrecision): token by token in fp32, or the chunked kernel's tf32 chunks
// (gdn_chunked_lp.cpp); hp is always the token recurrence in double. The token
// recurrence makes one pass over S per token: row i becomes a*S_i + delta_i*k^T
// and, in the same pass, its dots with the next token's k and q, which the next
// token needs (o_t = a*(S_{t-1} q_t) + delta*(k_t.q_t)).
#include <Eigen/Core>
#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <vector>

#include "reference/reference.h"
#include "lib/parallel.h"
#include "reference/reference_internal.h"

namespace pb {

namespace {

[[noreturn]] void fail(const std::string& what) {
  throw std::invalid_argument("gdn_reference: " + what);
}

constexpr int kTileTokens = 64;

// What one (stream, v head) task reads. x and the gates start at the stream's first row.
struct HeadJob {
  const bf16* x = nullptr;       // [count, conv_dim]
  const bf16* conv_w = nullptr;  // [conv_dim, d_conv]
  const bf16* conv0 = nullptr;   // [conv_dim, d_conv - 1]; nullptr = zeros
  const float* g = nullptr;      // [count] with stride Hv
  const float* beta = nullptr;
  int count = 0, conv_dim = 0, d_conv = 0, Hv = 0, dk = 0, dv = 0;
  int q_ch = 0, k_ch = 0, v_ch = 0;  // first channel of this head's q, k, v
};

float bf(const bf16& h) { return to_float(h); }

// The conv input of channel c at token t (t < 0 reads conv0, oldest first).
inline float conv_in(const HeadJob& j, int t, int c) {
  if (t >= 0) return bf(j.x[static_cast<size_t>(t) * j.conv_dim + c]);
  if (!j.conv0) return 0.0f;
  return bf(j.conv0[static_cast<size_t>(c) * (j.d_conv - 1) + (j.d_conv - 1) + t]);
}

// SiLU of the conv sum. T = double: no rounding. T = float: SiLU in float and
// the result rounded to bf16 (the kernel stores the conv output).
template <class T>
T silu_out(T u) {
  const T y = u / (T(1) + std::exp(-u));
  if constexpr (std::is_same_v<T, float>) return round_bf16(y);
  return y;
}

// Runs the recurrence of one v head over the stream: S [dv, dk] row-major holds
// the state in and out; o_t goes to out + t * out_stride.
// `form` a chunked kernel's (T = O = float only): its lp, chunk by chunk in its arithmetic
// (summed as `sums` says) instead of token by token; form.fn null: the token recurrence.
template <class T, class O>
void run_head(const HeadJob& j, T* S_data, O* out, size_t out_stride, detail::GdnChunkForm form = {},
              detail::Tf32Sums sums = detail::Tf32Sums::fp32) {
  using Mat = Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
  using Vec = Eigen::Matrix<T, Eigen::Dynamic, 1>;
  using RowMap = Eigen::Map<Eigen::Matrix<T, 1, Eigen::Dynamic>>;
  const int dk = j.dk, dv = j.dv;
  Eigen::Map<Mat> S(S_data, dv, dk);
  const T inv_sqrt_dk = T(1) / std::sqrt(static_cast<T>(dk));
  const T eps = static_cast<T>(1e-6);

  // Tile buffers, one token of look-ahead: rows [t0, t1] when t1 < count.
  Mat q(kTileTokens + 1, dk), k(kTileTokens + 1, dk), v(kTileTokens + 1, dv);
  Vec sk(dv), sq(dv), delta(dv);
  // This head's conv channels (its q | k | v), their taps, and the conv input
  // window of a tile: d_conv - 1 rows before it (conv0 before the stream's start).
  const int nch = 2 * dk + dv, dc = j.d_conv;
  std::vector<int> ch(nch);
  for (int c = 0; c < dk; ++c) ch[c] = j.q_ch + c, ch[dk + c] = j.k_ch + c;
  for (int c = 0; c < dv; ++c) ch[2 * dk + c] = j.v_ch + c;
  std::vector<T> w(static_cast<size_t>(nch) * dc), xw(static_cast<size_t>(kTileTokens + dc) * nch);
  for (int ci = 0; ci < nch; ++ci)
    for (int kk = 0; kk < dc; ++kk) w[ci * dc + kk] = bf(j.conv_w[static_cast<size_t>(ch[ci]) * dc + kk]);
  // conv (taps oldest first; double: exact products, double sum; float: float
  // sum), SiLU, then the L2 norm of q and k, for tokens [t0, t1).
  auto load = [&](int t0, int t1) {
    const int rows = t1 - t0 + dc - 1;
    for (int r = 0; r < rows; ++r)
      for (int ci = 0; ci < nch; ++ci) xw[r * nch + ci] = conv_in(j, t0 - (dc - 1) + r, ch[ci]);
    for (int t = t0; t < t1; ++t) {
      const int r = t - t0;
      for (int ci = 0; ci < nch; ++ci) {
        T u = 0;
        for (int kk = 0; kk < dc; ++kk) u += w[ci * dc + kk] * xw[(r + kk) * nch + ci];
        const T y = silu_out(u);
        if (ci < dk) q(r, ci) = y;
        else if (ci < 2 * dk) k(r, ci - dk) = y;
        else v(r, ci - 2 * dk) = y;
      }
      q.row(r) *= T(1) / std::sqrt(q.row(r).squaredNorm() + eps);
      k.row(r) *= T(1) / std::sqrt(k.row(r).squaredNorm() + eps);
    }
  };

  for (int t0 = 0; t0 < j.count; t0 += kTileTokens) {
    const int t1 = std::min(j.count, t0 + kTileTokens);
    load(t0, std::min(j.count, t1 + 1));
    if constexpr (std::is_same_v<T, float> && std::is_same_v<O, float>) {
      if (form.fn) {
        const int chunk = form.tokens;
        if (chunk < 1 || kTileTokens % chunk != 0) fail("a chunk form's chunks must divide the 64-token tiles");
        float gs[kTileTokens], bs[kTileTokens];
        for (int c0 = t0; c0 < t1; c0 += chunk) {
          const int n = std::min(t1 - c0, chunk);
          for (int i = 0; i < n; ++i) {
            gs[i] = j.g[static_cast<size_t>(c0 + i) * j.Hv];
            bs[i] = j.beta[static_cast<size_t>(c0 + i) * j.Hv];
          }
          const int r = c0 - t0;
          form.fn(n, dk, dv, &q(r, 0), &k(r, 0), &v(r, 0), gs, bs, S_data, out + static_cast<size_t>(c0) * out_stride,
                  out_stride, sums);
        }
        continue;
      }
    }
    if (t0 == 0) {
      sk.noalias() = S * k.row(0).transpose();
      sq.noalias() = S * q.row(0).transpose();
    }
    for (int t = t0; t < t1; ++t) {
      const int r = t - t0;
      const T a = std::exp(static_cast<T>(j.g[static_cast<size_t>(t) * j.Hv]));
      const T beta = static_cast<T>(j.beta[static_cast<size_t>(t) * j.Hv]);
      delta = beta * (v.row(r).transpose() - a * sk);
      const T kq = k.row(r).dot(q.row(r));
      O* o = out + static_cast<size_t>(t) * out_stride;
      for (int i = 0; i < dv; ++i) {
        const T oi = (a * sq(i) + delta(i) * kq) * inv_sqrt_dk;
        if constexpr (std::is_same_v<T, float>) o[i] = static_cast<O>(round_bf16(oi));
        else o[i] = static_cast<O>(oi);
      }
      const bool next = t + 1 < j.count;
      const auto kt = k.row(r);
      const auto kn = k.row(r + 1), qn = q.row(r + 1);
      for (int i = 0; i < dv; ++i) {
        RowMap row(S_data + static_cast<size_t>(i) * dk, dk);
        row = a * row + delta(i) * kt;
        if (next) {
          sk(i) = row.dot(kn);
          sq(i) = row.dot(qn);
        }
      }
    }
  }
}

struct Dims {
  int N = 0, Hk = 0, Hv = 0, dk = 0, dv = 0, dc = 0, conv_dim = 0;
};

Dims check_inputs(const Batch& batch, const LayerShape& shape, int layer) {
  if (layer < 0 || layer >= static_cast<int>(batch.layers.size()))
    fail("layer " + std::to_string(layer) + " out of range");
  if (batch.layers[layer].kind != LayerKind::gdn)
    fail("layer " + std::to_string(layer) + " is not a gdn layer");
  Dims d;
  d.N = batch.num_streams;
  d.Hk = shape.num_k_heads;
  d.Hv = shape.num_v_heads;
  d.dk = shape.k_dim;
  d.dv = shape.v_dim;
  d.dc = shape.d_conv;
  if (d.Hk <= 0 || d.Hv <= 0 || d.Hv % d.Hk != 0 || d.dk <= 0 || d.dv <= 0 || d.dc < 2)
    fail("bad shape: num_k_heads " + std::to_string(d.Hk) + ", num_v_heads " +
         std::to_string(d.Hv) + ", k_dim " + std::to_string(d.dk) + ", v_dim " +
         std::to_string(d.dv) + ", d_conv " + std::to_string(d.dc));
  d.conv_dim = 2 * d.Hk * d.dk + d.Hv * d.dv;
  const GdnInputs& in = batch.layers[layer].gdn;
  const size_t T = batch.total_tokens;
  if (in.x.size() != T * d.conv_dim) fail("x must be [total_tokens, conv_dim]");
  if (in.conv_w.size() != static_cast<size_t>(d.conv_dim) * d.dc) fail("conv_w must be [conv_dim, d_conv]");
  if (in.g.size() != T * d.Hv || in.beta.size() != T * d.Hv)
    fail("g/beta must be [total_tokens, num_v_heads]");
  if (batch.streams.size() != static_cast<size_t>(d.N) || in.h0.size() != batch.streams.size() ||
      in.conv0.size() != batch.streams.size())
    fail("streams / h0 / conv0 count differ from num_streams");
  int row = 0;
  for (int b = 0; b < d.N; ++b) {
    const StreamTruth& st = batch.streams[b];
    if (st.row_begin != row || st.count < 0) fail("stream " + std::to_string(b) + ": row_begin/count inconsistent");
    row += st.count;
    const size_t hn = static_cast<size_t>(d.Hv) * d.dv * d.dk;
    const size_t cn = static_cast<size_t>(d.conv_dim) * (d.dc - 1);
    if (!in.h0[b].empty() && in.h0[b].size() != hn)
      fail("stream " + std::to_string(b) + ": h0 must be empty or [num_v_heads, v_dim, k_dim]");
    if (!in.conv0[b].empty() && in.conv0[b].size() != cn)
      fail("stream " + std::to_string(b) + ": conv0 must be empty or [conv_dim, d_conv - 1]");
  }
  if (row != batch.total_tokens) fail("sum of counts differs from total_tokens");
  return d;
}

HeadJob make_job(const Batch& batch, const Dims& d, int layer, int b, int h) {
  const GdnInputs& in = batch.layers[layer].gdn;
  const StreamTruth& st = batch.streams[b];
  HeadJob j;
  j.x = in.x.data() + static_cast<size_t>(st.row_begin) * d.conv_dim;
  j.conv_w = in.conv_w.data();
  j.conv0 = in.conv0[b].empty() ? nullptr : in.conv0[b].data();
  j.g = in.g.data() + static_cast<size_t>(st.row_begin) * d.Hv + h;
  j.beta = in.beta.data() + static_cast<size_t>(st.row_begin) * d.Hv + h;
  j.count = st.count;
  j.conv_dim = d.conv_dim;
  j.d_conv = d.dc;
  j.Hv = d.Hv;
  j.dk = d.dk;
  j.dv = d.dv;
  const int kh = h / (d.Hv / d.Hk);
  j.q_ch = kh * d.dk;
  j.k_ch = d.Hk * d.dk + kh * d.dk;
  j.v_ch = 2 * d.Hk * d.dk + h * d.dv;
  return j;
}

}  // namespace

const char* gdn_precision_name(GdnPrecision p) {
  switch (p) {
    case GdnPrecision::fp32: return "bf16 io, fp32 math";
    case GdnPrecision::tf32_chunked: return "bf16 io, tf32 products (32-token chunks)";
    case GdnPrecision::tf32_split: return "bf16 io, tf32 products (32-token chunks, context-parallel split)";
    case GdnPrecision::bf16_chunk64: return "bf16 io, bf16 products (64-token chunks, fla's chunk_gated_delta_rule)";
  }
  return "unknown";
}

GdnReference gdn_reference(const Batch& batch, const LayerShape& shape, int layer, GdnPrecision lp_precision) {
  const Dims d = check_inputs(batch, shape, layer);
  const GdnInputs& in = batch.layers[layer].gdn;
  const size_t T = batch.total_tokens, hn = static_cast<size_t>(d.Hv) * d.dv * d.dk;
  const size_t head = static_cast<size_t>(d.dv) * d.dk;

  GdnReference ref;
  ref.lp_precision = lp_precision;
  ref.out_hp.assign(T * d.Hv * d.dv, 0.0f);
  ref.out_lp.assign(T * d.Hv * d.dv, 0.0f);
  ref.h_hp.resize(d.N);
  ref.h_lp.resize(d.N);
  for (int b = 0; b < d.N; ++b) {
    ref.h_lp[b] = in.h0[b].empty() ? std::vector<float>(hn, 0.0f) : in.h0[b];
    ref.h_hp[b].assign(hn, 0.0f);
  }

  // Tasks (stream, v head, precision); work ~ 6 flops per state element per token.
  const int tasks = d.N * d.Hv * 2;
  double work = 0;
  for (const auto& st : batch.streams) work += 12.0 * st.count * d.Hv * head;
  parallel_for(tasks, work, [&](int task) {
    const int b = task / (2 * d.Hv), h = (task / 2) % d.Hv;
    const bool lp = task % 2;
    const StreamTruth& st = batch.streams[b];
    const HeadJob j = make_job(batch, d, layer, b, h);
    const size_t out_at = static_cast<size_t>(st.row_begin) * d.Hv * d.dv + static_cast<size_t>(h) * d.dv;
    const size_t stride = static_cast<size_t>(d.Hv) * d.dv;
    if (lp) {
      run_head<float, float>(j, ref.h_lp[b].data() + h * head, ref.out_lp.data() + out_at, stride,
                             detail::gdn_chunk_form(lp_precision));
    } else {
      std::vector<double> S(head, 0.0);
      if (!in.h0[b].empty())
        for (size_t e = 0; e < head; ++e) S[e] = in.h0[b][h * head + e];
      run_head<double, float>(j, S.data(), ref.out_hp.data() + out_at, stride);
      for (size_t e = 0; e < head; ++e) ref.h_hp[b][h * head + e] = static_cast<float>(S[e]);
    }
  });

  // conv_state: the last d_conv-1 inputs of (conv0 ++ x of the chunk), oldest first.
  const int w = d.dc - 1;
  ref.conv_state.assign(static_cast<size_t>(d.N) * d.conv_dim * w, bf16{});
  for (int b = 0; b < d.N; ++b) {
    const StreamTruth& st = batch.streams[b];
    for (int c = 0; c < d.conv_dim; ++c) {
      for (int k = 0; k < w; ++k) {
        const int idx = st.count + k;  // index into conv0 ++ x
        bf16 val{};
        if (idx >= w)
          val = in.x[(static_cast<size_t>(st.row_begin) + idx - w) * d.conv_dim + c];
        else if (!in.conv0[b].empty())
          val = in.conv0[b][static_cast<size_t>(c) * w + idx];
        ref.conv_state[(static_cast<size_t>(b) * d.conv_dim + c) * w + k] = val;
      }
    }
  }
  return ref;
}

namespace detail {

void gdn_stream_hp(const Batch& batch, const LayerShape& shape, int layer, int stream,
                   const std::vector<double>& h0, std::vector<double>* out,
                   std::vector<double>* h_final) {
  const Dims d = check_inputs(batch, shape, layer);
  if (stream < 0 || stream >= d.N) fail("stream " + std::to_string(stream) + " out of range");
  const GdnInputs& in = batch.layers[layer].gdn;
  const size_t hn = static_cast<size_t>(d.Hv) * d.dv * d.dk, head = static_cast<size_t>(d.dv) * d.dk;
  if (!h0.empty() && h0.size() != hn) fail("h0 must be empty or [num_v_heads, v_dim, k_dim]");
  h_final->assign(hn, 0.0);
  if (!h0.empty()) *h_final = h0;
  else if (!in.h0[stream].empty()) h_final->assign(in.h0[stream].begin(), in.h0[stream].end());
  const int count = batch.streams[stream].count;
  out->assign(static_cast<size_t>(count) * d.Hv * d.dv, 0.0);
  for (int h = 0; h < d.Hv; ++h) {
    const HeadJob j = make_job(batch, d, layer, stream, h);
    run_head<double, double>(j, h_final->data() + h * head, out->data() + static_cast<size_t>(h) * d.dv,
                             static_cast<size_t>(d.Hv) * d.dv);
  }
}

GdnChunkForm gdn_chunk_form(GdnPrecision p) {
  switch (p) {
    case GdnPrecision::tf32_chunked: return {gdn_chunk_tf32, kGdnChunkTokens};
    case GdnPrecision::tf32_split: return {gdn_chunk_split, kGdnChunkTokens};
    case GdnPrecision::bf16_chunk64: return {gdn_chunk_bf16, kGdnBf16ChunkTokens};
    case GdnPrecision::fp32: break;
  }
  return {};
}

void gdn_stream_chunks(const Batch& batch, const LayerShape& shape, int layer, int stream, GdnChunkForm form,
                       Tf32Sums sums, std::vector<float>* out, std::vector<float>* h_final) {
  const Dims d = check_inputs(batch, shape, layer);
  if (stream < 0 || stream >= d.N) fail("stream " + std::to_string(stream) + " out of range");
  const GdnInputs& in = batch.layers[layer].gdn;
  const size_t hn = static_cast<size_t>(d.Hv) * d.dv * d.dk, head = static_cast<size_t>(d.dv) * d.dk;
  *h_final = in.h0[stream].empty() ? std::vector<float>(hn, 0.0f) : in.h0[stream];
  const int count = batch.streams[stream].count;
  out->assign(static_cast<size_t>(count) * d.Hv * d.dv, 0.0f);
  for (int h = 0; h < d.Hv; ++h) {
    const HeadJob j = make_job(batch, d, layer, stream, h);
    run_head<float, float>(j, h_final->data() + h * head, out->data() + static_cast<size_t>(h) * d.dv,
                           static_cast<size_t>(d.Hv) * d.dv, form, sums);
  }
}

void gdn_stream_lp(const Batch& batch, const LayerShape& shape, int layer, int stream,
                   GdnPrecision p, Tf32Sums sums, std::vector<float>* out,
                   std::vector<float>* h_final) {
  gdn_stream_chunks(batch, shape, layer, stream, gdn_chunk_form(p), sums, out, h_final);
}

}  // namespace detail
}  // namespace pb
