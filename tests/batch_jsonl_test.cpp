// batch_jsonl_test.cpp: engine-captured batches. Both line forms read to the same
// streams, the shipped example loads and passes, and sweep --grid line=all runs
// every line of the file, each point named by its line. (Bad lines: bad_input_test.)
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "lib/batch_jsonl.h"
#include "lib/run.h"
#include "lib/sweep.h"
#include "test_util.h"

namespace pb {
namespace {

namespace fs = std::filesystem;

TEST(BatchJsonl, EngineArraysAndCanonicalFormReadTheSame) {
  const std::string dir = testing::TempDir();
  const std::string f = dir + "/forms.jsonl";
  std::ofstream(f) << "{\"cu_seqlens\": [0, 7, 137], \"kv_lens\": [7, 1160]}\n\n"
                      "{\"streams\": [{\"chunk_start\": 0, \"tokens\": 7}, {\"chunk_start\": 1030, \"tokens\": 130}]}\n";
  EXPECT_EQ(jsonl_batch_lines(f), (std::vector<int>{1, 3}));
  for (int line : {1, 3}) {
    const std::vector<StreamSpec> s = read_jsonl_batch(f, line);
    ASSERT_EQ(s.size(), 2u);
    EXPECT_EQ(s[0].chunk_start, 0);
    EXPECT_EQ(s[0].tokens, 7);
    EXPECT_EQ(s[1].chunk_start, 1030);  // kv_len 1160 - 130 tokens
    EXPECT_EQ(s[1].tokens, 130);
  }
  EXPECT_THROW(read_jsonl_batch(f, 2), InputError);  // blank
  fs::remove(f);
}

TEST(BatchJsonl, ShippedScenarioReadsItsLineAndPasses) {
  const Scenario s = load_scenario(test::source_path("scenarios/engine-captured.yaml"));
  EXPECT_EQ(s.streams_line, 2);
  EXPECT_EQ(s.streams_from_jsonl, test::source_path("scenarios/engine-batches.jsonl"));
  const std::vector<StreamSpec> st = resolve_streams(s);
  ASSERT_EQ(st.size(), 4u);
  EXPECT_EQ(st[0].chunk_start, 811);
  EXPECT_EQ(st[3].tokens, 256);
  EXPECT_EQ(st[3].chunk_start, 0);
  RunOptions opt;
  opt.backend = "host";
  opt.ref_sample = 8;
  EXPECT_TRUE(run_scenario(s, opt).passed());
}

TEST(BatchJsonl, SweepRunsEveryLineNamedByItsNumber) {
  const fs::path out = fs::path(testing::TempDir()) / "pb_sweep_jsonl";
  fs::remove_all(out);
  SweepOptions o;
  o.inputs = {test::source_path("scenarios/engine-captured.yaml")};
  o.grid = {"line=all"};
  o.out_dir = out.string();
  o.run.backend = "host";
  o.run.ref_sample = 8;
  const SweepResult r = run_sweep(o);
  ASSERT_EQ(r.points.size(), 4u);
  for (size_t i = 0; i < r.points.size(); ++i) {
    const SweepPointResult& p = r.points[i];
    EXPECT_EQ(p.point, "line=" + std::to_string(i + 1));
    EXPECT_EQ(p.name, "engine-captured@line=" + std::to_string(i + 1));
    EXPECT_TRUE(p.skipped.empty()) << p.skipped;
    EXPECT_TRUE(p.ran && p.passed) << p.name;
    // The point's file reads the same line of the same file.
    const Scenario back = load_scenario((out / p.yaml).string());
    EXPECT_EQ(back.streams_line, static_cast<int>(i + 1));
  }
  EXPECT_TRUE(r.all_passed());
  // A scenario whose streams are not from a file cannot take the axis.
  SweepOptions plain = o;
  plain.inputs = {test::source_path("scenarios/smoke.yaml")};
  plain.grid = {"line=1"};
  try {
    run_sweep(plain);
    ADD_FAILURE() << "line on a plain scenario must be refused";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("line=1: the scenario's streams are not from_jsonl"), std::string::npos)
        << e.what();
  }
  fs::remove_all(out);
}

}  // namespace
}  // namespace pb
