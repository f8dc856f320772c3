// sweep_test.cpp: `prefill-bench sweep`: the grid (validated axes, cartesian
// product), derived scenarios (head_dim carries rotary_dim and MRoPE sections,
// scale multiplies every stream exactly, sizes sized for the original shape
// dropped), the YAML writer (every shipped scenario round-trips to the same
// fields and the same batch), a 2x2 sweep of the smoke scenario on the host
// backend (files, reports, CSV) and the CTest project (resource groups and spec;
// run through ctest on fake GPU ids, which the host backend ignores).
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "tests/test_util.h"
#include <nlohmann/json.hpp>

#include "lib/batch.h"
#include "lib/input_error.h"
#include "lib/sweep.h"

namespace fs = std::filesystem;

namespace pb {
namespace {

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

using pb::test::run_command;

// A fresh directory under the test temp dir, removed at the end of the test.
class TempDir {
 public:
  explicit TempDir(const std::string& name)
      : path_(fmt::format("{}pb_sweep_test_{}_{}", ::testing::TempDir(), getpid(), name)) {
    fs::remove_all(path_);
    fs::create_directories(path_);
  }
  ~TempDir() { fs::remove_all(path_); }
  std::string operator/(const std::string& f) const { return path_ + "/" + f; }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

std::string input_error(const std::function<void()>& f) {
  try {
    f();
  } catch (const InputError& e) {
    return e.what();
  }
  return "";
}

SweepPoint point(std::vector<std::pair<std::string, std::string>> values) { return SweepPoint{std::move(values)}; }

TEST(SweepGrid, ParsesAndValidatesAxes) {
  const std::vector<SweepAxis> axes = parse_grid({"head_dim=64,0128", "scale=0.50,2"});
  ASSERT_EQ(axes.size(), 2u);
  EXPECT_EQ(axes[0].values, (std::vector<std::string>{"64", "128"}));
  EXPECT_EQ(axes[1].values, (std::vector<std::string>{"0.5", "2"}));
  const std::vector<SweepPoint> pts = grid_points(axes);
  ASSERT_EQ(pts.size(), 4u);
  EXPECT_EQ(pts[0].label(), "head_dim=64,scale=0.5");
  EXPECT_EQ(pts[1].label(), "head_dim=64,scale=2");
  EXPECT_EQ(pts[3].label(), "head_dim=128,scale=2");

  std::string m = input_error([] { parse_grid({"streams=mixed,uniform"}); });
  EXPECT_NE(m.find("unknown axis 'streams' (known: head_dim, num_q_heads, num_kv_heads, block_size, scale, line)"),
            std::string::npos) << m;
  EXPECT_NE(input_error([] { parse_grid({"head_dim=64", "head_dim=128"}); }).find("given twice"), std::string::npos);
  EXPECT_NE(input_error([] { parse_grid({"head_dim=64,x"}); }).find("expected a positive integer, found 'x'"),
            std::string::npos);
  EXPECT_NE(input_error([] { parse_grid({"block_size=0"}); }).find("found '0'"), std::string::npos);
  EXPECT_NE(input_error([] { parse_grid({"scale=-1"}); }).find("expected a positive number"), std::string::npos);
  EXPECT_NE(input_error([] { parse_grid({"head_dim=64,64"}); }).find("listed twice"), std::string::npos);
  EXPECT_NE(input_error([] { parse_grid({"head_dim="}); }).find("comma-separated"), std::string::npos);
  EXPECT_NE(input_error([] { parse_grid({"head_dim=64,"}); }).find("comma-separated"), std::string::npos);
  EXPECT_NE(input_error([] { parse_grid({"head_dim"}); }).find("expected AXIS=V1,V2"), std::string::npos);
}

// Every field the scenario holds, as text: equal text = equal scenarios.
std::string fields(const Scenario& s) { return scenario_yaml(s); }

TEST(SweepYaml, EveryShippedScenarioRoundTrips) {
  for (const fs::directory_entry& e : fs::directory_iterator(test::source_path("scenarios"))) {
    if (e.path().extension() != ".yaml") continue;
    const Scenario a = load_scenario(e.path().string());
    const std::string yaml = scenario_yaml(a, {"a comment", "another"});
    const Scenario b = parse_scenario(yaml, "roundtrip.yaml");
    EXPECT_EQ(fields(a), fields(b)) << e.path() << "\n" << yaml;
    EXPECT_EQ(a.layers, b.layers) << e.path();
    EXPECT_EQ(a.description, b.description);
    EXPECT_EQ(a.tol_bf16.atol, b.tol_bf16.atol);
    EXPECT_EQ(a.model.rope_theta, b.model.rope_theta);
    const std::vector<StreamSpec> sa = resolve_streams(a), sb = resolve_streams(b);
    ASSERT_EQ(sa.size(), sb.size()) << e.path();
    for (size_t i = 0; i < sa.size(); ++i) {
      EXPECT_EQ(sa[i].chunk_start, sb[i].chunk_start) << e.path() << " stream " << i;
      EXPECT_EQ(sa[i].tokens, sb[i].tokens) << e.path() << " stream " << i;
      EXPECT_EQ(sa[i].blocks, sb[i].blocks) << e.path() << " stream " << i;
      EXPECT_EQ(sa[i].images.size(), sb[i].images.size()) << e.path() << " stream " << i;
    }
  }
  // The same bytes: the generated batch of the rewritten file is the original's.
  for (const char* f : {"scenarios/smoke.yaml", "scenarios/continuation-chunks.yaml", "scenarios/mrope-image.yaml"}) {
    const Scenario a = load_scenario(test::source_path(f));
    const Scenario b = parse_scenario(scenario_yaml(a), "roundtrip.yaml");
    EXPECT_EQ(generate_batch(a).inputs_checksum, generate_batch(b).inputs_checksum) << f;
  }
}

TEST(SweepYaml, QuotesStringsAndKeepsOptionalFields) {
  Scenario s = load_scenario(test::source_path("scenarios/smoke.yaml"));
  s.name = "we\"ird: name\\ # not a comment\n\ttab \xC3\xA9";
  s.description = "";
  s.model.rope_theta = 1e6;
  s.tol_bf16.atol = 1.5e-5;
  s.ref_sample = 3;
  s.checks = {"numeric", "layout"};
  s.faults.add(Fault::slot_off_by_one);
  s.layers = {LayerKind::attn, LayerKind::gdn, LayerKind::attn, LayerKind::gdn};
  const std::string yaml = scenario_yaml(s);
  EXPECT_NE(yaml.find("pattern: [attn, gdn]\n  repeat: 2\n"), std::string::npos) << yaml;
  const Scenario b = parse_scenario(yaml, "quoted.yaml");
  EXPECT_EQ(b.name, s.name);
  EXPECT_EQ(b.model.rope_theta, 1e6);
  EXPECT_EQ(b.tol_bf16.atol, 1.5e-5);
  EXPECT_EQ(b.ref_sample, 3);
  EXPECT_EQ(b.checks, s.checks);
  EXPECT_TRUE(b.faults.has(Fault::slot_off_by_one));
  EXPECT_EQ(b.layers, s.layers);
}

TEST(SweepDerive, HeadDimCarriesRotaryAndMropeSections) {
  const Scenario mrope = load_scenario(test::source_path("scenarios/mrope-image.yaml"));  // 16/24/24 over 128
  std::vector<std::string> notes;
  const Scenario d = derive_scenario(mrope, point({{"head_dim", "64"}}), &notes);
  EXPECT_EQ(d.name, mrope.name + "@head_dim=64");
  EXPECT_EQ(d.model.head_dim, 64);
  EXPECT_EQ(d.model.rotary_dim, 64);
  EXPECT_EQ(d.model.mrope.sections[0], 8);
  EXPECT_EQ(d.model.mrope.sections[1], 12);
  EXPECT_EQ(d.model.mrope.sections[2], 12);
  EXPECT_TRUE(notes.empty());
  EXPECT_NO_THROW(parse_scenario(scenario_yaml(d), "d.yaml"));

  const Scenario qwen = load_scenario(test::source_path("scenarios/qwen3-next.yaml"));  // partial rotary
  const Scenario q = derive_scenario(qwen, point({{"head_dim", "128"}}));
  EXPECT_EQ(q.model.rotary_dim * qwen.model.head_dim, qwen.model.rotary_dim * 128);
  const std::string m = input_error([&] { derive_scenario(mrope, point({{"head_dim", "100"}})); });
  EXPECT_NE(m.find("head_dim=100: mrope.sections [16, 24, 24] do not scale to rotary_dim 100"), std::string::npos) << m;
}

TEST(SweepDerive, ScaleMultipliesEveryStreamAndDropsSizes) {
  const Scenario base = load_scenario(test::source_path("scenarios/continuation-chunks.yaml"));  // explicit blocks, num_blocks
  std::vector<std::string> notes;
  const Scenario d = derive_scenario(base, point({{"scale", "2"}}), &notes);
  const std::vector<StreamSpec> before = resolve_streams(base), after = resolve_streams(d);
  ASSERT_EQ(before.size(), after.size());
  for (size_t i = 0; i < before.size(); ++i) {
    EXPECT_EQ(after[i].tokens, 2 * before[i].tokens) << i;
    EXPECT_EQ(after[i].chunk_start, before[i].chunk_start) << i;
    EXPECT_TRUE(after[i].blocks.empty()) << i;
  }
  EXPECT_EQ(d.kv_num_blocks, 0);
  bool noted_blocks = false, noted_kv = false;
  for (const std::string& n : notes) {
    noted_blocks = noted_blocks || n.find(".blocks") != std::string::npos;
    noted_kv = noted_kv || n.find("kv_cache.num_blocks 160") != std::string::npos;
  }
  EXPECT_TRUE(noted_blocks && noted_kv);
  const Scenario back = parse_scenario(scenario_yaml(d), "scaled.yaml");
  EXPECT_NO_THROW(validate_resources(back));

  // scale=1 on generated streams: the same streams, so the same batch.
  const Scenario mixed = load_scenario(test::source_path("scenarios/smoke.yaml"));
  const Scenario one = parse_scenario(scenario_yaml(derive_scenario(mixed, point({{"scale", "1"}}))), "one.yaml");
  EXPECT_EQ(generate_batch(one).inputs_checksum, generate_batch(mixed).inputs_checksum);
  // Rounded, never below one token.
  const Scenario tiny = derive_scenario(mixed, point({{"scale", "0.01"}}));
  for (const StreamSpec& st : resolve_streams(tiny)) EXPECT_GE(st.tokens, 1);
}

std::string row_of(const std::vector<std::string>& csv, const std::string& point) {
  for (const std::string& l : csv)
    if (l.find("," + point + ",") != std::string::npos || l.find(",\"" + point + "\",") != std::string::npos)
      return l;
  return "";
}

TEST(Sweep, SmokeTwoByTwoOnHostWritesTheExpectedFiles) {
  TempDir in("in"), out("out");
  fs::copy_file(test::source_path("scenarios/smoke.yaml"), in / "smoke.yaml");
  SweepOptions o;
  o.inputs = {in.path()};
  o.grid = {"head_dim=64,128", "block_size=16,32"};
  o.out_dir = out.path();
  o.run.backend = "host";
  std::vector<std::string> said;
  const SweepResult r = run_sweep(o, [&](const std::string& l) { said.push_back(l); });
  ASSERT_EQ(r.points.size(), 4u);
  EXPECT_EQ(said.size(), 4u);
  EXPECT_TRUE(r.all_passed());
  for (const SweepPointResult& p : r.points) {
    EXPECT_TRUE(p.skipped.empty()) << p.skipped;
    EXPECT_TRUE(p.ran && p.passed) << p.name;
    EXPECT_EQ(p.yaml, "smoke@" + p.point + ".yaml");
    EXPECT_EQ(p.json, "smoke@" + p.point + ".json");
    // The derived file reruns by hand: it loads, names the point and says where it came from.
    const Scenario s = load_scenario(out / p.yaml);
    EXPECT_EQ(s.name, "smoke@" + p.point);
    EXPECT_EQ(read_file(out / p.yaml).rfind("# Derived by `prefill-bench sweep` from ", 0), 0u);
    std::ifstream j(out / p.json);
    ASSERT_TRUE(j) << p.json;
    const nlohmann::json report = nlohmann::json::parse(j);
    EXPECT_EQ(report.at("runs")[0].at("scenario").at("name"), "smoke@" + p.point);
    EXPECT_EQ(report.at("runs")[0].at("scenario").at("path"), out / p.yaml);
  }
  const Scenario d128 = load_scenario(out / "smoke@head_dim=128,block_size=32.yaml");
  EXPECT_EQ(d128.model.head_dim, 128);
  EXPECT_EQ(d128.model.block_size, 32);
  EXPECT_TRUE(fs::exists(out / "sweep.json"));
  ASSERT_EQ(r.csv, out / "summary.csv");
  const std::vector<std::string> csv = lines_of(read_file(r.csv));
  std::cout << read_file(r.csv);
  ASSERT_EQ(csv.size(), 5u);
  EXPECT_EQ(csv[0], "scenario,point,backend,passed,worst_numeric_max_abs,attention_median_ms,attention_tflops,note");
  for (const char* p : {"head_dim=64,block_size=16", "head_dim=64,block_size=32", "head_dim=128,block_size=16",
                        "head_dim=128,block_size=32"}) {
    const std::string row = row_of(csv, p);
    ASSERT_FALSE(row.empty()) << p;
    EXPECT_EQ(row.rfind(fmt::format("smoke,\"{}\",host,true,", p), 0), 0u) << row;
    EXPECT_EQ(std::count(row.begin(), row.end(), ','), 8) << row;  // 7 columns after the quoted point
  }
  // --summarize rebuilds the same CSV from the files alone.
  const std::string first = read_file(r.csv);
  fs::remove(r.csv);
  summarize_sweep(out.path());
  EXPECT_EQ(read_file(out / "summary.csv"), first);
}

TEST(Sweep, InvalidPointsAreSkippedWithTheReason) {
  TempDir out("skip");
  SweepOptions o;
  o.inputs = {test::source_path("scenarios/smoke.yaml")};
  o.grid = {"num_kv_heads=2,3"};  // 4 q heads: 3 kv heads is no GQA ratio
  o.out_dir = out.path();
  o.run.backend = "host";
  const SweepResult r = run_sweep(o);
  ASSERT_EQ(r.points.size(), 2u);
  EXPECT_TRUE(r.points[0].skipped.empty());
  EXPECT_NE(r.points[1].skipped.find("smoke@num_kv_heads=3.yaml:"), std::string::npos) << r.points[1].skipped;
  EXPECT_NE(r.points[1].skipped.find("GQA ratio"), std::string::npos) << r.points[1].skipped;
  EXPECT_TRUE(r.all_passed());
  const std::string row = row_of(lines_of(read_file(r.csv)), "num_kv_heads=3");
  EXPECT_EQ(row.rfind("smoke,num_kv_heads=3,,skipped,,,,", 0), 0u) << row;
  // Every point invalid: bad input, exit 2 in the CLI.
  o.grid = {"num_kv_heads=3"};
  EXPECT_NE(input_error([&] { run_sweep(o); }).find("no point of the grid gives a valid scenario"), std::string::npos);
}

TEST(Sweep, BadInputWritesNothing) {
  TempDir tmp("bad");
  SweepOptions o;
  o.inputs = {test::source_path("scenarios/smoke.yaml")};
  o.out_dir = tmp / "never";
  o.grid = {"streams=mixed,uniform"};
  EXPECT_NE(input_error([&] { run_sweep(o); }).find("unknown axis 'streams'"), std::string::npos);
  o.grid = {};
  EXPECT_NE(input_error([&] { run_sweep(o); }).find("at least one --grid"), std::string::npos);
  o.grid = {"head_dim=64"};
  o.inputs = {test::source_path("tests/bad/gqa-ratio.yaml")};
  EXPECT_NE(input_error([&] { run_sweep(o); }).find("gqa-ratio.yaml:5:3"), std::string::npos);
  o.inputs = {tmp / "no-such-dir"};
  EXPECT_NE(input_error([&] { run_sweep(o); }).find("no such directory or scenario file"), std::string::npos);
  EXPECT_FALSE(fs::exists(tmp / "never"));
}

TEST(Sweep, CtestProjectWithResourceGroups) {
  TempDir out("ctest");
  SweepOptions o;
  o.inputs = {test::source_path("scenarios/smoke.yaml")};
  o.grid = {"head_dim=64,128", "block_size=16,32"};
  o.out_dir = out.path();
  o.ctest = true;
  o.gpus = 2;
  o.tool = PB_CLI_PATH;
  const SweepResult r = run_sweep(o);
  EXPECT_EQ(r.gpus, 2);
  const std::string t = read_file(r.ctest_file);
  std::cout << t;
  size_t tests = 0, groups = 0;
  for (const std::string& l : lines_of(t)) {
    tests += l.rfind("add_test([[smoke@", 0) == 0;
    groups += l.find("RESOURCE_GROUPS \"gpus:1\"") != std::string::npos;
  }
  EXPECT_EQ(tests, 4u);
  EXPECT_EQ(groups, 4u);
  EXPECT_NE(t.find("[[run]] [[smoke@head_dim=128,block_size=32.yaml]] [[--json]] [[smoke@head_dim=128,block_size=32.json]]"),
            std::string::npos) << t;
  EXPECT_NE(t.find("CTEST_RESOURCE_GROUP_0_GPUS"), std::string::npos);
  EXPECT_NE(t.find("add_test(sweep.summary"), std::string::npos);
  const nlohmann::json spec = nlohmann::json::parse(read_file(r.resource_spec));
  EXPECT_EQ(spec.at("version").at("major"), 1);
  ASSERT_EQ(spec.at("local")[0].at("gpus").size(), 2u);
  EXPECT_EQ(spec.at("local")[0].at("gpus")[1], nlohmann::json({{"id", "1"}, {"slots", 1}}));
  EXPECT_FALSE(fs::exists(out / "smoke@head_dim=64,block_size=16.json")) << "--ctest runs nothing";

  // ctest spreads the points over the two (fake) GPUs and the summary comes last.
  std::string log;
  const int rc = run_command(fmt::format("'{}' --test-dir '{}' --resource-spec-file '{}' -j 2 --output-on-failure",
                                         PB_CTEST_PATH, out.path(), r.resource_spec), &log);
  EXPECT_EQ(rc, 0) << log;
  EXPECT_NE(log.find("100% tests passed, 0 tests failed out of 5"), std::string::npos) << log;
  const std::vector<std::string> csv = lines_of(read_file(out / "summary.csv"));
  EXPECT_EQ(csv.size(), 5u);
  for (size_t i = 1; i < csv.size(); ++i) EXPECT_NE(csv[i].find(",true,"), std::string::npos) << csv[i];

  // No GPU: the host backend and no resource groups.
  TempDir cpu("ctest-cpu");
  o.out_dir = cpu.path();
  o.gpus = 0;
  const SweepResult c = run_sweep(o);
  const std::string ct = read_file(c.ctest_file);
  EXPECT_EQ(ct.find("RESOURCE_GROUPS"), std::string::npos) << ct;
  EXPECT_NE(ct.find("[[--backend]] [[host]]"), std::string::npos) << ct;
  EXPECT_EQ(nlohmann::json::parse(read_file(c.resource_spec)).at("local")[0].at("gpus").size(), 0u);
}

}  // namespace
}  // namespace pb
