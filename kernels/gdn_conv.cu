// gdn_conv.cu: the Gated DeltaNet depthwise causal conv1d (+ SiLU) over the
// packed q|k|v channels of all streams in one launch, then the conv_state
// update in a second launch (it must follow every read of the old state).
// Three conv kernels with the same arithmetic (bit-identical outputs): "window"
// (a thread slides down a run of tokens, each x row read once), "stage" (the
// same walk on 4 channels with x staged through shared memory by cp.async) and
// "row" (one thread per (row, 8 channels), re-reading the window; the oracle).
// Invariants: a stream's window never reads another stream's rows (except under
// the conv-state-bleed fault); x is never read before row 0; the new state is
// an exact bf16 copy of the last d_conv-1 inputs of (old state ++ stream rows).
#include <algorithm>

#include "kernels/common.cuh"
#include "kernels/kernels.h"

namespace pb::kernels {

// host-emulated: begin (tests/conv_stage_emulation_test.cpp compiles this on the host)
// Tuning knobs.
struct ConvConfig {
  static constexpr int kThreads = 256;    // threads per CTA (conv and state update)
  static constexpr int kVec = 8;          // channels per thread (16-byte loads) when conv_dim allows it
  static constexpr int kMaxDConv = 16;    // d_conv <= 16 (the state update holds d_conv-1 values in registers)
  static constexpr int kMaxRun = 32;      // window kernel: most tokens per thread
  static constexpr int kMinRun = 4;       // window kernel: fewest tokens per thread (1 was 1.4x slower on 600-token batches)
  static constexpr int kBatch = 4;        // window kernel: x rows loaded before they are used
  static constexpr int kStageVec = 4;     // stage kernel: channels per thread (8-byte loads; half the window kernel's registers)
  static constexpr int kStages = 8;       // stage kernel: shared-memory ring slots per thread (kStages - 1 rows in flight)
  static constexpr int kStageUnroll = 4;  // stage kernel: rows per unrolled step (>= d_conv - 1: the window rotates by renaming)
  static constexpr int kStageMinBlocks = 4;  // stage kernel: CTAs per SM asked of ptxas (<= 64 registers: 32 warps per SM)
};
// host-emulated: end

namespace {

// host-emulated: begin (tests/conv_stage_emulation_test.cpp compiles this on the host)
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

// SiLU, the one formula of every conv kernel: u / (1 + e^-u) on the special function
// unit (__expf: ex2.approx, 2 + 1.17 |u| fp32 ulps; __fdividef: rcp.approx, 2 ulps;
// 0 where 1 + e^-u > 2^126, i.e. u < -87.3, where the exact value is below 1e-35),
// against the bf16 rounding that follows, 2^16 fp32 ulps wide. The accurate expf and
// the IEEE divide made the stage kernel issue-bound at 58% of DRAM bandwidth; this
// form runs it at 77-83% (kernels/PERF-NOTES.md, "conv1d v5"; docs/TOLERANCES.md).
__device__ __forceinline__ float conv_silu(float u) { return __fdividef(u, 1.f + __expf(-u)); }
// host-emulated: end

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
  for (int e = 0; e < VEC; ++e) y[e] = conv_silu(u[e]);
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

// Asks L2 for the line holding p (no register holds the result): the window
// kernel's next rows are on their way while this batch computes.
__device__ __forceinline__ void prefetch_l2(const void* p) { asm volatile("prefetch.global.L2 [%0];" ::"l"(p)); }

// Version 3 ("window"): one thread per (run of `run` consecutive rows, 8
// channels); it keeps the DC-1 previous inputs in registers and slides down the
// run, so each x row is read once (plus DC-1 rows at a run's or a stream's start).
// kBatch rows are in flight per thread, the next kBatch prefetched to L2, and
// the output is stored streaming (__stcs). Threads of a warp hold neighbouring
// channel groups of the same rows: every load and store is one 512-byte run.
// The window at a stream's start comes from conv_state, exactly as the row
// kernel reads it; a run crossing a stream boundary looks the next stream up
// (find_stream, bounds clamped) and reloads its window. Per output the taps are
// fmaf'd in the row kernel's order (j = 0 .. DC-1 from 0.f): bit-identical.
template <int DC>
__global__ void __launch_bounds__(ConvConfig::kThreads) conv1d_window_kernel(ConvParams p, int run) {
  using namespace detail;
  constexpr int kHist = DC - 1;
  constexpr int kB = ConvConfig::kBatch;
  const int groups = p.conv_dim / 8;
  const long long idx = static_cast<long long>(blockIdx.x) * blockDim.x + threadIdx.x;
  const long long runs = (static_cast<long long>(p.total_tokens) + run - 1) / run;
  if (idx >= runs * groups) return;
  const long long ri = idx / groups;
  const int c0 = static_cast<int>(idx - ri * groups) * 8;
  const int r0 = static_cast<int>(ri * run);
  const int r1 = min(p.total_tokens, r0 + run);
  float wt[8 * DC];  // wt[e * DC + j] = conv_w[c0 + e][j]
  {
    const uint4* wp = reinterpret_cast<const uint4*>(p.w + static_cast<size_t>(c0) * DC);
#pragma unroll
    for (int q = 0; q < DC; ++q) unpack8(wp[q], wt + 8 * q);
  }
  const uint16_t* xc = p.x + c0;
  uint16_t* oc = p.conv_out + c0;
  const size_t ld = static_cast<size_t>(p.conv_dim);
  float win[kHist > 0 ? kHist : 1][8];  // win[j] = input row r - kHist + j
  // One output row from the window and xin (row r), then slide the window.
  auto step = [&](int r, const float* xin) {
    float y[8];
#pragma unroll
    for (int e = 0; e < 8; ++e) {
      float u = 0.f;
#pragma unroll
      for (int j = 0; j < kHist; ++j) u = fmaf(wt[e * DC + j], win[j][e], u);
      u = fmaf(wt[e * DC + kHist], xin[e], u);
      y[e] = conv_silu(u);
    }
    uint4 o;
    o.x = pack2(y[0], y[1]);
    o.y = pack2(y[2], y[3]);
    o.z = pack2(y[4], y[5]);
    o.w = pack2(y[6], y[7]);
    __stcs(reinterpret_cast<uint4*>(oc + static_cast<size_t>(r) * ld), o);  // streaming: read by the next kernel, not here
#pragma unroll
    for (int j = 0; j + 1 < kHist; ++j)
#pragma unroll
      for (int e = 0; e < 8; ++e) win[j][e] = win[j + 1][e];
    if constexpr (kHist > 0) {
#pragma unroll
      for (int e = 0; e < 8; ++e) win[kHist - 1][e] = xin[e];
    }
  };
  StreamRows rows{0, 0};
  int b = -1;
  for (int r = r0; r < r1;) {
    if (b < 0 || r >= rows.end) {  // r starts a run or a stream: look its stream up, load the window
      b = find_stream(p, r, &rows);
      if (b < 0) {  // a row no stream owns stays poisoned
        ++r;
        continue;
      }
#pragma unroll
      for (int j = 0; j < kHist; ++j) {
        const int src = r - kHist + j;
        if (src >= rows.begin || (p.bleed && b > 0 && src >= 0)) {
          unpack8(*reinterpret_cast<const uint4*>(xc + static_cast<size_t>(src) * ld), win[j]);
        } else {
          const uint16_t* sp = p.conv_state + (static_cast<size_t>(b) * p.conv_dim + c0) * kHist +
                               (kHist + (src - rows.begin));
#pragma unroll
          for (int e = 0; e < 8; ++e) win[j][e] = bf16_to_float(sp[static_cast<size_t>(e) * kHist]);
        }
      }
    }
    const int end = min(r1, rows.end);  // this stream's rows of the run: [r, end)
    for (; r + kB <= end; r += kB) {
#pragma unroll
      for (int t = kB; t < 2 * kB; ++t)
        if (r + t < end) prefetch_l2(xc + static_cast<size_t>(r + t) * ld);
      uint4 raw[kB];
#pragma unroll
      for (int t = 0; t < kB; ++t) raw[t] = *reinterpret_cast<const uint4*>(xc + static_cast<size_t>(r + t) * ld);
#pragma unroll
      for (int t = 0; t < kB; ++t) {
        float xin[8];
        unpack8(raw[t], xin);
        step(r + t, xin);
      }
    }
    for (; r < end; ++r) {
      float xin[8];
      unpack8(*reinterpret_cast<const uint4*>(xc + static_cast<size_t>(r) * ld), xin);
      step(r, xin);
    }
  }
}

// host-emulated: begin (tests/conv_stage_emulation_test.cpp compiles this on the host)
// The stage kernel's vectors of V bf16 channels: V = 4 (8 bytes, cp.async .ca,
// the only hint cp.async allows below 16 bytes) or V = 8 (16 bytes, .cg).
template <int V> struct BfVec;
template <> struct BfVec<4> { using T = uint2; };
template <> struct BfVec<8> { using T = uint4; };
__device__ __forceinline__ void unpack_v(const uint2& u, float* f) {
  f[0] = __uint_as_float(u.x << 16);
  f[1] = __uint_as_float(u.x & 0xffff0000u);
  f[2] = __uint_as_float(u.y << 16);
  f[3] = __uint_as_float(u.y & 0xffff0000u);
}
__device__ __forceinline__ void unpack_v(const uint4& u, float* f) { detail::unpack8(u, f); }
__device__ __forceinline__ void pack_v(const float* y, uint2* o) {
  o->x = detail::pack2(y[0], y[1]);
  o->y = detail::pack2(y[2], y[3]);
}
__device__ __forceinline__ void pack_v(const float* y, uint4* o) {
  o->x = detail::pack2(y[0], y[1]);
  o->y = detail::pack2(y[2], y[3]);
  o->z = detail::pack2(y[4], y[5]);
  o->w = detail::pack2(y[6], y[7]);
}
// host-emulated: end
template <int V>
__device__ __forceinline__ void cp_async_v(uint32_t dst, const void* src) {
  if constexpr (V == 4) asm volatile("cp.async.ca.shared.global [%0], [%1], 8;\n" ::"r"(dst), "l"(src) : "memory");
  else detail::cp_async16(dst, src);
}
// The value itself, opaque to the compiler: an input unpacked once stays one
// register instead of being re-unpacked (a shift or a mask) at each of its DC uses.
__device__ __forceinline__ float opaque(float v) {
  float r;
  asm("mov.b32 %0, %1;" : "=f"(r) : "f"(v));
  return r;
}

// host-emulated: begin (tests/conv_stage_emulation_test.cpp compiles this on the host)
// Version 4 ("stage"): the window kernel's walk (one thread per run of `run`
// rows, the DC-1 previous inputs held in registers, a stream's window from
// conv_state or, past its start, from x; find_stream at a run's or a stream's
// start) with two changes that cut registers and put more bytes in flight:
// - V = 4 channels per thread (8-byte accesses; a warp still moves 256
//   contiguous bytes per row): 4 x DC fp32 taps and a 3 x 4 window instead of
//   8 x DC and 3 x 8, so ptxas fits 64 registers (32 warps per SM, not 16);
//   (ConvConfig::kStageVec; 8, with 16-byte copies at 96 registers, measured
//   slower on the H200: kernels/PERF-NOTES.md "conv1d v4");
// - x rows are copied by cp.async into a per-thread ring of kStages slots in
//   shared memory (slot s of thread t at ring[s][t]: a warp's reads hit
//   consecutive words, no bank conflict), kStages - 1 rows ahead of the row
//   being computed, held by no register. Each thread reads only the slots it
//   filled itself, so cp.async.wait_group orders them and no barrier is
//   needed. The slot refilled is the one read in the previous row, whose value
//   that row's store has already consumed (no write-after-read race).
// Every row of the run, owned by a stream or not, passes through the ring once
// and in order (one commit group per row; the group of row i is the i-th), so
// wait_group<kStages - 2> always means "row i has landed". The arithmetic per
// output is the window kernel's: u = 0; u = fmaf(w[j], x[r - hist + j], u) for
// j = 0 .. DC-1; y = conv_silu(u); round to bf16: bit-identical to it and to the
// row kernel.
template <int DC, int V>
__global__ void __launch_bounds__(ConvConfig::kThreads, V == 4 ? ConvConfig::kStageMinBlocks : 2)
    conv1d_stage_kernel(ConvParams p, int run) {
  using namespace detail;
  using Vec = typename BfVec<V>::T;
  constexpr int kHist = DC - 1;
  constexpr int kS = ConvConfig::kStages;
  constexpr uint32_t kSlotBytes = ConvConfig::kThreads * sizeof(Vec);
  static_assert(kHist >= 1 && kHist <= ConvConfig::kStageUnroll, "the unrolled step must cover the window");
  __shared__ Vec ring[kS][ConvConfig::kThreads];
  const int groups = p.conv_dim / V;
  const long long idx = static_cast<long long>(blockIdx.x) * blockDim.x + threadIdx.x;
  const long long runs = (static_cast<long long>(p.total_tokens) + run - 1) / run;
  if (idx >= runs * groups) return;
  const long long ri = idx / groups;
  const int c0 = static_cast<int>(idx - ri * groups) * V;
  const int r0 = static_cast<int>(ri * run);
  const int r1 = min(p.total_tokens, r0 + run);
  const uint16_t* xc = p.x + c0;
  uint16_t* oc = p.conv_out + c0;
  const size_t ld = static_cast<size_t>(p.conv_dim);
  const uint32_t ring0 = smem_u32(&ring[0][threadIdx.x]);
  // Rows r0 .. r0 + kS - 2 on their way before the taps are even read.
#pragma unroll
  for (int s = 0; s < kS - 1; ++s) {
    if (r0 + s < r1) cp_async_v<V>(ring0 + s * kSlotBytes, xc + static_cast<size_t>(r0 + s) * ld);
    cp_async_commit();
  }
  float wt[V * DC];  // wt[e * DC + j] = conv_w[c0 + e][j]: DC vector loads of one contiguous run
  {
    const Vec* wp = reinterpret_cast<const Vec*>(p.w + static_cast<size_t>(c0) * DC);
#pragma unroll
    for (int q = 0; q < DC; ++q) unpack_v(wp[q], wt + V * q);
#pragma unroll
    for (int i = 0; i < V * DC; ++i) wt[i] = opaque(wt[i]);  // unpacked once, not at every use
  }
  // Row r (called for r = r0, r0 + 1, ... in order) once it has landed; then
  // row r + kS - 1 is sent into the slot row r - 1 used.
  static_assert((kS & (kS - 1)) == 0 && kS >= 2, "ring slots: a power of two");
  auto next = [&](int r) -> Vec {
    cp_async_wait<kS - 2>();
    const uint32_t slot = static_cast<uint32_t>(r - r0) & (kS - 1);  // r >= r0
    const Vec v = ring[slot][threadIdx.x];
    const int ahead = r + kS - 1;
    if (ahead < r1) cp_async_v<V>(ring0 + ((slot + kS - 1) & (kS - 1)) * kSlotBytes, xc + static_cast<size_t>(ahead) * ld);
    cp_async_commit();
    return v;
  };
  float win[kHist][V];  // win[j] = input row r - kHist + j
  // One output row from the window and row r's input, then slide the window.
  auto step = [&](int r, const Vec& raw) {
    float xin[V], y[V];
    unpack_v(raw, xin);
#pragma unroll
    for (int e = 0; e < V; ++e) xin[e] = opaque(xin[e]);
#pragma unroll
    for (int e = 0; e < V; ++e) {
      float u = 0.f;
#pragma unroll
      for (int j = 0; j < kHist; ++j) u = fmaf(wt[e * DC + j], win[j][e], u);
      u = fmaf(wt[e * DC + kHist], xin[e], u);
      y[e] = conv_silu(u);
    }
    Vec o;
    pack_v(y, &o);
    __stcs(reinterpret_cast<Vec*>(oc + static_cast<size_t>(r) * ld), o);  // streaming: read by the next kernel, not here
#pragma unroll
    for (int j = 0; j + 1 < kHist; ++j)
#pragma unroll
      for (int e = 0; e < V; ++e) win[j][e] = win[j + 1][e];
#pragma unroll
    for (int e = 0; e < V; ++e) win[kHist - 1][e] = xin[e];
  };
  StreamRows rows{0, 0};
  int b = -1;
  for (int r = r0; r < r1;) {
    if (b < 0 || r >= rows.end) {  // r starts a run or a stream: look its stream up, load the window
      b = find_stream(p, r, &rows);
      if (b < 0) {  // a row no stream owns stays poisoned (its input still passes through the ring)
        next(r);
        ++r;
        continue;
      }
#pragma unroll
      for (int j = 0; j < kHist; ++j) {
        const int src = r - kHist + j;
        if (src >= rows.begin || (p.bleed && b > 0 && src >= 0)) {  // rows before r: read directly, not staged
          unpack_v(*reinterpret_cast<const Vec*>(xc + static_cast<size_t>(src) * ld), win[j]);
        } else {
          const uint16_t* sp = p.conv_state + (static_cast<size_t>(b) * p.conv_dim + c0) * kHist +
                               (kHist + (src - rows.begin));
#pragma unroll
          for (int e = 0; e < V; ++e) win[j][e] = bf16_to_float(sp[static_cast<size_t>(e) * kHist]);
        }
      }
    }
    const int end = min(r1, rows.end);  // this stream's rows of the run: [r, end)
    constexpr int kU = ConvConfig::kStageUnroll;
    for (; r + kU <= end; r += kU) {
#pragma unroll
      for (int t = 0; t < kU; ++t) step(r + t, next(r + t));
    }
    for (; r < end; ++r) step(r, next(r));
  }
}
// host-emulated: end

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

// Tokens per thread of the window kernel: long runs (fewer window reloads)
// while the grid still fills the device twice, within [kMinRun, kMaxRun].
// Depends on the scalars only (graph-safe).
int conv_window_run(uint32_t total_tokens, int groups) {
  const long long threads = 2LL * detail::sm_count() * 2048;  // two full waves of resident threads
  const long long run = static_cast<long long>(total_tokens) * groups / threads;
  return static_cast<int>(std::min<long long>(ConvConfig::kMaxRun, std::max<long long>(ConvConfig::kMinRun, run)));
}
// The walk's launch for `groups` channel groups a row: the run and the grid of
// kThreads-thread CTAs, one thread per (run, group).
struct WalkLaunch {
  int run;
  unsigned grid;
};
WalkLaunch walk_launch(uint32_t total_tokens, int groups) {
  const int run = conv_window_run(total_tokens, groups);
  const long long n = (static_cast<long long>(total_tokens) + run - 1) / run * groups;
  return {run, static_cast<unsigned>((n + ConvConfig::kThreads - 1) / ConvConfig::kThreads)};
}

}  // namespace

bool conv1d_stage_supports(const LayerShape& shape) {
  const int conv_dim = 2 * shape.num_k_heads * shape.k_dim + shape.num_v_heads * shape.v_dim;
  return conv_dim > 0 && conv_dim % ConvConfig::kStageVec == 0 && shape.d_conv >= 2 && shape.d_conv <= 4;
}

bool conv1d_window_supports(const LayerShape& shape) {
  const int conv_dim = 2 * shape.num_k_heads * shape.k_dim + shape.num_v_heads * shape.v_dim;
  return conv_dim > 0 && conv_dim % ConvConfig::kVec == 0 && shape.d_conv >= 2 && shape.d_conv <= 4;
}

cudaError_t launch_conv1d(cudaStream_t stream, const LayerShape& shape, uint32_t batch_size,
                          uint32_t total_tokens, uint64_t cu_seqlens, const bf16* x,
                          const bf16* conv_w, bf16* conv_state, bf16* conv_out,
                          bool conv_state_bleed, Conv1dImpl impl) {
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
    if (impl == Conv1dImpl::stage && conv1d_stage_supports(shape)) {
      const auto [run, grid] = walk_launch(total_tokens, p.conv_dim / ConvConfig::kStageVec);
      switch (p.d_conv) {
        case 2: conv1d_stage_kernel<2, ConvConfig::kStageVec><<<grid, kT, 0, stream>>>(p, run); break;
        case 3: conv1d_stage_kernel<3, ConvConfig::kStageVec><<<grid, kT, 0, stream>>>(p, run); break;
        default: conv1d_stage_kernel<4, ConvConfig::kStageVec><<<grid, kT, 0, stream>>>(p, run); break;
      }
    } else if (impl == Conv1dImpl::window && conv1d_window_supports(shape)) {
      const auto [run, grid] = walk_launch(total_tokens, p.conv_dim / ConvConfig::kVec);
      switch (p.d_conv) {
        case 2: conv1d_window_kernel<2><<<grid, kT, 0, stream>>>(p, run); break;
        case 3: conv1d_window_kernel<3><<<grid, kT, 0, stream>>>(p, run); break;
        default: conv1d_window_kernel<4><<<grid, kT, 0, stream>>>(p, run); break;
      }
    } else if (p.conv_dim % ConvConfig::kVec == 0) {
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
