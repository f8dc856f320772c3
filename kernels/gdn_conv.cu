// gdn_conv.cu: the Gated DeltaNet depthwise causal conv1d (+ SiLU) over the
// packed q|k|v channels of all streams in one launch, then the conv_state
// update in a second launch (it must follow every read of the old state).
// Invariants: a stream's window never reads another stream's rows (except under
// the conv-state-bleed fault); x is never read before row 0; the new state is
// an exact bf16 copy of the last d_conv-1 inputs of (old state ++ stream rows).
#include "kernels/common.cuh"
#include "kernels/kernels.h"

namespace pb::kernels {

// Tuning knobs.
struct ConvConfig {
  static constexpr int kThreads = 256;    // threads per CTA (conv and state update)
  static constexpr int kVec = 8;          // channels per thread (16-byte loads) when conv_dim allows it
  static constexpr int kMaxDConv = 16;    // d_conv <= 16 (the state update holds d_conv-1 values in registers)
};

namespace {

struct ConvParams {
  int batch_size, total_tokens, conv_dim, d_conv;
  bool bleed;
  const int32_t* cu_seqlens;
  const uint16_t* x;
  const uint16_t* w;       // [conv_dim, d_conv]
  uint16_t* conv_state;    // [N, conv_dim, d_conv - 1]
  uint16_t* conv_out;
};

// The stream whose rows hold r (largest b with cu_seqlens[b] <= r), or -1.
__device__ __forceinline__ int find_stream(const ConvParams& p, int r, detail::StreamRows* rows) {
  using namespace detail;
  int lo = 0, hi = p.batch_size - 1, b = -1;
  while (lo <= hi) {
    const int mid = (lo + hi) >> 1;
    if (clamp_int(p.cu_seqlens[mid], 0, p.total_tokens) <= r) {
      b = mid;
      lo = mid + 1;
    } else {
      hi = mid - 1;
    }
  }
  if (b < 0) return -1;
  *rows = stream_rows(p.cu_seqlens, b, p.total_tokens);
  return r < rows->end ? b : -1;
}

// Version 2: one thread per (row, VEC channels); the d_conv window rows are
// re-read from global memory (L1 serves the overlap between neighbouring rows).
// With VEC = 8 and a compile-time DC the thread's 8 x DC taps are one
// contiguous, 16-byte aligned run of conv_w, read as DC 16-byte loads
// (version 1 read them as 8 * DC scalar loads: 1.11 ms for 16k x 8192 on the
// H200, 485 GB/s). DC = 0: d_conv at run time, scalar tap loads.
template <int VEC, int DC>
__global__ void __launch_bounds__(ConvConfig::kThreads) conv1d_kernel(ConvParams p) {
  using namespace detail;
  const int groups = p.conv_dim / VEC;
  const long long idx = static_cast<long long>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (idx >= static_cast<long long>(p.total_tokens) * groups) return;
  const int r = static_cast<int>(idx / groups);
  const int c0 = static_cast<int>(idx - static_cast<long long>(r) * groups) * VEC;
  StreamRows rows;
  const int b = find_stream(p, r, &rows);
  if (b < 0) return;  // a row no stream owns stays poisoned
  const int d_conv = DC > 0 ? DC : p.d_conv;
  const int hist = d_conv - 1;
  // Taps: wt[e * DC + j] = conv_w[c0 + e][j] (compile-time DC only).
  constexpr int kTaps = (VEC == 8 && DC > 0) ? VEC * DC : 1;
  float wt[kTaps];
  if constexpr (VEC == 8 && DC > 0) {
    const uint4* wp = reinterpret_cast<const uint4*>(p.w + static_cast<size_t>(c0) * DC);
#pragma unroll
    for (int q = 0; q < DC; ++q) unpack8(wp[q], wt + 8 * q);
  }
  float u[VEC];
#pragma unroll
  for (int e = 0; e < VEC; ++e) u[e] = 0.f;
  // u += w[.][j] * xin(r - hist + j), xin from x or (before the stream) conv_state.
  auto tap = [&](int j) {
    const int src = r - hist + j;
    float xin[VEC];
    if (src >= rows.begin || (p.bleed && b > 0 && src >= 0)) {
      const uint16_t* xp = p.x + static_cast<size_t>(src) * p.conv_dim + c0;
      if constexpr (VEC == 8) {
        unpack8(*reinterpret_cast<const uint4*>(xp), xin);
      } else {
#pragma unroll
        for (int e = 0; e < VEC; ++e) xin[e] = bf16_to_float(xp[e]);
      }
    } else {
      const uint16_t* sp = p.conv_state + (static_cast<size_t>(b) * p.conv_dim + c0) * hist +
                           (hist + (src - rows.begin));
#pragma unroll
      for (int e = 0; e < VEC; ++e) xin[e] = bf16_to_float(sp[static_cast<size_t>(e) * hist]);
    }
#pragma unroll
    for (int e = 0; e < VEC; ++e) {
      float w;
      if constexpr (VEC == 8 && DC > 0) w = wt[e * DC + j];
      else w = bf16_to_float(p.w[static_cast<size_t>(c0 + e) * d_conv + j]);
      u[e] = fmaf(w, xin[e], u[e]);
    }
  };
  if constexpr (DC > 0) {
#pragma unroll
    for (int j = 0; j < DC; ++j) tap(j);
  } else {
    for (int j = 0; j < d_conv; ++j) tap(j);
  }
  float y[VEC];
#pragma unroll
  for (int e = 0; e < VEC; ++e) y[e] = u[e] / (1.f + expf(-u[e]));  // silu
  uint16_t* op = p.conv_out + static_cast<size_t>(r) * p.conv_dim + c0;
  if constexpr (VEC == 8) {
    uint4 o;
    o.x = pack2(y[0], y[1]);
    o.y = pack2(y[2], y[3]);
    o.z = pack2(y[4], y[5]);
    o.w = pack2(y[6], y[7]);
    *reinterpret_cast<uint4*>(op) = o;
  } else {
#pragma unroll
    for (int e = 0; e < VEC; ++e) op[e] = float_to_bf16(y[e]);
  }
}

// One thread per (stream, channel): new[k] = (old ++ rows)[count + k], all
// values read before any is written (old and new share the buffer).
__global__ void __launch_bounds__(ConvConfig::kThreads) conv_state_update_kernel(ConvParams p) {
  using namespace detail;
  const long long idx = static_cast<long long>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (idx >= static_cast<long long>(p.batch_size) * p.conv_dim) return;
  const int b = static_cast<int>(idx / p.conv_dim);
  const int c = static_cast<int>(idx - static_cast<long long>(b) * p.conv_dim);
  const StreamRows rows = stream_rows(p.cu_seqlens, b, p.total_tokens);
  const int count = rows.count();
  const int hist = p.d_conv - 1;
  uint16_t* st = p.conv_state + (static_cast<size_t>(b) * p.conv_dim + c) * hist;
  uint16_t v[ConvConfig::kMaxDConv - 1];
#pragma unroll
  for (int k = 0; k < ConvConfig::kMaxDConv - 1; ++k) {
    if (k < hist) {
      const int i = count + k;  // index into old ++ rows
      v[k] = i < hist ? st[i] : p.x[static_cast<size_t>(rows.begin + i - hist) * p.conv_dim + c];
    }
  }
#pragma unroll
  for (int k = 0; k < ConvConfig::kMaxDConv - 1; ++k)
    if (k < hist) st[k] = v[k];
}

}  // namespace

cudaError_t launch_conv1d(cudaStream_t stream, const LayerShape& shape, uint32_t batch_size,
                          uint32_t total_tokens, uint64_t cu_seqlens, const bf16* x,
                          const bf16* conv_w, bf16* conv_state, bf16* conv_out,
                          bool conv_state_bleed) {
  ConvParams p;
  p.batch_size = static_cast<int>(batch_size);
  p.total_tokens = static_cast<int>(total_tokens);
  p.conv_dim = 2 * shape.num_k_heads * shape.k_dim + shape.num_v_heads * shape.v_dim;
  p.d_conv = shape.d_conv;
  if (p.conv_dim <= 0 || p.d_conv < 2 || p.d_conv > ConvConfig::kMaxDConv) return cudaErrorInvalidValue;
  if (batch_size == 0) return cudaSuccess;
  p.bleed = conv_state_bleed;
  p.cu_seqlens = reinterpret_cast<const int32_t*>(cu_seqlens);
  p.x = reinterpret_cast<const uint16_t*>(x);
  p.w = reinterpret_cast<const uint16_t*>(conv_w);
  p.conv_state = reinterpret_cast<uint16_t*>(conv_state);
  p.conv_out = reinterpret_cast<uint16_t*>(conv_out);
  constexpr int kT = ConvConfig::kThreads;
  if (total_tokens > 0) {
    if (p.conv_dim % ConvConfig::kVec == 0) {
      const long long n = static_cast<long long>(total_tokens) * (p.conv_dim / ConvConfig::kVec);
      const unsigned grid = static_cast<unsigned>((n + kT - 1) / kT);
      if (p.d_conv == 4) conv1d_kernel<ConvConfig::kVec, 4><<<grid, kT, 0, stream>>>(p);
      else conv1d_kernel<ConvConfig::kVec, 0><<<grid, kT, 0, stream>>>(p);
    } else {
      const long long n = static_cast<long long>(total_tokens) * p.conv_dim;
      conv1d_kernel<1, 0><<<static_cast<unsigned>((n + kT - 1) / kT), kT, 0, stream>>>(p);
    }
    const cudaError_t e = cudaGetLastError();
    if (e != cudaSuccess) return e;
  }
  const long long n = static_cast<long long>(batch_size) * p.conv_dim;
  conv_state_update_kernel<<<static_cast<unsigned>((n + kT - 1) / kT), kT, 0, stream>>>(p);
  return cudaGetLastError();
}

}  // namespace pb::kernels
