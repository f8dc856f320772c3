// host_gdn.cpp: the SSM (Gated DeltaNet) layer's host kernels: depthwise causal
// conv1d + SiLU with each stream's conv_state, then the gated delta rule per
// (stream, v head) on the fp32 state reached through h_state_ptrs.
// Invariants: stream rows come from the bounded cu_seqlens (host_kernel_util.h);
// a null or misaligned state pointer skips the stream (its output stays poisoned).
#include <Eigen/Dense>
#include <cmath>

#include "host_kernel_util.h"
#include "lib/bf16.h"

namespace pb::host_kernels {

namespace {

using MatF = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;

uint64_t round256(uint64_t n) { return (n + 255) & ~uint64_t(255); }

void check_args(const pb_ssm_layer_args& a) {
  const pb_ssm_shape& s = a.shape;
  if (s.num_k_heads <= 0 || s.num_v_heads <= 0 || s.num_v_heads % s.num_k_heads || s.k_dim <= 0 || s.v_dim <= 0 ||
      s.d_conv < 1 || s.conv_dim != 2 * s.num_k_heads * s.k_dim + s.num_v_heads * s.v_dim)
    throw KernelError{PB_ERR_INVALID, "ssm shape out of range"};
  const uint64_t T = a.metadata.total_tokens, N = a.metadata.batch_size;
  expect_tensor(a.x, PB_DTYPE_BF16, T * s.conv_dim, "x");
  expect_tensor(a.g, PB_DTYPE_F32, T * s.num_v_heads, "g");
  expect_tensor(a.beta, PB_DTYPE_F32, T * s.num_v_heads, "beta");
  expect_tensor(a.conv_weight, PB_DTYPE_BF16, uint64_t(s.conv_dim) * s.d_conv, "conv_weight");
  expect_tensor(a.conv_state, PB_DTYPE_BF16, N * s.conv_dim * (s.d_conv - 1), "conv_state");
  expect_tensor(a.out, PB_DTYPE_BF16, T * s.num_v_heads * s.v_dim, "out");
  if (a.workspace.bytes < ssm_workspace_bytes(s, a.metadata.total_tokens))
    throw KernelError{PB_ERR_INVALID, "workspace smaller than workspace_bytes asked for"};
}

}  // namespace

uint64_t ssm_workspace_bytes(const pb_ssm_shape& s, uint32_t total_tokens) {
  return round256(uint64_t(total_tokens) * s.conv_dim * 2);  // conv_out [T, conv_dim] bf16
}

void conv1d(const Options& o, const pb_ssm_layer_args& a) {
  check_args(a);
  const pb_batched_attn_metadata& m = a.metadata;
  const int N = static_cast<int>(m.batch_size);
  const int T = rows_of(m, a.x);
  const StreamRows rows = stream_rows(m, T);
  const int C = a.shape.conv_dim, K = a.shape.d_conv, W = K - 1;
  const bf16* x = at<const bf16>(a.x.data);
  const bf16* w = at<const bf16>(a.conv_weight.data);
  bf16* state = at<bf16>(a.conv_state.data);
  bf16* conv_out = at<bf16>(a.workspace.data);
  for_work(T, a.schedule, [&](int r) {
    // The stream holding row r: the last b with begin[b] <= r (rows outside every stream are skipped).
    const int b = static_cast<int>(std::upper_bound(rows.begin.begin(), rows.begin.end(), r) - rows.begin.begin()) - 1;
    if (b < 0 || b >= N) return;
    const int begin = rows.begin[b];
    for (int c = 0; c < C; ++c) {
      float u = 0;
      for (int j = 0; j < K; ++j) {
        const long src = r - W + j;  // >= begin - W, so the state index below is in [0, W)
        float xin;
        if (src >= begin || (o.conv_state_bleed && b > 0 && src >= 0))
          xin = to_float(x[src * C + c]);
        else
          xin = to_float(state[(size_t(b) * C + c) * W + (W + (src - begin))]);
        u += to_float(w[size_t(c) * K + j]) * xin;
      }
      conv_out[size_t(r) * C + c] = to_bf16(u / (1.0f + std::exp(-u)));
    }
  });
  // The new conv_state: the last W inputs of (old state ++ the stream's rows).
  for (int b = 0; b < N; ++b) {
    for (int c = 0; c < C; ++c) {
      bf16* st = &state[(size_t(b) * C + c) * W];
      std::vector<bf16> joined(st, st + W);
      for (int r = rows.begin[b]; r < rows.begin[b + 1]; ++r) joined.push_back(x[size_t(r) * C + c]);
      std::copy(joined.end() - W, joined.end(), st);
    }
  }
  // inputs-in-place: the activations also written over the input x (after the
  // conv_state above read it, so this run's state is right).
  if (o.inputs_in_place) std::copy_n(conv_out, size_t(T) * C, at<bf16>(a.x.data));
}

void gdn(const Options& o, const pb_ssm_layer_args& a) {
  check_args(a);
  const pb_batched_attn_metadata& m = a.metadata;
  const int N = static_cast<int>(m.batch_size);
  const int T = rows_of(m, a.x);
  const StreamRows rows = stream_rows(m, T);
  const uint64_t* ptrs = at<const uint64_t>(a.h_state_ptrs);
  if (!ptrs) throw KernelError{PB_ERR_INVALID, "null h_state_ptrs address"};
  const int Hk = a.shape.num_k_heads, Hv = a.shape.num_v_heads, dk = a.shape.k_dim, dv = a.shape.v_dim;
  const int C = a.shape.conv_dim;
  const float qscale = 1.0f / std::sqrt(static_cast<float>(dk));
  const bf16* conv_out = at<const bf16>(a.workspace.data);
  const float* g = at<const float>(a.g.data);
  const float* beta_in = at<const float>(a.beta.data);
  bf16* out = at<bf16>(a.out.data);
  auto state_of = [&](int b) -> float* {
    const uint64_t p = ptrs[b];
    return p && p % alignof(float) == 0 ? at<float>(p) : nullptr;
  };
  auto item = [&](int it) {
    const int b = it / Hv, h = it % Hv;
    float* base = state_of(b);
    if (!base) return;
    // gdn-state-race: this work item peeks at the next item's state element
    // before its own update, as a kernel racing with another CTA's update would;
    // what it sees depends on whether that item ran already.
    float peek = 0;
    if (o.gdn_state_race) {
      const int nb = (it + 1) % (N * Hv) / Hv, nh = (it + 1) % (N * Hv) % Hv;
      if (float* other = state_of(nb)) peek = other[size_t(nh) * dv * dk];
    }
    Eigen::Map<MatF> S(base + size_t(h) * dv * dk, dv, dk);
    const int kh = h / (Hv / Hk);
    Eigen::VectorXf q(dk), k(dk), v(dv);
    for (int r = rows.begin[b]; r < rows.begin[b + 1]; ++r) {
      const bf16* y = &conv_out[size_t(r) * C];
      for (int i = 0; i < dk; ++i) {
        q[i] = to_float(y[kh * dk + i]);
        k[i] = to_float(y[Hk * dk + kh * dk + i]);
      }
      for (int i = 0; i < dv; ++i) v[i] = to_float(y[2 * Hk * dk + h * dv + i]);
      q /= std::sqrt(q.squaredNorm() + 1e-6f);
      k /= std::sqrt(k.squaredNorm() + 1e-6f);
      const float decay = std::exp(g[size_t(r) * Hv + h]);
      const float beta = beta_in[size_t(r) * Hv + h];
      S *= decay;
      const Eigen::VectorXf delta = beta * (v - S * k);
      S.noalias() += delta * k.transpose();
      const Eigen::VectorXf ov = (S * q) * qscale;
      bf16* dst = &out[(size_t(r) * Hv + h) * dv];
      for (int i = 0; i < dv; ++i) dst[i] = to_bf16(ov[i]);
    }
    if (o.gdn_state_race) S(0, 0) += 0.5f * peek;
  };
  if (o.gdn_state_race) {
    // One thread, in work order: the race's outcome follows the schedule exactly,
    // as a GPU's would follow its CTA order.
    for (int i = 0; i < N * Hv; ++i) item(a.schedule ? N * Hv - 1 - i : i);
  } else {
    // grid-short-by-one: the grid leaves out the last stream's work items.
    const int grid = o.grid_short_by_one ? std::max(N - 1, 0) : N;
    for_work(grid * Hv, a.schedule, item);
  }
  // out-row-past-end: the last row stored again one row further, past out's end.
  const size_t row = size_t(Hv) * dv;
  if (o.out_row_past_end && T > 0) std::copy_n(&out[(T - 1) * row], row, &out[T * row]);
}

}  // namespace pb::host_kernels
