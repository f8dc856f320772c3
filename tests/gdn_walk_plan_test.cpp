// gdn_walk_plan_test.cpp: the chunked GDN walk's plan (kernels/gdn_walk_plan.h), on the
// host: the two schedules it simulates, worked by hand on small cases and bounded on large
// ones, and its choice on the batches measured on an H100 (132 SMs) in sessions 40 and 41
// (kernels/PERF-NOTES.md): the queue for one long stream among short ones and for a first
// wave of long chains, the grid for uniform batches and for a shortest-first launch order. per_stream = v heads x v blocks.
#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>
#include <vector>

#include "kernels/gdn_walk_plan.h"

namespace {

using pb::kernels::gdn_walk_steps;
using pb::kernels::GdnWalkPlanTraits;
using pb::kernels::plan_gdn_walk_queue;

// Chunk counts (32 tokens a chunk) of streams of these token counts, longest first as the
// launch order puts them.
std::vector<int32_t> chunks_of(std::vector<int> tokens) {
  std::sort(tokens.begin(), tokens.end(), [](int a, int b) { return a > b; });
  std::vector<int32_t> c;
  for (int t : tokens) c.push_back((t + 31) / 32);
  return c;
}

constexpr int kSms = 132;
constexpr double kS = GdnWalkPlanTraits::kSharedStep, kI = GdnWalkPlanTraits::kItemSteps;

TEST(GdnWalkPlan, SimulatesSmallSchedulesByHand) {
  // two items of 3 and 1 chunks on two SMs: each alone, the longer one sets the time
  EXPECT_DOUBLE_EQ(gdn_walk_steps({3, 1}, 1, 2, 1), 3 + kI);
  EXPECT_DOUBLE_EQ(gdn_walk_steps({3, 1}, 1, 2, 2), 3 + kI);
  // on one SM: the queue walks them one after the other
  EXPECT_DOUBLE_EQ(gdn_walk_steps({3, 1}, 1, 1, 1), 3 + 1 + 2 * kI);
  // the grid walks both shared until the short one ends, then the long one alone
  EXPECT_NEAR(gdn_walk_steps({3, 1}, 1, 1, 2), (1 + kI) * kS + (3 - 1), 1e-9);
  // three items on one SM of two CTAs: the third takes the slot the first one frees
  const double a = 2 + kI, first = a * kS;  // two equal items end together
  EXPECT_NEAR(gdn_walk_steps({2, 2, 2}, 1, 1, 2), first + a, 1e-9);
}

// The grid's first wave: of the first sms CTAs, sms / kFirstWaveSharedEvery start beside the
// first ones. 16 items of 10 chunks on 16 SMs fit one an SM, and do (a grid of at most sms
// CTAs spreads). 16 long items then 16 short ones (1 chunk): long item 15 starts beside long
// item 0 and the two walk shared to the end, where every other SM walks a long item beside
// a short one (3 shared steps, then alone); the queue walks a long then a short item an SM.
TEST(GdnWalkPlan, TheFirstWavePairsTheLastBesideTheFirst) {
  ASSERT_EQ(16 / GdnWalkPlanTraits::kFirstWaveSharedEvery, 1);
  EXPECT_DOUBLE_EQ(gdn_walk_steps({10}, 16, 16, 2), 10 + kI);
  EXPECT_NEAR(gdn_walk_steps({10, 1}, 16, 16, 2), (10 + kI) * kS, 1e-9);
  EXPECT_DOUBLE_EQ(gdn_walk_steps({10, 1}, 16, 16, 1), 10 + 1 + 2 * kI);
}

TEST(GdnWalkPlan, QueueIsAListScheduleWithinItsBounds) {
  for (int per_stream : {8, 32, 64, 128}) {
    const std::vector<int32_t> c = chunks_of({7, 130, 511, 1024, 2048, 4096, 333, 8192, 45, 100});
    double total = 0, longest = 0;
    for (int32_t x : c) {
      total += per_stream * (x + kI);
      longest = std::max(longest, x + kI);
    }
    const double t = gdn_walk_steps(c, per_stream, kSms, 1);
    EXPECT_GE(t, std::max(longest, total / kSms) - 1e-9) << per_stream;
    EXPECT_LE(t, total / kSms + longest + 1e-9) << per_stream;  // Graham's list-schedule bound
  }
}

TEST(GdnWalkPlan, OneCtaAnSmEitherWayIsTheSameSchedule) {
  const std::vector<int32_t> c = chunks_of({8192, 1024, 100});
  EXPECT_DOUBLE_EQ(gdn_walk_steps(c, 40, kSms, 1), gdn_walk_steps(c, 40, kSms, 2));
  EXPECT_FALSE(plan_gdn_walk_queue(c, 40, kSms));  // 120 items: the grid is one CTA an SM already
}

TEST(GdnWalkPlan, OneLongStreamAmongShortOnesTakesTheQueue) {
  // issue 13's mixed batch at 16 / 32 heads, d128 (32 heads x 2 blocks): measured 1.10 ms
  // one CTA an SM against 1.39 ms for the grid
  EXPECT_TRUE(plan_gdn_walk_queue(chunks_of({7, 130, 511, 1024, 2048, 4096, 333, 8192}), 64, kSms));
  // tests/cuda/gdn-planned-walk.yaml's batch (45 + 64 is a continuation chunk's 64 tokens)
  EXPECT_TRUE(plan_gdn_walk_queue(chunks_of({1024, 128, 64, 64, 7, 40, 109}), 64, kSms));
}

// Long chains about as many as the SMs, then short ones (16 / 32 heads, d128, H100, session
// 41): with two of the first wave on an SM, two long chains share it to the end. The grid
// measured 1.32 ms, the queue 1.13. With more long chains than SMs they pair either way:
// 3 x 3000 + 40 x 100 measured 0.85 ms on the grid and 1.09 on the queue.
TEST(GdnWalkPlan, AFirstWaveOfLongChainsTakesTheQueue) {
  std::vector<int> t = {6000, 6000};
  t.insert(t.end(), 12, 300);
  EXPECT_TRUE(plan_gdn_walk_queue(chunks_of(t), 64, kSms));
  std::vector<int> u = {3000, 3000, 3000};
  u.insert(u.end(), 40, 100);
  EXPECT_FALSE(plan_gdn_walk_queue(chunks_of(u), 64, kSms));
}

TEST(GdnWalkPlan, UniformBatchesTakeTheGrid) {
  // measured 0.85x, 0.81x and 0.86x one CTA an SM
  EXPECT_FALSE(plan_gdn_walk_queue(chunks_of(std::vector<int>(8, 2048)), 64, kSms));
  EXPECT_FALSE(plan_gdn_walk_queue(chunks_of(std::vector<int>(32, 512)), 64, kSms));
  EXPECT_FALSE(plan_gdn_walk_queue(chunks_of(std::vector<int>(4, 2048)), 128, kSms));
  // a batch of many short streams balances on the grid whatever their lengths
  std::vector<int> t(600);
  for (size_t i = 0; i < t.size(); ++i) t[i] = 1 + static_cast<int>((i * 7919) % 700);
  EXPECT_FALSE(plan_gdn_walk_queue(chunks_of(t), 64, kSms));
}

TEST(GdnWalkPlan, ShortestFirstOrderTakesTheGrid) {
  // the reversed launch order (--inject schedule): the long chains would start last
  std::vector<int32_t> c = chunks_of({7, 130, 511, 1024, 2048, 4096, 333, 8192});
  std::reverse(c.begin(), c.end());
  EXPECT_FALSE(plan_gdn_walk_queue(c, 64, kSms));
}

TEST(GdnWalkPlan, NothingToPlan) {
  EXPECT_FALSE(plan_gdn_walk_queue({}, 64, kSms));
  EXPECT_FALSE(plan_gdn_walk_queue({256}, 64, kSms));
  EXPECT_FALSE(plan_gdn_walk_queue(chunks_of({8192, 7}), 0, kSms));
  EXPECT_FALSE(plan_gdn_walk_queue(chunks_of({8192, 7}), 64, 0));
  EXPECT_EQ(gdn_walk_steps({}, 64, kSms, 1), 0.0);
  EXPECT_EQ(gdn_walk_steps({4}, 64, kSms, 3), 0.0);
  // past kMaxItems the simulation is not run: the grid
  std::vector<int> t(static_cast<size_t>(GdnWalkPlanTraits::kMaxItems / 64 + 1), 64);
  t[0] = 65536;
  EXPECT_FALSE(plan_gdn_walk_queue(chunks_of(t), 64, kSms));
}

}  // namespace
