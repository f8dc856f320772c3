// gdn_bf16_merge_emulation_test.cpp: the bf16 prep's T = (I + A)^-1 (kernels/gdn_bf16.cu, its
// "host-emulated" regions, extracted at build time) run on the host, thread by thread and
// phase by phase as the CTA runs it (a barrier between phases), over A^T and T laid out as the
// kernel lays them out.
// Invariants checked: T equals the plain blocked form (diagonal blocks by substitution, then
// the blocks below by block diagonals, each sum in m order) bit for bit, since the kernel's
// left-looking schedule may move work between threads and steps but not reorder a sum; inside
// the diagonal blocks T is exactly zero above the diagonal (b(T) keeps those places); A^T is
// never written; (I + A) T = I to fp32 accuracy on A as the prep builds it (beta e^{G_i - G_j}
// k_i . k_j, unit k); a short chunk's schedule (nb < 4 blocks) reads none of A's rows past its
// blocks and forms those blocks bit for bit as the full one. And the check can fail: a schedule
// missing a step is caught.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <random>
#include <vector>

// ---- host stand-ins for what the kernel text uses from CUDA and kernels/gdn_bf16.h ----
#define __device__
#define __forceinline__ inline
namespace pb::kernels {
struct float2 {
  float x, y;
};
struct float4 {
  float x, y, z, w;
};
inline float2 make_float2(float a, float b) { return {a, b}; }
inline float4 make_float4(float a, float b, float c, float d) { return {a, b, c, d}; }
constexpr int kGdnBf16Chunk = 64;  // as kernels/gdn_bf16.h
using std::fmaf;
#include "gdn_bf16_host_emulated.inc"
}  // namespace pb::kernels

namespace {
using namespace pb::kernels;

// A as the prep builds it, in A^T's places (at_index); NaN in every other place, so a read of
// a place A does not hold shows in the result.
std::vector<float> make_at(unsigned seed, float gate_scale) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd(0.f, 1.f);
  std::uniform_real_distribution<float> ud(0.f, 1.f);
  const int d = 128;
  std::vector<float> k(kC * d), G(kC), beta(kC);
  float g = 0.f;
  for (int i = 0; i < kC; ++i) {
    double ss = 0;
    for (int x = 0; x < d; ++x) ss += double(k[i * d + x] = nd(rng)) * k[i * d + x];
    for (int x = 0; x < d; ++x) k[i * d + x] = float(k[i * d + x] / std::sqrt(ss));
    // a few near-parallel rows: the case where T's entries grow
    if (i % 9 == 4)
      for (int x = 0; x < d; ++x) k[i * d + x] = 0.9f * k[(i - 1) * d + x] + 0.1f * k[i * d + x];
    g -= gate_scale * ud(rng);
    G[i] = g;
    beta[i] = ud(rng);
  }
  std::vector<float> at(kC * kAS, NAN);
  for (int i = 0; i < kC; ++i)
    for (int j = 0; j < i; ++j) {
      float dot = 0.f;
      for (int x = 0; x < d; ++x) dot = std::fmaf(k[i * d + x], k[j * d + x], dot);
      at[at_index(i, j)] = beta[i] * std::exp(G[i] - G[j]) * dot;
    }
  return at;
}

// The kernel's schedule for a chunk whose tokens fill nb 16-row blocks (4: a full chunk): the
// lanes of the diagonal blocks d < nb invert them, then merge_sums / merge_finish for steps
// 1 .. nb - 1 with every one of the CTA's threads, a barrier between phases. skip_step: a
// step whose sums are left out (0: none), for the tests that the check can fail.
std::vector<float> kernel_inverse(std::vector<float>& at, int skip_step = 0, int nb = 4) {
  std::vector<float> T(kC * kTS, NAN), X(3 * 16 * kXS, NAN);
  for (int l = 0; l < 64; ++l)
    if ((l >> 4) < nb) invert_diag_block(at.data(), T.data(), 16 * (l >> 4), l & 15);
  const int nt = GdnBf16Traits::kPrepThreads;
  for (int s = 1; s < nb; ++s) {
    for (int tid = 0; tid < nt && s != skip_step; ++tid) merge_sums(s, at.data(), T.data(), X.data(), tid, nb);
    for (int tid = 0; tid < nt; ++tid) merge_finish(s, T.data(), X.data(), tid, nb);
  }
  return T;
}

