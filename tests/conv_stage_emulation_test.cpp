// conv_stage_emulation_test.cpp: the stage conv1d kernel (kernels/gdn_conv.cu,
// its "host-emulated" regions, extracted at build time) run on the host, thread by
// thread, with cp.async emulated adversarially: each copy poisons its slot when
// issued and lands only at the wait_group that must cover it. Invariants checked:
// outputs equal the row kernel's formula on every owned row, unowned rows untouched,
// no copy in flight at a thread's exit, no read outside x, w, conv_state (ASan job).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <deque>
#include <random>
#include <vector>

// ---- host stand-ins for what the kernel text uses from CUDA and common.cuh ----
namespace emu {
struct uint2 { uint32_t x, y; };
struct uint4 { uint32_t x, y, z, w; };
struct Dim { unsigned x = 0; };
Dim blockIdx, threadIdx, blockDim;
}  // namespace emu
#define __global__
#define __device__
#define __forceinline__ inline
#define __launch_bounds__(...)
#define __shared__ static

namespace pb::kernels {
using emu::blockDim;
using emu::blockIdx;
using emu::threadIdx;
using emu::uint2;
using emu::uint4;
using std::min;
inline float __uint_as_float(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
// The SFU forms of conv_silu, as their exact counterparts: this test checks the
// kernel's walk and ring, not its rounding (the reference checks that).
inline float __expf(float x) { return std::exp(x); }
inline float __fdividef(float a, float b) { return a / b; }
template <class T>
void __stcs(T* p, T v) {
  *p = v;
}
namespace detail {
inline float bf16_to_float(uint16_t b) { return __uint_as_float(uint32_t(b) << 16); }
inline uint16_t float_to_bf16(float f) {  // round to nearest even, as __float2bfloat16_rn
  uint32_t u;
  std::memcpy(&u, &f, 4);
  if (std::isnan(f)) return 0x7fc0;
  u += 0x7fffu + ((u >> 16) & 1u);
  return static_cast<uint16_t>(u >> 16);
}
inline uint32_t pack2(float lo, float hi) { return uint32_t(float_to_bf16(lo)) | (uint32_t(float_to_bf16(hi)) << 16); }
inline void unpack8(const uint4& u, float* f) {
  const uint32_t w[4] = {u.x, u.y, u.z, u.w};
  for (int i = 0; i < 4; ++i) {
    f[2 * i] = __uint_as_float(w[i] << 16);
    f[2 * i + 1] = __uint_as_float(w[i] & 0xffff0000u);
  }
}
inline int clamp_int(int v, int lo, int hi) { return v < lo ? lo : (v > hi ? hi : v); }
struct StreamRows {
  int begin, end;
  int count() const { return end - begin; }
};
inline StreamRows stream_rows(const int32_t* cu, int b, int total) {
  StreamRows s{clamp_int(cu[b], 0, total), clamp_int(cu[b + 1], 0, total)};
  if (s.end < s.begin) s.end = s.begin;
  return s;
}
// cp.async: a thread's open copies, its committed groups (oldest first), and the
// shared-memory base its ring offsets are relative to.
struct Copy {
  char* dst;
  const void* src;
  int bytes;
};
char* g_base = nullptr;
std::vector<Copy> g_open;
std::deque<std::vector<Copy>> g_groups;
int g_wait_slack = 0;  // > 0: wait_group leaves that many more groups in flight (a broken pipeline)
inline uint32_t smem_u32(const void* p) {
  g_base = static_cast<char*>(const_cast<void*>(p));
  return 0;
}
inline void cp_async(uint32_t dst, const void* src, int bytes) {
  std::memset(g_base + dst, 0xAB, bytes);  // poisoned until it lands
  g_open.push_back({g_base + dst, src, bytes});
}
inline void cp_async_commit() {
  g_groups.push_back(g_open);
  g_open.clear();
}
template <int N>
void cp_async_wait() {
  while (static_cast<int>(g_groups.size()) > N + g_wait_slack) {
    for (const Copy& c : g_groups.front()) std::memcpy(c.dst, c.src, c.bytes);
    g_groups.pop_front();
  }
}
}  // namespace detail
namespace {
template <int V>
void cp_async_v(uint32_t dst, const void* src) {
  detail::cp_async(dst, src, V * 2);
}
inline float opaque(float v) { return v; }
#include "gdn_conv_host_emulated.inc"

// The row kernel's semantics, one output at a time.
void conv_reference(const ConvParams& p, uint16_t* out) {
  using namespace detail;
  const int hist = p.d_conv - 1;
  for (int r = 0; r < p.total_tokens; ++r) {
    StreamRows rows;
    const int b = find_stream(p, r, &rows);
    if (b < 0) continue;
    for (int c = 0; c < p.conv_dim; ++c) {
      float u = 0.f;
      for (int j = 0; j < p.d_conv; ++j) {
        const int src = r - hist + j;
        const float xin = src >= rows.begin || (p.bleed && b > 0 && src >= 0)
                              ? bf16_to_float(p.x[size_t(src) * p.conv_dim + c])
                              : bf16_to_float(p.conv_state[(size_t(b) * p.conv_dim + c) * hist + hist + (src - rows.begin)]);
        u = fmaf(bf16_to_float(p.w[size_t(c) * p.d_conv + j]), xin, u);
      }
      out[size_t(r) * p.conv_dim + c] = float_to_bf16(u / (1.f + expf(-u)));
    }
  }
}

// Every thread of the launch, one after the other; false when one exits with a copy in flight.
template <int V>
bool run_stage(const ConvParams& p, int run) {
  const long long n = (p.total_tokens + run - 1LL) / run * (p.conv_dim / V);
  const int threads = ConvConfig::kThreads;
  emu::blockDim.x = threads;
  bool clean = true;
  for (long long t = 0; t < (n + threads - 1) / threads * threads; ++t) {
    emu::blockIdx.x = static_cast<unsigned>(t / threads);
    emu::threadIdx.x = static_cast<unsigned>(t % threads);
    detail::g_groups.clear();
    detail::g_open.clear();
    switch (p.d_conv) {
      case 2: conv1d_stage_kernel<2, V>(p, run); break;
      case 3: conv1d_stage_kernel<3, V>(p, run); break;
      default: conv1d_stage_kernel<4, V>(p, run); break;
    }
    for (const auto& g : detail::g_groups) clean = clean && g.empty();
    clean = clean && detail::g_open.empty();
  }
  return clean;
}

struct Tally {
  int batches = 0, differ = 0, in_flight = 0;
};

// `count` random batches through stage at V = 4 (ConvConfig::kStageVec) and V = 8 (where conv_dim
// allows): d_conv 2..4, conv_dim 4..48, 1..6 streams (empty and 1-row ones among
// them), trailing rows no stream owns, corrupted cu_seqlens (clamped: compared only
// for memory safety and in-flight copies), bleed on and off, runs 1..33 rows.
Tally emulate(int count, unsigned seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal;
  Tally t;
  for (int it = 0; it < count; ++it) {
    const int dc = 2 + rng() % 3, cd = 4 * (1 + rng() % 12), N = 1 + rng() % 6;
    std::vector<int32_t> cu(N + 1, 0);
    for (int b = 0; b < N; ++b) cu[b + 1] = cu[b] + static_cast<int>(rng() % 4 == 0 ? rng() % 3 : rng() % 40);
    const int T = std::max(1, cu[N] + static_cast<int>(rng() % 5 == 0 ? rng() % 7 : 0));
    if (rng() % 10 == 0) cu[rng() % (N + 1)] = static_cast<int>(rng() % 300) - 50;
    if (rng() % 10 == 0 && N > 1) std::swap(cu[1], cu[N]);
    const bool monotonic = cu[0] >= 0 && std::is_sorted(cu.begin(), cu.end());
    std::vector<uint16_t> x(size_t(T) * cd), w(size_t(cd) * dc), st(size_t(N) * cd * (dc - 1));
    for (auto* v : {&x, &w, &st})
      for (uint16_t& e : *v) e = detail::float_to_bf16(normal(rng));
    std::vector<uint16_t> want(x.size(), 0x7777), got(x.size(), 0x7777);
    ConvParams p{N, T, cd, dc, rng() % 4 == 0, cu.data(), x.data(), w.data(), st.data(), want.data()};
    conv_reference(p, want.data());
    const int run = 1 + rng() % 33;
    for (int v : {4, 8}) {
      if (cd % v) continue;
      std::fill(got.begin(), got.end(), 0x7777);
      p.conv_out = got.data();
      const bool clean = v == 4 ? run_stage<4>(p, run) : run_stage<8>(p, run);
      ++t.batches;
      t.in_flight += !clean;
      t.differ += monotonic && got != want;
    }
  }
  return t;
}

TEST(ConvStageEmulation, EqualsTheRowFormulaWithNothingInFlight) {
  const Tally t = emulate(400, 7);
  EXPECT_GT(t.batches, 400);
  EXPECT_EQ(t.differ, 0) << "of " << t.batches << " batches";
  EXPECT_EQ(t.in_flight, 0) << "of " << t.batches << " batches";
}

// The emulation has teeth: a wait_group that leaves one more row in flight lets the
// kernel read a slot whose copy has not landed, and the outputs differ.
TEST(ConvStageEmulation, CatchesAWaitThatLeavesARowInFlight) {
  detail::g_wait_slack = 1;
  const Tally t = emulate(100, 7);
  detail::g_wait_slack = 0;
  EXPECT_GT(t.differ, t.batches / 2) << "of " << t.batches << " batches";
}

}  // namespace
}  // namespace pb::kernels
