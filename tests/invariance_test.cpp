// invariance_test.cpp: the batch-invariance check. Sub-batches built from the
// truth (repacked rows, kept blocks and states), the sampling plan, the bit
// comparison naming the first differing element, clean shipped scenarios that
// pass on the host, and batch-dependent-split tripping invariance and nothing else.
#include <gtest/gtest.h>

#include <algorithm>

#include "lib/check_plan.h"
#include "lib/fault_exposure.h"
#include "lib/invariance.h"
#include "lib/run.h"
#include "lib/sub_batch.h"
#include "test_util.h"

namespace pb {
namespace {

Scenario shipped(const std::string& name) {
  return load_scenario(pb::test::source_dir() + "/scenarios/" + name + ".yaml");
}

RunResult run(const Scenario& s, std::initializer_list<Fault> faults = {}) {
  RunOptions opt;
  opt.backend = "host";
  opt.ref_sample = 8;
  for (Fault f : faults) opt.inject.add(f);
  return run_scenario(s, opt);
}

std::string findings(const CheckResult& c) {
  std::string s;
  for (const Finding& f : c.findings) s += f.message + "\n";
  return s;
}

TEST(SubBatch, RepacksRowsAndKeepsEachStreamsTruth) {
  const Batch b = generate_batch(shipped("smoke"));
  ASSERT_GE(b.num_streams, 3);
  const Batch r = sub_batch(b, {2, 0});
  ASSERT_EQ(r.num_streams, 2);
  EXPECT_EQ(r.total_tokens, b.streams[2].count + b.streams[0].count);
  EXPECT_EQ(r.streams[0].row_begin, 0);
  EXPECT_EQ(r.streams[1].row_begin, b.streams[2].count);
  EXPECT_EQ(r.streams[1].blocks, b.streams[0].blocks);
  EXPECT_EQ(r.num_blocks, b.num_blocks);
  EXPECT_EQ(r.poison_block, b.poison_block);
  // Stream 0's q rows follow stream 2's in the repacked batch.
  const size_t w = b.layers[0].attn.q.size() / b.total_tokens;
  EXPECT_TRUE(std::equal(b.layers[0].attn.q.begin(), b.layers[0].attn.q.begin() + b.streams[0].count * w,
                         r.layers[0].attn.q.begin() + b.streams[2].count * w,
                         [](bf16 x, bf16 y) { return x.bits == y.bits; }));
  EXPECT_EQ(r.layers[1].gdn.h0[1], b.layers[1].gdn.h0[0]);
  EXPECT_THROW(sub_batch(b, {0, 0}), std::invalid_argument);
  EXPECT_THROW(sub_batch(b, {b.num_streams}), std::invalid_argument);
  EXPECT_THROW(sub_batch(b, {}), std::invalid_argument);
}

TEST(InvariancePlan, ReversedThenTheShortestAndSeededOthersAlone) {
  const Batch b = generate_batch(shipped("mixed-lengths"));
  const std::vector<InvarianceBatch> p = invariance_plan(b, 2, 7);
  ASSERT_EQ(p.size(), 3u);
  EXPECT_EQ(p[0].name, "reversed");
  EXPECT_EQ(p[0].order.front(), b.num_streams - 1);
  int shortest = 0;
  for (int i = 1; i < b.num_streams; ++i)
    if (b.streams[i].count < b.streams[shortest].count) shortest = i;
  EXPECT_EQ(p[1].order, std::vector<int>{shortest});
  EXPECT_EQ(invariance_plan(b, 2, 7)[2].order, p[2].order);  // seeded: the same every time
  EXPECT_EQ(invariance_plan(b, 0, 7).size(), 1u);             // streams: 0, the reordered batch only
  EXPECT_EQ(invariance_plan(b, 100000, 7).size(), 1u + b.num_streams);
  EXPECT_TRUE(invariance_plan(sub_batch(b, {0}), 2, 7).empty());
}

TEST(CheckInvariance, NamesTheFirstDifferingElementAndBothValues) {
  StreamOutputs a;
  a.out = {to_bf16(1.0f), to_bf16(2.0f), to_bf16(3.0f)};
  a.h_state = {0.5f};
  StreamOutputs same = a;
  CheckResult ok;
  check_invariance(2, 5, "stream 5 alone", a, same, ok);
  EXPECT_TRUE(ok.passed);
  StreamOutputs moved = a;
  moved.out[1].bits ^= 1;
  CheckResult bad;
  check_invariance(2, 5, "stream 5 alone", a, moved, bad);
  ASSERT_FALSE(bad.passed);
  EXPECT_EQ(bad.findings[0].layer, 2);
  EXPECT_EQ(bad.findings[0].stream, 5);
  EXPECT_NE(bad.findings[0].message.find("stream 5 out: 1 of 3 elements differ"), std::string::npos)
      << bad.findings[0].message;
  EXPECT_NE(bad.findings[0].message.find("first at element 1: 2 (0x4000) co-batched, 2.01562 (0x4001) in stream 5 alone"),
            std::string::npos)
      << bad.findings[0].message;
}

TEST(Invariance, NotApplicableToOneStream) {
  const Scenario s = shipped("single-stream");
  for (const PlannedCheck& c : plan_checks(s, false))
    if (c.name == kCheckInvariance) EXPECT_FALSE(c.run) << "one stream has no other batch";
}

TEST(Invariance, PassesOnShippedScenariosOnTheHost) {
  for (const char* name : {"smoke", "qwen3-next", "continuation-chunks", "mrope-image"}) {
    const RunResult r = run(shipped(name));
    const CheckResult* c = r.check(kCheckInvariance);
    ASSERT_NE(c, nullptr);
    EXPECT_TRUE(c->ran) << name << ": " << c->not_run_why;
    EXPECT_TRUE(c->passed) << name << ": " << findings(*c);
    EXPECT_TRUE(r.passed()) << name;
    EXPECT_GE(r.invariance_batches.size(), 2u) << name;
    EXPECT_EQ(r.invariance_batches.front(), "reversed");
  }
}

TEST(Invariance, BatchDependentSplitTripsItAndOnlyIt) {
  const Scenario s = shipped("qwen3-next");
  ASSERT_TRUE(fault_exposure(Fault::batch_dependent_split, s, generate_batch(s)).can_show);
  const RunResult r = run(s, {Fault::batch_dependent_split});
  EXPECT_FALSE(r.passed());
  for (const CheckResult& c : r.checks) {
    if (c.name == kCheckInvariance) {
      ASSERT_FALSE(c.passed);
      EXPECT_NE(findings(c).find("alone; first at element"), std::string::npos) << findings(c);
      EXPECT_GE(c.findings[0].layer, 0);
      EXPECT_GE(c.findings[0].stream, 0);
    } else {
      // Within tolerance: numeric cannot see it, which is why invariance exists.
      EXPECT_TRUE(c.passed) << c.name << ": " << findings(c);
    }
  }
}

TEST(Invariance, SamplingKnobReadsAndReachesTheReport) {
  Scenario s = parse_scenario(
      "name: k\nseed: 3\nmodel: {num_q_heads: 2, num_kv_heads: 1, head_dim: 32}\nlayers: {pattern: [attn]}\n"
      "streams:\n  - tokens: 5\n  - tokens: 9\n  - {chunk_start: 4, tokens: 3}\ninvariance: {streams: 3}\n",
      "k.yaml");
  EXPECT_EQ(s.invariance_streams, 3);
  const RunResult r = run(s);
  EXPECT_TRUE(r.passed());
  EXPECT_EQ(r.invariance_streams, 3);
  EXPECT_EQ(r.invariance_batches.size(), 4u);  // reversed + every stream alone
}

}  // namespace
}  // namespace pb