// The plain blocked form, T [64][64] of its own: the oracle for the schedule.
std::vector<float> blocked_inverse(const std::vector<float>& at) {
  auto A = [&](int i, int j) { return at[at_index(i, j)]; };
  std::vector<float> T(kC * kC, 0.f);
  for (int d0 = 0; d0 < kC; d0 += 16)
    for (int c = 0; c < 16; ++c) {
      float x[16];
      for (int r = 0; r < 16; ++r) x[r] = r == c ? 1.f : 0.f;
      for (int j = 0; j < 15; ++j)
        for (int r = j + 1; r < 16; ++r) x[r] = std::fmaf(-A(d0 + r, d0 + j), x[j], x[r]);
      for (int r = 0; r < 16; ++r) T[(d0 + r) * kC + d0 + c] = x[r];
    }
  for (int dd = 1; dd < 4; ++dd)
    for (int j = 0; j + dd < 4; ++j) {
      const int i = j + dd;
      float X[16][16];
      for (int r = 0; r < 16; ++r)
        for (int c = 0; c < 16; ++c) {
          float acc = 0.f;
          for (int m = 16 * j; m < 16 * i; ++m) acc = std::fmaf(A(16 * i + r, m), T[m * kC + 16 * j + c], acc);
          X[r][c] = acc;
        }
      for (int r = 0; r < 16; ++r)
        for (int c = 0; c < 16; ++c) {
          float acc = 0.f;
          for (int m = 0; m <= r; ++m) acc = std::fmaf(T[(16 * i + r) * kC + 16 * i + m], X[m][c], acc);
          T[(16 * i + r) * kC + 16 * j + c] = -acc;
        }
    }
  return T;
}

// T's places b(T) reads, in the first nb block rows: on and below the diagonal, and above it
// inside the diagonal blocks.
int differing(const std::vector<float>& T, const std::vector<float>& want, int nb = 4) {
  int n = 0;
  for (int i = 0; i < 16 * nb; ++i)
    for (int j = 0; j < kC; ++j)
      if ((j >> 4) <= (i >> 4)) n += std::memcmp(&T[i * kTS + j], &want[i * kC + j], 4) != 0;
  return n;
}

TEST(GdnBf16MergeEmulation, BitIdenticalToTheBlockedFormAndAnInverse) {
  for (unsigned seed = 1; seed <= 12; ++seed) {
    const float gate_scale = seed % 3 == 0 ? 0.f : seed % 3 == 1 ? 0.05f : 0.5f;
    std::vector<float> at = make_at(seed, gate_scale);
    const std::vector<float> a0 = at;
    const std::vector<float> want = blocked_inverse(a0);
    const std::vector<float> T = kernel_inverse(at);
    double worst = 0, tmax = 0;
    for (int i = 0; i < kC; ++i)
      for (int j = 0; j <= i; ++j) {
        tmax = std::max(tmax, std::fabs(double(want[i * kC + j])));
        // ((I + A) T)_ij - delta_ij in double, T from the kernel
        double sum = T[i * kTS + j];
        for (int m = j; m < i; ++m) sum += double(a0[at_index(i, m)]) * T[m * kTS + j];
        const double e = std::fabs(sum - (i == j));
        worst = std::isfinite(e) ? std::max(worst, e) : INFINITY;  // a NaN must not hide
      }
    EXPECT_EQ(differing(T, want), 0) << "seed " << seed;
    EXPECT_EQ(std::memcmp(at.data(), a0.data(), at.size() * sizeof(float)), 0) << "A^T written, seed " << seed;
    EXPECT_LT(worst, 1e-5 * std::max(1.0, tmax)) << "seed " << seed << ", max |T| " << tmax;
    if (seed == 1) std::printf("seed 1: max |(I + A) T - I| %.3g, max |T| %.3g\n", worst, tmax);
  }
}

// The check can fail: a merge that leaves out one step's sums is caught.
TEST(GdnBf16MergeEmulation, CatchesAScheduleMissingAStep) {
  for (int skip = 1; skip <= 3; ++skip) {
    std::vector<float> at = make_at(7, 0.05f);
    const std::vector<float> want = blocked_inverse(at);
    EXPECT_GT(differing(kernel_inverse(at, skip), want), 0) << "step " << skip << " left out";
  }
}

// A short chunk forms its blocks alone and the same: with A's rows past its nb blocks NaN (a
// read of them shows), T's first nb block rows equal the full blocked form's bit for bit. And
// the check can fail: a short schedule missing its last step's sums is caught.
TEST(GdnBf16MergeEmulation, AShortChunkFormsItsBlocksAloneAndTheSame) {
  for (int nb = 1; nb <= 3; ++nb)
    for (unsigned seed = 1; seed <= 4; ++seed) {
      std::vector<float> at = make_at(seed, seed % 2 ? 0.05f : 0.5f);
      const std::vector<float> want = blocked_inverse(at);
      for (int i = 16 * nb; i < kC; ++i)
        for (int j = 0; j < i; ++j) at[at_index(i, j)] = NAN;
      EXPECT_EQ(differing(kernel_inverse(at, 0, nb), want, nb), 0) << "nb " << nb << ", seed " << seed;
      if (nb > 1) EXPECT_GT(differing(kernel_inverse(at, nb - 1, nb), want, nb), 0) << "nb " << nb << ", a step short";
    }
}

}  // namespace
