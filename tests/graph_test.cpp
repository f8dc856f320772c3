// graph_test.cpp: --graph on the host backend (docs/DESIGN.md "Graph mode"): the
// bucket's second batch keeps every address-determining constant and capacity
// and really differs; shipped scenarios pass with every check on the replays of
// both batches; the baked-parameter fault passes eager and fails under --graph
// on batch 2 only; the report carries the graph_replay timings.
#include <gtest/gtest.h>

#include <filesystem>

#include "lib/graph_bucket.h"
#include "lib/run.h"
#include "lib/staging.h"
#include "lib/verdict.h"
#include "test_util.h"

namespace pb {
namespace {

Scenario shipped(const char* name) { return load_scenario(pb::test::source_dir() + "/scenarios/" + name); }

TEST(GraphBucket, SecondBatchKeepsTheBucketAndDiffers) {
  for (const auto& e : std::filesystem::directory_iterator(pb::test::source_dir() + "/scenarios")) {
    if (e.path().extension() != ".yaml") continue;
    const Scenario s = load_scenario(e.path().string());
    const Batch a = generate_batch(s);
    const Batch b = generate_bucket_batch(s, a);
    SCOPED_TRACE(s.name);
    EXPECT_EQ(b.num_streams, a.num_streams);
    EXPECT_EQ(b.total_tokens, a.total_tokens);
    EXPECT_EQ(b.num_blocks, a.num_blocks);
    EXPECT_EQ(b.poison_block, a.poison_block);
    EXPECT_LE(b.chunk_len, a.chunk_len);
    EXPECT_LE(b.max_blocks_per_seq, a.max_blocks_per_seq);
    int blocks = 0;
    std::vector<int> seen(b.num_blocks, 0);
    for (const StreamTruth& st : b.streams) {
      EXPECT_GE(st.count, 1);
      blocks += static_cast<int>(st.blocks.size());
      for (int32_t id : st.blocks) {
        ASSERT_TRUE(id >= 0 && id < b.num_blocks && id != b.poison_block);
        EXPECT_EQ(seen[id]++, 0) << "block " << id << " owned twice";
      }
    }
    EXPECT_LE(blocks, b.num_blocks - 1);
    const BucketDiff d = bucket_diff(a, b);
    EXPECT_TRUE(d.any());
    EXPECT_TRUE(d.block_tables);
    EXPECT_TRUE(d.inputs);
    // Counts can vary unless one stream holds every token or every stream is full.
    if (a.num_streams > 1 && a.total_tokens < a.num_streams * a.chunk_len) EXPECT_TRUE(d.counts);
    else EXPECT_FALSE(d.note.empty());
    // The same staged layout: every metadata pointer and staged_bytes identical.
    const StagedImage ia = stage_batch(a, s.model.mrope.enabled, 0, 0x10000, 0x80000, {});
    const StagedImage ib = stage_batch(b, s.model.mrope.enabled, 0, 0x10000, 0x80000, {});
    EXPECT_EQ(ia.meta.staged_bytes, ib.meta.staged_bytes);
    EXPECT_EQ(ia.meta.kv_lens, ib.meta.kv_lens);
    EXPECT_EQ(ia.meta.block_table_ptrs, ib.meta.block_table_ptrs);
    EXPECT_EQ(ia.plan.h_state_ptrs, ib.plan.h_state_ptrs);
  }
}

RunResult graph_run(const Scenario& s, FaultSet inject = {}, bool graph = true) {
  RunOptions opt;
  opt.backend = "host";
  opt.graph = graph;
  opt.inject = inject;
  opt.ref_sample = 8;
  return run_scenario(s, opt);
}

TEST(GraphMode, ShippedScenariosPassOnBothBatches) {
  for (const char* name : {"smoke.yaml", "mrope-image.yaml", "continuation-chunks.yaml", "single-stream.yaml"}) {
    const Scenario s = shipped(name);
    const RunResult r = graph_run(s);
    SCOPED_TRACE(name);
    const CheckResult* g = r.check(kCheckGraph);
    ASSERT_NE(g, nullptr);
    EXPECT_TRUE(g->ran) << g->not_run_why;
    EXPECT_TRUE(g->passed) << (g->findings.empty() ? "" : g->findings.front().message);
    EXPECT_FALSE(g->figures.empty()) << "batch 2's figures are the graph check's";
    EXPECT_TRUE(r.passed());
    EXPECT_TRUE(r.graph.captured);
    EXPECT_TRUE(r.graph.diff.any());
    ASSERT_EQ(r.graph.batch2.size(), r.streams.size());
    int replays = 0;
    for (const KernelTiming& t : r.timings) replays += t.kernel == "graph_replay";
    EXPECT_EQ(replays, static_cast<int>(s.layers.size()));
  }
}

TEST(GraphMode, WithoutGraphNoGraphCheck) {
  const RunResult r = graph_run(shipped("smoke.yaml"), {}, false);
  EXPECT_EQ(r.check(kCheckGraph), nullptr);
  EXPECT_FALSE(r.graph.requested);
  for (const KernelTiming& t : r.timings) EXPECT_NE(t.kernel, "graph_replay");
}

TEST(GraphMode, BakedKvLenPassesEagerFailsOnTheSecondBatch) {
  const Scenario s = shipped("mixed-lengths.yaml");
  FaultSet f;
  f.add(Fault::graph_baked_kv_len);
  const RunResult eager = graph_run(s, f, false);
  EXPECT_TRUE(eager.passed()) << "the host copy is current in an eager run";
  const RunResult r = graph_run(s, f);
  EXPECT_FALSE(r.passed());
  EXPECT_EQ(exit_code({r}), kExitFailed);
  const CheckResult* g = r.check(kCheckGraph);
  ASSERT_TRUE(g && g->ran);
  EXPECT_FALSE(g->passed);
  ASSERT_FALSE(g->findings.empty());
  EXPECT_NE(g->findings.front().message.find("batch 2 "), std::string::npos) << g->findings.front().message;
  // Batch 2's stream indices are not the report's (batch 1's) streams: named in the text, filed under none.
  bool named = false;
  for (const Finding& x : g->findings) {
    EXPECT_EQ(x.stream, -1) << x.message;
    named = named || x.message.find("batch 2 stream ") != std::string::npos;
  }
  for (const Figure& x : g->figures) EXPECT_EQ(x.stream, -1) << x.what;
  EXPECT_TRUE(named) << "no finding names its batch 2 stream";
  // Batch 1's replay runs with its own host copies: every other check passes.
  for (const CheckResult& c : r.checks)
    if (c.name != kCheckGraph && c.ran) EXPECT_TRUE(c.passed) << c.name;
}

TEST(GraphMode, LibraryWithoutCapabilityIsNotChecked) {
  RunResult r;
  r.graph.requested = true;
  CheckResult numeric;
  numeric.name = kCheckNumeric;
  CheckResult g;
  g.name = kCheckGraph;
  g.ran = false;
  g.not_run_why = "no PB_CAP_GRAPH";
  r.checks = {numeric, g};
  EXPECT_EQ(verdict(r), Verdict::not_checked);
  EXPECT_FALSE(r.passed());
  EXPECT_EQ(exit_code({r}), kExitFailed);
  r.checks[1].ran = true;  // the same run with the graph check run and passed
  EXPECT_EQ(verdict(r), Verdict::passed);
  EXPECT_EQ(exit_code({r}), kExitOk);
}

TEST(GraphMode, GraphAndProfileRefused) {
  RunOptions opt;
  opt.backend = "host";
  opt.graph = true;
  opt.profile = true;
  EXPECT_THROW(run_scenario(shipped("smoke.yaml"), opt), InputError);
}

}  // namespace
}  // namespace pb
