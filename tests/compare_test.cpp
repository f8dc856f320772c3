// compare_test.cpp: `compare BASE NEW` on hand-built reports (an injected
// slowdown, an injected accuracy loss, PASS -> FAIL, overlapping spreads, too few
// samples, zero vs tiny errors, scenarios in one report only) and on two real
// host runs of the smoke scenario, which must pass. Every report goes through
// report_json and back (parse_report), so the reader is tested on the way;
// refusals (schema version, malformed JSON) name the file; the CLI exits 1/0/2.
#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <limits>
#include <sstream>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "tests/test_util.h"

#include "lib/compare.h"
#include "lib/input_error.h"
#include "lib/report.h"
#include "lib/scenario.h"

namespace pb {
namespace {

const double kNaN = std::numeric_limits<double>::quiet_NaN();

KernelTiming timing(int layer, const char* kernel, double median, double min, double q3, int samples = 10) {
  KernelTiming t;
  t.layer = layer;
  t.kernel = kernel;
  t.samples = samples;
  t.median_ms = median;
  t.min_ms = min;
  t.q1_ms = (min + median) / 2;
  t.q3_ms = q3;
  t.max_ms = q3 * 1.1;
  t.flops = 1e9;
  t.bytes = 1e6;
  return t;
}

Figure figure(int layer, int stream, const char* what, double max_abs) {
  Figure f;
  f.layer = layer;
  f.stream = stream;
  f.what = what;
  f.max_abs = max_abs;
  f.rel_l2 = max_abs / 10;
  f.lowp_max_abs = 1e-3;
  f.limit = 4e-3;
  f.elements = 1000;
  f.pass = max_abs <= f.limit;
  return f;
}

// A two-layer (attn, gdn) run where everything passes.
RunResult run(const char* name = "smoke", const char* backend = "cuda") {
  RunResult r;
  r.scenario_path = fmt::format("scenarios/{}.yaml", name);
  r.scenario_name = name;
  r.seed = 1;
  r.backend = backend;
  r.device.name = "NVIDIA H200";
  r.layer_kinds = {"attn", "gdn"};
  r.streams = {{0, 23, 23, 2, false}, {9, 40, 49, 4, false}};
  r.total_tokens = 63;
  r.chunk_len = 40;
  r.inputs_checksum = 0x1234;
  r.wall_s = 0.5;
  for (const std::string& n : all_check_names()) {
    CheckResult c;
    c.name = n;
    r.checks.push_back(c);
  }
  CheckResult& numeric = r.checks[2];
  for (int b = 0; b < 2; ++b) {
    numeric.figures.push_back(figure(0, b, "out", 1e-3));
    numeric.figures.push_back(figure(1, b, "out", 2e-3));
  }
  CheckResult& state = r.checks[5];
  for (int b = 0; b < 2; ++b) state.figures.push_back(figure(1, b, "h_state", 5e-4));
  r.checks[6].ran = false;
  r.checks[6].not_run_why = "no MRoPE in this scenario";
  r.timings = {timing(0, "rope", 0.010, 0.009, 0.011), timing(0, "kv_write", 0.008, 0.007, 0.009),
               timing(0, "attention", 0.250, 0.240, 0.260), timing(1, "conv1d", 0.030, 0.028, 0.032),
               timing(1, "gdn", 0.400, 0.390, 0.410)};
  return r;
}

// Through the JSON and back, as `compare` reads it.
LoadedReport loaded(const std::vector<RunResult>& runs, const char* path) {
  return parse_report(report_json(runs), path);
}

CompareResult compare(const std::vector<RunResult>& base, const std::vector<RunResult>& next,
                      const CompareOptions& o = {}) {
  return compare_reports(loaded(base, "BASE.json"), loaded(next, "NEW.json"), o);
}

const KernelDelta& kernel(const CompareResult& r, int layer, const char* name) {
  for (const KernelDelta& k : r.scenarios.at(0).kernels)
    if (k.layer == layer && k.kernel == name) return k;
  throw std::runtime_error("no kernel");
}

const CheckDelta& check(const CompareResult& r, const char* name) {
  for (const CheckDelta& c : r.scenarios.at(0).checks)
    if (c.name == name) return c;
  throw std::runtime_error("no check");
}

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

void expect_fits(const std::string& table) {
  for (const std::string& line : lines_of(table))
    EXPECT_LE(line.size(), size_t(kReportWidth)) << "too wide: '" << line << "'";
}

bool contains(const std::string& text, const std::string& what) { return text.find(what) != std::string::npos; }

using pb::test::run_command;

std::string temp_path(const std::string& name) {
  return fmt::format("{}pb_compare_test_{}_{}", ::testing::TempDir(), getpid(), name);
}

void write_file(const std::string& path, const std::string& text) {
  std::ofstream f(path, std::ios::binary);
  f << text;
}

TEST(Compare, InjectedSlowdownFails) {
  RunResult slow = run();
  slow.timings[2] = timing(0, "attention", 0.500, 0.480, 0.520);  // 2x, spreads apart
  const CompareResult r = compare({run()}, {slow});
  EXPECT_TRUE(r.regressed());
  const KernelDelta& k = kernel(r, 0, "attention");
  EXPECT_EQ(k.verdict, TimeVerdict::slow);
  EXPECT_NEAR(k.delta, 1.0, 1e-12);
  EXPECT_EQ(kernel(r, 0, "rope").verdict, TimeVerdict::same);
  ASSERT_EQ(r.regressions.size(), 1u);
  EXPECT_TRUE(contains(r.regressions[0], "smoke [cuda]: L0 attention: SLOW +100.0%")) << r.regressions[0];
  const std::string table = format_compare(r, false);
  std::cout << table;
  expect_fits(table);
  EXPECT_TRUE(contains(table, "SLOW"));
  EXPECT_EQ(lines_of(table).back().rfind("REGRESSED: 1 regression", 0), 0u) << table;
  const nlohmann::json j = compare_json(r);
  EXPECT_EQ(j.at("passed"), false);
  EXPECT_EQ(j.at("compare_schema_version"), kCompareSchemaVersion);
  EXPECT_EQ(j.at("scenarios")[0].at("kernels")[2].at("verdict"), "slow");
  EXPECT_EQ(j.at("scenarios")[0].at("kernels")[2].at("kernel"), "attention");
}

TEST(Compare, FasterIsNotARegression) {
  RunResult fast = run();
  fast.timings[2] = timing(0, "attention", 0.125, 0.120, 0.130);
  const CompareResult r = compare({run()}, {fast});
  EXPECT_FALSE(r.regressed());
  EXPECT_EQ(kernel(r, 0, "attention").verdict, TimeVerdict::fast);
}

TEST(Compare, OverlappingSpreadsAreAmbiguous) {
  // The median doubles, but NEW's fastest sample is under BASE's third quartile.
  RunResult noisy = run();
  noisy.timings[2] = timing(0, "attention", 0.500, 0.200, 0.700);
  const CompareResult r = compare({run()}, {noisy});
  EXPECT_FALSE(r.regressed());
  EXPECT_EQ(kernel(r, 0, "attention").verdict, TimeVerdict::ambiguous);
  const std::string table = format_compare(r, false);
  expect_fits(table);
  EXPECT_TRUE(contains(table, "ambiguous (spreads overlap)")) << table;
  EXPECT_TRUE(contains(table, "no regression"));
}

TEST(Compare, FewSamplesAreNotJudged) {
  RunResult few = run(), few_slow = run();
  few.timings[2] = timing(0, "attention", 0.25, 0.24, 0.26, 2);
  few_slow.timings[2] = timing(0, "attention", 0.75, 0.74, 0.76, 2);
  const CompareResult r = compare({few}, {few_slow});
  EXPECT_FALSE(r.regressed());
  EXPECT_EQ(kernel(r, 0, "attention").verdict, TimeVerdict::insufficient);
  EXPECT_TRUE(contains(format_compare(r, false), "insufficient samples (2/2)"));
}

TEST(Compare, TimeWithinThresholdIsSame) {
  RunResult a = run(), b = run();
  a.timings[2] = timing(0, "attention", 0.250, 0.245, 0.250);  // range 0.245..0.275
  b.timings[2] = timing(0, "attention", 0.290, 0.280, 0.292);  // +16%, ranges apart
  CompareOptions loose;
  loose.time_threshold = 0.20;
  EXPECT_EQ(kernel(compare({a}, {b}, loose), 0, "attention").verdict, TimeVerdict::same);
  const CompareResult r = compare({a}, {b});
  EXPECT_EQ(kernel(r, 0, "attention").verdict, TimeVerdict::slow);
  EXPECT_TRUE(r.regressed());
}

TEST(Compare, ChangeUnderTheTimeFloorIsSame) {
  // What the H200 showed back to back: a 6 us kernel at 6.3 then 8.8 us, spreads apart.
  RunResult a = run(), b = run();
  a.timings[2] = timing(0, "attention", 0.0063, 0.0063, 0.0077);
  b.timings[2] = timing(0, "attention", 0.0088, 0.0086, 0.0106);
  const CompareResult r = compare({a}, {b});
  EXPECT_EQ(kernel(r, 0, "attention").verdict, TimeVerdict::same);
  EXPECT_FALSE(r.regressed());
  // With the floor lowered under the change, the same figures are SLOW and fail.
  CompareOptions fine;
  fine.time_floor_ms = 0.001;
  const CompareResult f = compare({a}, {b}, fine);
  EXPECT_EQ(kernel(f, 0, "attention").verdict, TimeVerdict::slow);
  EXPECT_TRUE(f.regressed());
  CompareOptions bad;
  bad.time_floor_ms = -1;
  EXPECT_THROW(validate_compare_options(bad), InputError);
}

TEST(Compare, InjectedAccuracyLossFails) {
  RunResult worse = run();
  worse.checks[2].figures[2].max_abs = 1e-2;  // layer 0 stream 1: 10x, now over its limit
  worse.checks[2].figures[2].pass = false;
  worse.checks[2].fail(0, 1, "stream 1 (kv_len 49): attention output max_abs 0.01 over limit 0.004");
  const CompareResult r = compare({run()}, {worse});
  EXPECT_TRUE(r.regressed());
  const CheckDelta& c = check(r, kCheckNumeric);
  EXPECT_TRUE(c.regressed);
  EXPECT_EQ(c.verdict, "REGRESSED (PASS -> FAIL)");
  ASSERT_EQ(c.grown.size(), 1u);
  EXPECT_EQ(c.grown[0].layer, 0);
  EXPECT_EQ(c.grown[0].stream, 1);
  EXPECT_DOUBLE_EQ(c.grown[0].new_max_abs, 1e-2);
  EXPECT_DOUBLE_EQ(c.new_worst, 1e-2);
  ASSERT_EQ(r.regressions.size(), 2u);  // PASS -> FAIL, and the figure
  EXPECT_TRUE(contains(r.regressions[0], "check numeric: PASS -> FAIL (layer 0 stream 1: stream 1"));
  EXPECT_TRUE(contains(r.regressions[1], "layer 0 stream 1 out: max_abs 1.00e-03 -> 1.00e-02 (x10.0)"))
      << r.regressions[1];
  const std::string table = format_compare(r, false);
  std::cout << table;
  expect_fits(table);
  EXPECT_TRUE(contains(table, "NEW: layer 0 stream 1: stream 1 (kv_len 49)")) << table;
}

TEST(Compare, ErrorGrowthFailsEvenWhileTheCheckPasses) {
  RunResult worse = run();
  worse.checks[5].figures[0].max_abs = 3.5e-3;  // h_state 7x, still under its limit
  const CompareResult r = compare({run()}, {worse});
  EXPECT_TRUE(r.regressed());
  EXPECT_EQ(check(r, kCheckState).verdict, "REGRESSED (error x7.00)");
  // Within the factor: same.
  worse.checks[5].figures[0].max_abs = 9e-4;
  EXPECT_FALSE(compare({run()}, {worse}).regressed());
  // A non-finite figure where BASE was finite is a regression.
  worse.checks[5].figures[0].max_abs = kNaN;
  const CompareResult nan = compare({run()}, {worse});
  EXPECT_TRUE(nan.regressed());
  EXPECT_EQ(check(nan, kCheckState).verdict, "REGRESSED (non-finite)");
}

TEST(Compare, ZeroVersusTinyIsNotARegression) {
  RunResult zero = run(), tiny = run();
  zero.checks[2].figures[0].max_abs = 0;
  tiny.checks[2].figures[0].max_abs = 5e-7;  // under the 1e-6 floor
  EXPECT_FALSE(compare({zero}, {tiny}).regressed());
  tiny.checks[2].figures[0].max_abs = 5e-6;
  const CompareResult r = compare({zero}, {tiny});
  EXPECT_TRUE(r.regressed());
  EXPECT_EQ(check(r, kCheckNumeric).verdict, "REGRESSED (error from 0)");
}

TEST(Compare, PassToFailOfAnyCheckFails) {
  RunResult broken = run();
  broken.checks[3].fail(0, 1, "stream 1 (kv_len 49): 3 of 40 output rows NaN");
  const CompareResult r = compare({run()}, {broken});
  EXPECT_TRUE(r.regressed());
  EXPECT_EQ(check(r, kCheckCausalBound).verdict, "REGRESSED (PASS -> FAIL)");
  // The other way round is a fix, and failing in both is not a new regression.
  const CompareResult fixed = compare({broken}, {run()});
  EXPECT_FALSE(fixed.regressed());
  EXPECT_EQ(check(fixed, kCheckCausalBound).verdict, "fixed (FAIL -> PASS)");
  EXPECT_EQ(check(compare({broken}, {broken}), kCheckCausalBound).verdict, "still failing");
}

// A scenario that vanished from NEW is a regression (it proves less); one only in
// NEW is listed; a kernel only in one report is listed.
TEST(Compare, VanishedScenarioFailsNewOneIsListed) {
  RunResult base_only = run("gone"), new_only = run("added");
  RunResult fewer = run();
  fewer.timings.pop_back();  // L1 gdn only in BASE
  const CompareResult r = compare({run(), base_only}, {fewer, new_only});
  EXPECT_TRUE(r.regressed());
  ASSERT_EQ(r.scenarios.size(), 3u);
  EXPECT_FALSE(r.scenarios[0].regressed());
  EXPECT_TRUE(r.scenarios[1].in_base && !r.scenarios[1].in_new);
  EXPECT_TRUE(r.scenarios[1].regressed());
  EXPECT_TRUE(!r.scenarios[2].in_base && r.scenarios[2].in_new);
  EXPECT_FALSE(r.scenarios[2].regressed());
  EXPECT_EQ(kernel(r, 1, "gdn").verdict, TimeVerdict::only_base);
  ASSERT_EQ(r.regressions.size(), 1u);
  EXPECT_EQ(r.regressions[0], "scenario gone [cuda] only in BASE: it vanished from NEW");
  EXPECT_TRUE(r.warnings.empty());
  const std::string table = format_compare(r, false);
  expect_fits(table);
  EXPECT_TRUE(contains(table, "gone [cuda]: only in BASE (vanished from NEW: REGRESSED)"));
  EXPECT_TRUE(contains(table, "added [cuda]: only in NEW"));
  EXPECT_TRUE(contains(lines_of(table).back(), "1 matched, 1 only in BASE, 1 only in NEW")) << table;
  // The same name on another backend is another scenario: with nothing in common, refused.
  EXPECT_THROW(compare({run("smoke", "cuda")}, {run("smoke", "host")}), InputError);
  const CompareResult both = compare({run("smoke", "cuda")}, {run("smoke", "cuda"), run("smoke", "host")});
  EXPECT_EQ(both.scenarios.size(), 2u);
  EXPECT_FALSE(both.regressed());
}

// A check that ran in BASE and not in NEW (switched off, or gone from the report)
// fails the gate; so does a NEW run that stopped on an error.
TEST(Compare, CheckThatStoppedRunningOrAnErrorFails) {
  RunResult off = run();
  off.checks[5].ran = false;
  off.checks[5].not_run_why = "not in the scenario's checks list";
  CompareResult r = compare({run()}, {off});
  EXPECT_TRUE(r.regressed());
  EXPECT_EQ(check(r, kCheckState).verdict, "REGRESSED (not run in NEW)");
  ASSERT_EQ(r.regressions.size(), 1u);
  EXPECT_TRUE(contains(r.regressions[0], "check state ran in BASE but not in NEW (not in the scenario's checks list)"));
  RunResult gone = run();
  gone.checks.erase(gone.checks.begin() + 5);
  r = compare({run()}, {gone});
  EXPECT_TRUE(r.regressed());
  EXPECT_EQ(check(r, kCheckState).verdict, "REGRESSED (missing from NEW)");
  // A check that did not run in BASE either is not a regression.
  RunResult base_off = off;
  EXPECT_FALSE(compare({base_off}, {off}).regressed());
  RunResult err = run();
  err.error = "out of memory (std::bad_alloc)";
  r = compare({run()}, {err});
  EXPECT_TRUE(r.regressed());
  EXPECT_TRUE(contains(r.regressions.at(0), "NEW stopped on an error: out of memory")) << r.regressions.at(0);
}

// Vacuous comparisons are refused: they would pass while proving nothing.
TEST(Compare, RefusesVacuousComparisonsAndBadOptions) {
  auto refusal = [](const std::vector<RunResult>& base, const std::vector<RunResult>& next,
                    const CompareOptions& o = {}) -> std::string {
    try {
      compare(base, next, o);
    } catch (const InputError& e) {
      return e.what();
    }
    return "";
  };
  EXPECT_TRUE(contains(refusal({run()}, {}), "NEW.json: $.runs: the report holds no run")) << refusal({run()}, {});
  EXPECT_TRUE(contains(refusal({}, {run()}), "BASE.json: $.runs: the report holds no run"));
  RunResult profile = run();
  for (CheckResult& c : profile.checks) c.ran = false, c.not_run_why = "--profile: no checks";
  EXPECT_TRUE(contains(refusal({run()}, {profile}), "NEW.json: no check ran in any of its 1 runs"));
  EXPECT_TRUE(contains(refusal({run("a")}, {run("b")}), "BASE.json and NEW.json have no scenario in common"));
  for (double bad : {kNaN, std::numeric_limits<double>::infinity(), 0.0, -1.0, 0.5}) {
    CompareOptions o;
    o.error_factor = bad;
    EXPECT_TRUE(contains(refusal({run()}, {run()}, o), "--error-factor: expected")) << bad;
  }
  for (double bad : {kNaN, 0.0, -1e-6}) {
    CompareOptions floor, threshold;
    floor.error_floor = bad;
    threshold.time_threshold = bad;
    EXPECT_TRUE(contains(refusal({run()}, {run()}, floor), "--error-floor: expected a finite positive number")) << bad;
    EXPECT_TRUE(contains(refusal({run()}, {run()}, threshold), "--time-threshold: expected a finite positive number"))
        << bad;
  }
  // The same reports with good options compare.
  EXPECT_EQ(refusal({run()}, {run()}), "");
  // With NaN as the factor a 100x error growth would have passed: it is refused instead.
  CompareOptions nan_factor;
  nan_factor.error_factor = kNaN;
  RunResult worse = run();
  worse.checks[2].figures[0].max_abs = 0.1;
  EXPECT_NE(refusal({run()}, {worse}, nan_factor), "");
}

// Host timings are a shared CPU's clock: a SLOW on host is reported, not gated,
// unless --gate-host-time. The same slowdown on CUDA fails the gate.
TEST(Compare, HostTimingIsReportedNotGatedUnlessAsked) {
  RunResult base = run("smoke", "host"), slow = run("smoke", "host");
  base.timings[2] = timing(0, "attention", 0.250, 0.240, 0.260);
  slow.timings[2] = timing(0, "attention", 0.349, 0.330, 0.360);  // +39.6%, ranges apart
  CompareResult r = compare({base}, {slow});
  EXPECT_EQ(kernel(r, 0, "attention").verdict, TimeVerdict::slow);
  EXPECT_FALSE(kernel(r, 0, "attention").gated);
  EXPECT_FALSE(r.regressed());
  const std::string table = format_compare(r, false);
  expect_fits(table);
  EXPECT_TRUE(contains(table, "SLOW (host, not gated)")) << table;
  EXPECT_TRUE(contains(table, "host timing, not gated (--gate-host-time gates it)")) << table;
  EXPECT_EQ(compare_json(r).at("scenarios")[0].at("kernels")[2].at("gated"), false);
  CompareOptions gate;
  gate.gate_host_time = true;
  r = compare({base}, {slow}, gate);
  EXPECT_TRUE(r.regressed());
  EXPECT_TRUE(kernel(r, 0, "attention").gated);
  RunResult cuda_base = run(), cuda_slow = run();
  cuda_base.timings[2] = base.timings[2];
  cuda_slow.timings[2] = slow.timings[2];
  EXPECT_TRUE(compare({cuda_base}, {cuda_slow}).regressed());
}

// Back to back on CUDA: a run whose clocks drifted shifts its median, but its
// range still meets the other run's (one sample each side near the other's
// median): with the whole range as the spread this is not SLOW. With min..q3 it was.
TEST(Compare, BackToBackCudaRunsWithDriftAreNotSlow) {
  RunResult a = run(), b = run();
  a.timings[2] = timing(0, "attention", 0.250, 0.245, 0.255);
  a.timings[2].max_ms = 0.262;
  b.timings[2] = timing(0, "attention", 0.280, 0.261, 0.285);  // +12%, min under a's max
  const CompareResult r = compare({a}, {b});
  EXPECT_EQ(kernel(r, 0, "attention").verdict, TimeVerdict::ambiguous);
  EXPECT_FALSE(r.regressed());
  // min..q3 would have called it SLOW: b's min 0.261 is past a's q3 0.255.
  EXPECT_GT(b.timings[2].min_ms, a.timings[2].q3_ms);
}

// Two back-to-back host runs of the same build with --repeat 5 (enough samples
// to be judged) never fail the gate: host time is information.
TEST(Compare, TwoHostRunsWithRepeatFivePass) {
  const Scenario s = load_scenario(pb::test::source_dir() + "/scenarios/smoke.yaml");
  RunOptions o;
  o.backend = "host";
  o.repeat = 5;
  const RunResult a = run_scenario(s, o);
  const RunResult b = run_scenario(s, o);
  ASSERT_TRUE(a.passed());
  ASSERT_EQ(a.timings.at(0).samples, 5);
  const CompareResult r = compare_reports(parse_report(report_json({a}), "first.json"),
                                          parse_report(report_json({b}), "second.json"), {});
  EXPECT_FALSE(r.regressed()) << format_compare(r, false);
  for (const KernelDelta& k : r.scenarios.at(0).kernels) {
    EXPECT_NE(k.verdict, TimeVerdict::insufficient) << k.kernel;
    EXPECT_FALSE(k.gated) << k.kernel;
  }
}

TEST(Compare, NotesInputsThatDiffer) {
  RunResult reseeded = run();
  reseeded.seed = 2;
  reseeded.inputs_checksum = 0x9999;
  const CompareResult r = compare({run()}, {reseeded});
  ASSERT_EQ(r.scenarios[0].notes.size(), 1u);
  EXPECT_TRUE(contains(r.scenarios[0].notes[0], "inputs differ (seed 1 vs 2"));
  EXPECT_FALSE(r.regressed());
}

TEST(Compare, TableFitsWithLongNamesAndColour) {
  RunResult a = run("a-scenario-with-a-rather-long-name-that-goes-on-and-on-and-on-for-ever-and-more");
  RunResult b = a;
  b.timings[2] = timing(0, "attention", 12345.6, 12000.1, 12400.9);
  a.timings[2] = timing(0, "attention", 1234.5, 1200.1, 1240.9);
  b.checks[2].fail(0, 1, std::string(300, 'x') + " a very long finding message that must wrap");
  const CompareResult r = compare_reports(loaded({a}, std::string(150, 'p').c_str()), loaded({b}, "NEW.json"), {});
  const std::string plain = format_compare(r, false);
  std::cout << plain;
  expect_fits(plain);
  const std::string colour = format_compare(r, true);
  EXPECT_TRUE(contains(colour, "\x1b[1;31mSLOW\x1b[0m"));
  EXPECT_EQ(plain.find('\x1b'), std::string::npos);
}

// Two runs of the same build on the host backend must not be flagged. The host
// backend times each layer twice by default (one checked run, one for
// determinism), so its timings are "insufficient samples": never judged.
TEST(Compare, TwoHostRunsOfTheSameBuildPass) {
  const Scenario s = load_scenario(pb::test::source_dir() + "/scenarios/smoke.yaml");
  RunOptions o;
  o.backend = "host";
  const RunResult a = run_scenario(s, o);
  const RunResult b = run_scenario(s, o);
  ASSERT_TRUE(a.passed());
  const CompareResult r = compare_reports(parse_report(report_json({a}), "first.json"),
                                          parse_report(report_json({b}), "second.json"), {});
  const std::string table = format_compare(r, false);
  std::cout << table;
  EXPECT_FALSE(r.regressed()) << table;
  EXPECT_TRUE(r.warnings.empty());
  ASSERT_EQ(r.scenarios.size(), 1u);
  EXPECT_TRUE(r.scenarios[0].notes.empty()) << r.scenarios[0].notes[0];
  // Same seed, deterministic host math: identical errors.
  EXPECT_EQ(check(r, kCheckNumeric).verdict, "same");
  EXPECT_EQ(check(r, kCheckNumeric).base_worst, check(r, kCheckNumeric).new_worst);
  EXPECT_EQ(check(r, kCheckState).base_worst, check(r, kCheckState).new_worst);
  ASSERT_FALSE(r.scenarios[0].kernels.empty());
  for (const KernelDelta& k : r.scenarios[0].kernels)
    EXPECT_EQ(k.verdict, TimeVerdict::insufficient) << k.kernel;
  expect_fits(table);
}

TEST(Compare, RefusesOtherSchemaVersionsAndMalformedJson) {
  const std::string good = temp_path("good.json"), v2 = temp_path("v2.json"), broken = temp_path("broken.json"),
                    notreport = temp_path("array.json"), typo = temp_path("typo.json");
  write_json(good, report_json({run()}));
  nlohmann::json j = report_json({run()});
  j["schema_version"] = kReportSchemaVersion + 1;
  write_json(v2, j);
  write_file(broken, "{\"schema_version\": " + std::to_string(kReportSchemaVersion) + ", \"runs\": [");
  write_file(notreport, "[1, 2, 3]");
  nlohmann::json t = report_json({run()});
  t["runs"][0]["timings"][2]["median_ms"] = "fast";
  write_json(typo, t);

  auto message = [](const std::string& a, const std::string& b) -> std::string {
    try {
      compare_files(a, b, {});
    } catch (const InputError& e) {
      return e.what();
    }
    return "";
  };
  const int v = kReportSchemaVersion;
  std::string m = message(good, v2);
  EXPECT_TRUE(contains(m, fmt::format("{} has schema_version {}, {} has schema_version {}", good, kReportSchemaVersion, v2, kReportSchemaVersion + 1))) << m;
  m = message(v2, v2);
  EXPECT_TRUE(contains(m, fmt::format("{}: $.schema_version: schema_version {}, but this prefill-bench reads schema_version {}", v2, kReportSchemaVersion + 1, kReportSchemaVersion)))
      << m;
  m = message(good, broken);
  EXPECT_TRUE(contains(m, broken + ": malformed JSON: parse error")) << m;
  m = message(broken, good);
  EXPECT_TRUE(contains(m, broken + ": malformed JSON")) << m;
  m = message(notreport, good);
  EXPECT_TRUE(contains(m, notreport + ": $: expected a prefill-bench report")) << m;
  m = message(good, typo);
  EXPECT_TRUE(contains(m, typo + ": $.runs[0].timings[2].median_ms: expected a number or null, found a string")) << m;
  m = message(good, temp_path("missing.json"));
  EXPECT_TRUE(contains(m, "missing.json: cannot open the report")) << m;
  for (const std::string& f : {good, v2, broken, notreport, typo}) std::remove(f.c_str());
}

// The CLI: exit 1 on a regression, 0 without, 2 on a refused report; --json written.
TEST(Compare, CliExitCodes) {
  const std::string cli = PB_CLI_PATH;
  const std::string base = temp_path("cli_base.json"), slow = temp_path("cli_slow.json"),
                    out = temp_path("cli_compare.json"), bad = temp_path("cli_bad.json");
  RunResult s = run();
  s.timings[2] = timing(0, "attention", 0.500, 0.480, 0.520);
  write_json(base, report_json({run()}));
  write_json(slow, report_json({s}));
  write_file(bad, "not json");
  std::string text;
  EXPECT_EQ(run_command(fmt::format("'{}' compare '{}' '{}' --no-color --json '{}'", cli, base, slow, out), &text), 1)
      << text;
  EXPECT_TRUE(contains(text, "L0 attention: SLOW")) << text;
  std::ifstream in(out);
  ASSERT_TRUE(in) << out;
  EXPECT_EQ(nlohmann::json::parse(in).at("passed"), false);
  text.clear();
  EXPECT_EQ(run_command(fmt::format("'{}' compare '{}' '{}' --no-color", cli, base, base), &text), 0) << text;
  text.clear();
  EXPECT_EQ(run_command(fmt::format("'{}' compare '{}' '{}' --time-threshold 1.5", cli, base, slow), &text), 0) << text;
  text.clear();
  EXPECT_EQ(run_command(fmt::format("'{}' compare '{}' '{}'", cli, base, bad), &text), 2) << text;
  EXPECT_TRUE(contains(text, "error: " + bad + ": malformed JSON")) << text;
  text.clear();
  EXPECT_EQ(run_command(fmt::format("'{}' compare '{}' '{}' --error-factor 0.5", cli, base, base), &text), 2) << text;
  for (const std::string& f : {base, slow, out, bad}) std::remove(f.c_str());
}

// Cold L2 against hot for the same scenario measures two different things:
// refused (InputError, exit 2), naming both modes; the same mode on both sides,
// or a report from before the field (no "l2"), is compared as usual.
TEST(Compare, RefusesColdAgainstHot) {
  RunResult cold = run(), hot = run();
  cold.l2 = "cold";
  hot.l2 = "hot";
  try {
    compare({cold}, {hot});
    ADD_FAILURE() << "cold vs hot was compared";
  } catch (const InputError& e) {
    EXPECT_TRUE(contains(e.what(), "BASE.json timed smoke on cuda with cold L2, NEW.json with hot L2")) << e.what();
  }
  EXPECT_FALSE(compare({cold}, {cold}).regressed());
  EXPECT_FALSE(compare({hot}, {hot}).regressed());
  // Another scenario in hot beside a cold one: only the same scenario is refused.
  RunResult other = run("other");
  other.l2 = "hot";
  EXPECT_NO_THROW(compare({cold, other}, {cold}));
  nlohmann::json old_doc = report_json({hot});
  old_doc["runs"][0].erase("l2");
  EXPECT_NO_THROW(compare_reports(parse_report(old_doc, "OLD.json"), loaded({cold}, "NEW.json"), {}));

  const std::string cli = PB_CLI_PATH;
  const std::string a = temp_path("cold.json"), b = temp_path("hot.json");
  write_json(a, report_json({cold}));
  write_json(b, report_json({hot}));
  std::string text;
  EXPECT_EQ(run_command(fmt::format("'{}' compare '{}' '{}' --no-color", cli, a, b), &text), 2) << text;
  EXPECT_TRUE(contains(text, "cold and hot times are not compared")) << text;
  for (const std::string& f : {a, b}) std::remove(f.c_str());
}

// NVML's clocks: a different SM clock and throttling on either side are noted
// (the time deltas are suspect), never gated; unavailable NVML notes nothing.
TEST(Compare, NotesClocksAndThrottling) {
  RunResult b = run(), n = run();
  for (RunResult* r : {&b, &n}) {
    r->clocks_before.available = r->clocks_after.available = true;
    r->clocks_before.sm_mhz = r->clocks_before.sm_max_mhz = 1980;
    r->clocks_before.mem_mhz = r->clocks_before.mem_max_mhz = 3201;
    r->clocks_after = r->clocks_before;
  }
  EXPECT_TRUE(compare({b}, {n}).scenarios[0].notes.empty());
  n.clocks_before.sm_mhz = 1500;
  n.clocks_after.throttle = {"sw_power_cap"};
  const std::vector<std::string> notes = compare({b}, {n}).scenarios[0].notes;
  ASSERT_EQ(notes.size(), 2u);
  EXPECT_TRUE(contains(notes[0], "clocks differ (BASE sm 1980/1980 MHz")) << notes[0];
  EXPECT_TRUE(contains(notes[1], "NEW was throttled around its timed runs (sw_power_cap)")) << notes[1];
  EXPECT_FALSE(compare({b}, {n}).regressed());
  RunResult u = run();
  u.clocks_before.unavailable_why = "libnvidia-ml.so.1: cannot open shared object file";
  EXPECT_TRUE(compare({u}, {u}).scenarios[0].notes.empty());
}

}  // namespace
}  // namespace pb
