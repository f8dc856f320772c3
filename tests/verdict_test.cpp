// verdict_test.cpp: the one verdict (lib/verdict.h) and the exit codes. PASS needs
// a check that ran; a profile run is "not checked" (exit 0, never PASS); a listed
// check that cannot run is refused up front; a suite that stops on an internal
// error still reports what completed and exits 3.
#include <sys/resource.h>

#include <filesystem>
#include <fstream>
#include <string>

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "tests/test_util.h"

#include "lib/check_plan.h"
#include "lib/report.h"
#include "lib/report_junit.h"
#include "lib/run.h"
#include "lib/verdict.h"

namespace pb {
namespace {

RunResult with_checks(std::initializer_list<std::pair<bool, bool>> ran_passed) {
  RunResult r;
  r.scenario_name = "s";
  r.backend = "host";
  for (const auto& [ran, passed] : ran_passed) {
    CheckResult c;
    c.name = "numeric";
    c.ran = ran;
    c.passed = passed;
    r.checks.push_back(c);
  }
  return r;
}

TEST(Verdict, PassNeedsACheckThatRan) {
  EXPECT_EQ(verdict(with_checks({{true, true}, {false, true}})), Verdict::passed);
  EXPECT_EQ(verdict(with_checks({{true, true}, {true, false}})), Verdict::failed);
  EXPECT_EQ(verdict(with_checks({{false, true}, {false, true}})), Verdict::not_checked);
  EXPECT_EQ(verdict(with_checks({})), Verdict::not_checked);
  RunResult err = with_checks({{true, true}});
  err.error = "boom";
  EXPECT_EQ(verdict(err), Verdict::error);
  EXPECT_FALSE(with_checks({{false, true}}).passed());
  EXPECT_TRUE(with_checks({{true, true}}).passed());
}

TEST(Verdict, SuiteAndExitCode) {
  const RunResult pass = with_checks({{true, true}}), fail = with_checks({{true, false}}),
                  none = with_checks({{false, true}});
  RunResult err = pass;
  err.error = "out of memory";
  EXPECT_EQ(verdict(std::vector<RunResult>{pass, pass}), Verdict::passed);
  EXPECT_EQ(verdict(std::vector<RunResult>{pass, none}), Verdict::not_checked);
  EXPECT_EQ(verdict(std::vector<RunResult>{none, fail}), Verdict::failed);
  EXPECT_EQ(verdict(std::vector<RunResult>{fail, err}), Verdict::error);
  EXPECT_EQ(verdict(std::vector<RunResult>{}), Verdict::not_checked);
  EXPECT_EQ(exit_code({pass, pass}), kExitOk);
  EXPECT_EQ(exit_code({none}), kExitOk);  // a profile run did what was asked
  EXPECT_EQ(exit_code({pass, fail}), kExitFailed);
  EXPECT_EQ(exit_code({fail, err}), kExitInternal);
  // A run the kernel library stopped (an entry's error status, a broken contract)
  // failed: the library is what is judged, not the harness.
  RunResult lib = pass;
  lib.error = "kernel library x: attention returned PB_ERR_DEVICE: illegal address";
  lib.kernel_failed = true;
  EXPECT_EQ(verdict(lib), Verdict::failed);
  EXPECT_EQ(verdict(std::vector<RunResult>{pass, lib}), Verdict::failed);
  EXPECT_EQ(exit_code({pass, lib}), kExitFailed);
  EXPECT_EQ(exit_code({lib, err}), kExitInternal);
  EXPECT_EQ(report_json({lib}).at("runs")[0].at("error_source"), "kernel_library");
  EXPECT_EQ(report_json({err}).at("runs")[0].at("error_source"), "harness");
  EXPECT_EQ(report_json({pass}).at("runs")[0].at("error_source"), "");
  // The JSON says the same: passed only for the verdict passed.
  const nlohmann::json j = report_json({pass, none});
  EXPECT_EQ(j.at("verdict"), "not_checked");
  EXPECT_EQ(j.at("passed"), false);
  EXPECT_EQ(j.at("runs")[0].at("verdict"), "passed");
  EXPECT_EQ(j.at("runs")[1].at("verdict"), "not_checked");
  EXPECT_EQ(j.at("runs")[1].at("passed"), false);
  EXPECT_EQ(report_json({pass}).at("passed"), true);
  // JUnit: an error is an <error> testcase.
  const std::string xml = junit_xml({err}, {});
  EXPECT_NE(xml.find("<error message=\"out of memory\""), std::string::npos) << xml;
  EXPECT_NE(xml.find("errors=\"1\""), std::string::npos) << xml;
}

Scenario smoke_with(const std::string& pattern, const std::string& checks) {
  std::string text = fmt::format(
      "name: t\nseed: 1\nmodel:\n  num_q_heads: 4\n  num_kv_heads: 2\n  head_dim: 64\n"
      "  gdn: {{num_k_heads: 2, num_v_heads: 4, k_dim: 32, v_dim: 32, d_conv: 4}}\n"
      "layers:\n  pattern: [{}]\nstreams:\n  - tokens: 5\n  - {{chunk_start: 3, tokens: 4}}\n{}",
      pattern, checks.empty() ? "" : "checks: [" + checks + "]\n");
  return parse_scenario(text, "t.yaml");
}

TEST(CheckPlan, ListedChecksMustApplyDefaultsSkipWhatDoesNot) {
  // Default set on an attention-only model: state is reported not applicable, the rest run.
  const Scenario attn = smoke_with("attn", "");
  for (const PlannedCheck& c : plan_checks(attn, false)) {
    if (c.name == kCheckState) {
      EXPECT_FALSE(c.run);
      EXPECT_EQ(c.why, "not applicable: no gdn layer (layers.pattern holds only attn)");
    } else {
      EXPECT_TRUE(c.run) << c.name;
    }
  }
  // Listed and applicable: fine. Listed and not applicable: refused, located.
  EXPECT_NO_THROW(smoke_with("attn", "numeric, kv_write"));
  try {
    smoke_with("attn", "numeric, state");
    ADD_FAILURE() << "checks: [state] on an attention-only model was accepted";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("t.yaml:13:19: checks[1]: check 'state' cannot run on this model"),
              std::string::npos)
        << e.what();
  }
  EXPECT_THROW(smoke_with("gdn", "kv_write, causal_bound"), InputError);
  // --profile: nothing runs, each says why.
  for (const PlannedCheck& c : plan_checks(smoke_with("attn, gdn", ""), true)) {
    EXPECT_FALSE(c.run);
    EXPECT_EQ(c.why, "--profile: no checks");
  }
}

// The run itself: the default set on an attention-only model passes with state
// "not applicable"; a profile run is not checked.
TEST(Verdict, RunsOfTheHostBackend) {
  RunOptions o;
  o.backend = "host";
  const RunResult attn = run_scenario(smoke_with("attn", ""), o);
  EXPECT_EQ(verdict(attn), Verdict::passed);
  EXPECT_FALSE(attn.check(kCheckState)->ran);
  o.profile = true;
  const RunResult profile = run_scenario(smoke_with("attn, gdn", ""), o);
  EXPECT_EQ(verdict(profile), Verdict::not_checked);
  const std::string table = format_table({profile}, false);
  EXPECT_NE(table.find("NOT CHECKED  t  host"), std::string::npos) << table;
  EXPECT_EQ(table.find("PASS"), std::string::npos) << table;
  EXPECT_NE(table.find("1 scenario, 0 passed, 0 failed, 1 not checked"), std::string::npos) << table;
}

std::string temp_dir() {
  char tmpl[] = "/tmp/pb_verdict_test_XXXXXX";
  return mkdtemp(tmpl);
}

TEST(Verdict, CliProfileExitsZeroAndNeverSaysPass) {
  const std::string dir = temp_dir();
  std::string out;
  EXPECT_EQ(test::run_command(fmt::format("'{}' run '{}/scenarios/smoke.yaml' --backend host --no-color --profile "
                                          "--json '{}/p.json'", PB_CLI_PATH, pb::test::source_dir(), dir),
                              &out),
            0)
      << out;
  EXPECT_NE(out.find("NOT CHECKED"), std::string::npos) << out;
  EXPECT_EQ(out.find("PASS"), std::string::npos) << out;
  std::ifstream in(dir + "/p.json");
  const nlohmann::json j = nlohmann::json::parse(in);
  EXPECT_EQ(j.at("passed"), false);
  EXPECT_EQ(j.at("verdict"), "not_checked");
  std::filesystem::remove_all(dir);
}

// A good scenario, then one whose allocation fails (the address space is capped,
// the resource ceilings are lifted): the table and the JSON still hold the first
// run and the failing one as an error entry, and the exit code is 3.
TEST(Verdict, InternalErrorAfterAGoodRunStillReportsAndExitsThree) {
  const std::string dir = temp_dir();
  std::ofstream(dir + "/big.yaml")
      << "name: big\nseed: 1\nmodel: {num_q_heads: 4, num_kv_heads: 2, head_dim: 64, block_size: 16}\n"
         "layers: {pattern: [attn]}\nstreams:\n  - tokens: 8\nkv_cache: {num_blocks: 1000000}\n";
  std::string out;
  const int rc = test::run_command(
      fmt::format("ulimit -v 1500000; '{}' run '{}/scenarios/smoke.yaml' '{}/big.yaml' --backend host --no-color "
                  "--max-memory 1000 --json '{}/r.json' --junit '{}/r.xml'",
                  PB_CLI_PATH, pb::test::source_dir(), dir, dir, dir),
      &out);
  EXPECT_EQ(rc, kExitInternal) << out;
  EXPECT_NE(out.find("out of memory"), std::string::npos) << out;
  EXPECT_NE(out.find("2 scenarios, 1 passed, 0 failed, 1 stopped on an error"), std::string::npos) << out;
  std::ifstream in(dir + "/r.json");
  ASSERT_TRUE(in) << out;
  const nlohmann::json j = nlohmann::json::parse(in);
  EXPECT_EQ(j.at("verdict"), "error");
  ASSERT_EQ(j.at("runs").size(), 2u);
  EXPECT_EQ(j.at("runs")[0].at("verdict"), "passed");
  EXPECT_EQ(j.at("runs")[1].at("verdict"), "error");
  EXPECT_EQ(j.at("runs")[1].at("scenario").at("name"), "big");
  EXPECT_TRUE(std::filesystem::exists(dir + "/r.xml"));
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace pb
