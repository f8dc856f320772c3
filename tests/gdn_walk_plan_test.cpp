// gdn_walk_plan_test.cpp: the chunked GDN walk's plan (kernels/gdn_walk_plan.h), on the
// host: which prefix of the launch order gets an SM per item. Batches whose long stream's
// chain outlasts the rest take it; uniform batches, two equal long streams, and a long
// stream whose short company is over quickly do not; the prefix always leaves SMs for the
// rest. The batches are the ones measured on an H100 (132 SMs) in session 39 (kernels/
// PERF-NOTES.md), with per_stream = v heads x v blocks of 64 rows.
#include <gtest/gtest.h>

#include <algorithm>
#include <utility>
#include <vector>

#include "kernels/gdn_walk_plan.h"

namespace {

using pb::kernels::plan_gdn_walk_exclusive;

// Chunk counts (32 tokens a chunk) of streams of these token counts, longest first as the
// launch order puts them.
std::vector<int32_t> chunks_of(std::vector<int> tokens) {
  std::sort(tokens.begin(), tokens.end(), [](int a, int b) { return a > b; });
  std::vector<int32_t> c;
  for (int t : tokens) c.push_back((t + 31) / 32);
  return c;
}

constexpr int kSms = 132;

TEST(GdnWalkPlan, OneLongStreamAmongShortOnesGetsItsSms) {
  // issue 13's mixed batch at 16 / 32 heads, d128: 32 heads x 2 blocks; measured 1.17x.
  EXPECT_EQ(plan_gdn_walk_exclusive(chunks_of({7, 130, 511, 1024, 2048, 4096, 333, 8192}), 64, kSms), 1);
}

TEST(GdnWalkPlan, UniformBatchesShare) {
  EXPECT_EQ(plan_gdn_walk_exclusive(chunks_of(std::vector<int>(8, 2048)), 64, kSms), 0);
  EXPECT_EQ(plan_gdn_walk_exclusive(chunks_of(std::vector<int>(32, 512)), 64, kSms), 0);
  EXPECT_EQ(plan_gdn_walk_exclusive(chunks_of(std::vector<int>(4, 2048)), 128, kSms), 0);
}

TEST(GdnWalkPlan, TwoEqualLongStreamsShare) {
  // one of two equal chains alone gains nothing while the other walks shared (measured
  // 0.98x when the first took its SMs)
  std::vector<int> t = {6000, 6000};
  for (int i = 0; i < 12; ++i) t.push_back(300);
  EXPECT_EQ(plan_gdn_walk_exclusive(chunks_of(t), 64, kSms), 0);
}

TEST(GdnWalkPlan, ShortCompanyOverQuicklyShares) {
  // 4000 tokens among twelve of 100 at d64 (32 heads x 1 block): the others finish within a
  // few steps, after which the long chain walks alone anyway (measured 0.96x when planned)
  std::vector<int> t = {4000};
  for (int i = 0; i < 12; ++i) t.push_back(100);
  EXPECT_EQ(plan_gdn_walk_exclusive(chunks_of(t), 32, kSms), 0);
}

TEST(GdnWalkPlan, PrefixLeavesSmsForTheRest) {
  // one stream's items fill the GPU: no prefix fits
  EXPECT_EQ(plan_gdn_walk_exclusive(chunks_of({65536, 64, 64, 64}), 132, kSms), 0);
  // n long streams (512 chunks) among forty of 512 tokens: whatever is taken leaves SMs
  for (int per_stream : {8, 16, 32, 64})
    for (int n : {1, 2, 4, 8, 16}) {
      std::vector<int> t(n, 16384);
      t.resize(n + 40, 512);
      EXPECT_LT(plan_gdn_walk_exclusive(chunks_of(t), per_stream, kSms) * per_stream, kSms) << per_stream << " " << n;
    }
}

TEST(GdnWalkPlan, SeveralLongStreamsTakeHalfTheSms) {
  // 64 items of long chains among forty short streams: all of them alone beats sharing
  for (auto [n, per_stream] : {std::pair{8, 8}, std::pair{4, 16}, std::pair{2, 32}}) {
    std::vector<int> t(n, 16384);
    t.resize(n + 40, 512);
    EXPECT_EQ(plan_gdn_walk_exclusive(chunks_of(t), per_stream, kSms), n) << per_stream;
  }
  // a lone long stream among the same forty: they are over in a few steps, it shares little
  std::vector<int> t = {16384};
  t.resize(41, 512);
  EXPECT_EQ(plan_gdn_walk_exclusive(chunks_of(t), 16, kSms), 0);
}

TEST(GdnWalkPlan, NothingToPlan) {
  EXPECT_EQ(plan_gdn_walk_exclusive({}, 64, kSms), 0);
  EXPECT_EQ(plan_gdn_walk_exclusive({256}, 64, kSms), 0);
  EXPECT_EQ(plan_gdn_walk_exclusive(chunks_of({8192, 7}), 0, kSms), 0);
  EXPECT_EQ(plan_gdn_walk_exclusive(chunks_of({8192, 7}), 64, 0), 0);
}

TEST(GdnWalkPlan, ShortestFirstOrderTakesNoPrefix) {
  // the reversed launch order (--inject schedule): a prefix of short streams never helps
  std::vector<int32_t> c = chunks_of({7, 130, 511, 1024, 2048, 4096, 333, 8192});
  std::reverse(c.begin(), c.end());
  EXPECT_EQ(plan_gdn_walk_exclusive(c, 64, kSms), 0);
}

}  // namespace
