// report_test.cpp: the table and the JSON report of hand-built RunResults: a
// passing run and a failing one (findings, a NaN figure, not-run checks,
// timings). The table must show every failing stream and finding within 100
// columns; the JSON must hold every field, null for NaN, and validate against
// lib/report_schema.json (tests/validate_report.py, skipped without jsonschema).
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

#include "lib/report.h"

namespace pb {
namespace {

const double kNaN = std::numeric_limits<double>::quiet_NaN();

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

// Runs of whitespace (wrapped lines included) as one space: a wrapped message
// still reads as the message.
std::string squeeze(const std::string& text) {
  std::string out;
  bool space = false;
  for (char c : text) {
    if (c == ' ' || c == '\n' || c == '\t') {
      space = true;
      continue;
    }
    if (space && !out.empty()) out += ' ';
    space = false;
    out += c;
  }
  return out;
}

Figure figure(int layer, int stream, const char* what, double max_abs, double limit) {
  Figure f;
  f.layer = layer;
  f.stream = stream;
  f.what = what;
  f.max_abs = max_abs;
  f.rel_l2 = max_abs * 0.5;
  f.lowp_max_abs = limit / 3;
  f.limit = limit;
  f.elements = 4096;
  f.pass = std::isfinite(max_abs) && max_abs <= limit;
  if (!std::isfinite(max_abs)) f.nonfinite = 17;
  return f;
}

CheckResult check(const char* name) {
  CheckResult c;
  c.name = name;
  return c;
}

CheckResult not_run(const char* name, const char* why) {
  CheckResult c = check(name);
  c.ran = false;
  c.not_run_why = why;
  return c;
}

KernelTiming timing(int layer, const char* kernel, double median_ms, double flops, double bytes) {
  KernelTiming t;
  t.layer = layer;
  t.kernel = kernel;
  t.samples = 10;
  t.median_ms = median_ms;
  t.min_ms = median_ms * 0.9;
  t.max_ms = median_ms * 1.3;
  t.q1_ms = median_ms * 0.95;
  t.q3_ms = median_ms * 1.1;
  t.flops = flops;
  t.bytes = bytes;
  return t;
}

RunResult base_run(const char* name, int streams, const std::vector<std::string>& kinds) {
  RunResult r;
  r.scenario_path = fmt::format("scenarios/{}.yaml", name);
  r.scenario_name = name;
  r.seed = 1234567;
  r.backend = "cuda";
  r.device.name = "NVIDIA H200";
  r.device.driver = "560.35.03";
  r.device.runtime = "12.6";
  r.device.sm_count = 132;
  r.device.peak_tflops = 989;
  r.device.peak_gbps = 4800;
  r.layer_kinds = kinds;
  for (int b = 0; b < streams; ++b) {
    StreamSummary s;
    s.chunk_start = b % 2 ? 64 : 0;
    s.count = 100 + b;
    s.kv_len = s.chunk_start + s.count;
    s.blocks = (s.kv_len + 15) / 16;
    s.has_image = b == 1;
    r.total_tokens += s.count;
    r.chunk_len = std::max(r.chunk_len, s.count);
    r.max_blocks_per_seq = std::max(r.max_blocks_per_seq, s.blocks);
    r.streams.push_back(s);
  }
  r.staged_bytes = 4096;
  r.inputs_checksum = 0xdeadbeefULL;
  r.wall_s = 1.25;
  for (const std::string& n : all_check_names()) r.checks.push_back(check(n.c_str()));
  return r;
}

// Every check passes; numeric figures per stream and layer.
RunResult passing_run() {
  RunResult r = base_run("text_only", 3, {"attn", "attn"});
  CheckResult& numeric = r.checks[2];
  for (int l = 0; l < 2; ++l)
    for (int b = 0; b < 3; ++b) numeric.figures.push_back(figure(l, b, "out", 1e-3 * (b + 1), 8e-3));
  r.checks[5] = not_run(kCheckState, "no gdn layer in this scenario");
  for (int l = 0; l < 2; ++l) {
    r.timings.push_back(timing(l, "rope", 0.012, 0, 3e6));
    r.timings.push_back(timing(l, "kv_write", 0.010, 0, 2e6));
    r.timings.push_back(timing(l, "attention", 0.250, 1.5e11, 8e7));
  }
  return r;
}

const char* kCausalMessage =
    "stream 1 (kv_len 165): output depends on key position 165 at or past kv_len; the poisoned "
    "KV of block 11 reached 64 of its output rows, so the stream's bound is not its own kv_len "
    "but something larger";
const char* kNumericMessage = "stream 2 (kv_len 102): 17 NaN/Inf outputs where the reference is finite";
const char* kGuardMessage = "canary after h_state_ptrs overwritten (expected 0xc0ffee, found 0x0)";

// Fails numeric (a NaN figure, stream 2), causal_bound (stream 1, 9 findings of
// which 2 listed), scratch_guard (not stream specific); not-run checks.
RunResult failing_run() {
  RunResult r = base_run("hybrid_mix", 4, {"attn", "gdn"});
  r.backend = "host";
  r.device = DeviceInfo{};
  r.device.name = "host CPU";
  r.faults.add(Fault::slot_off_by_one);
  r.ref_sample = 4;
  CheckResult& guard = r.checks[1];
  guard.fail(1, -1, kGuardMessage);
  CheckResult& numeric = r.checks[2];
  for (int l = 0; l < 2; ++l)
    for (int b = 0; b < 4; ++b)
      numeric.figures.push_back(figure(l, b, "out", l == 1 && b == 2 ? kNaN : 2e-3, 8e-3));
  numeric.figures[6].rel_l2 = std::numeric_limits<double>::infinity();
  numeric.fail(1, 2, kNumericMessage);
  CheckResult& causal = r.checks[3];
  causal.fail(0, 1, kCausalMessage);
  causal.fail(0, 3, "stream 3 (kv_len 167): reads block 12 it does not own");
  causal.findings.resize(2);
  causal.finding_count = 9;
  r.checks[6] = not_run(kCheckPositions, "no MRoPE in this scenario");
  r.checks[7] = not_run(kCheckDeterminism, "the host backend runs each layer once");
  r.timings.push_back(timing(0, "attention", 2.5, 1.5e11, 8e7));
  r.timings.push_back(timing(1, "conv1d", 0.8, 0, 1e7));
  r.timings.push_back(timing(1, "gdn", 3.0, 4e10, 5e7));
  return r;
}

std::string stream_row(const RunResult& r, int b) {
  const StreamSummary& s = r.streams[b];
  return fmt::format("  {:>6} {:>6} {:>6} {:>7} {:>6}", b, s.chunk_start, s.count, s.kv_len,
                     s.blocks);
}

void expect_fits(const std::string& table) {
  for (const std::string& line : lines_of(table))
    EXPECT_LE(line.size(), 100u) << "too wide: '" << line << "'";
}

TEST(ReportTable, ShowsEveryFailingStreamAndFinding) {
  const std::vector<RunResult> runs = {passing_run(), failing_run()};
  const std::string table = format_table(runs, false);
  std::cout << table;
  expect_fits(table);
  EXPECT_EQ(table.find('\x1b'), std::string::npos) << "colour codes without color";

  const std::string flat = squeeze(table);
  // Each run's part of the table starts at its header.
  const size_t ok_at = table.find("PASS  text_only"), bad_at = table.find("FAIL  hybrid_mix");
  ASSERT_NE(ok_at, std::string::npos);
  ASSERT_NE(bad_at, std::string::npos);
  ASSERT_LT(ok_at, bad_at);
  const std::string parts[2] = {table.substr(ok_at, bad_at - ok_at), table.substr(bad_at)};
  for (size_t i = 0; i < 2; ++i)
    for (size_t b = 0; b < runs[i].streams.size(); ++b)
      EXPECT_NE(parts[i].find(stream_row(runs[i], b)), std::string::npos)
          << runs[i].scenario_name << " stream " << b;
  for (const CheckResult& c : runs[1].checks)
    for (const Finding& f : c.findings) {
      const std::string at = f.stream >= 0 ? fmt::format("layer {} stream {}: ", f.layer, f.stream)
                                           : fmt::format("layer {}: ", f.layer);
      EXPECT_NE(flat.find(squeeze(at + f.message)), std::string::npos) << f.message;
    }
  EXPECT_NE(table.find("(+7 more)"), std::string::npos);
  // Stream 2 of the failing run: NaN outputs, numeric X.
  const std::string row2 = parts[1].substr(parts[1].find(stream_row(runs[1], 2)));
  EXPECT_EQ(squeeze(row2.substr(0, row2.find('\n')).substr(stream_row(runs[1], 2).size())),
            "nonfinite inf . . X . . . - - . . .");
  EXPECT_NE(flat.find("not run no MRoPE in this scenario"), std::string::npos);
  EXPECT_NE(flat.find("worst layer 1 stream 2 out: max_abs nan"), std::string::npos);
  EXPECT_NE(table.find("slot-off-by-one"), std::string::npos);
  // Peaks known: % of peak; per-layer timing lines (<= 4 layers); the gdn note.
  EXPECT_NE(table.find("%peak"), std::string::npos);
  EXPECT_NE(table.find(fmt::format("  {:<10} {:<11}", "1 gdn", "conv1d")), std::string::npos);
  EXPECT_NE(table.find("intra-chunk"), std::string::npos);

  const std::vector<std::string> lines = lines_of(table);
  ASSERT_FALSE(lines.empty());
  EXPECT_EQ(lines.back(), "2 scenarios, 1 passed, 1 failed");
}

TEST(ReportTable, ColourOnlyOnRequest) {
  const std::string table = format_table({failing_run()}, true);
  EXPECT_NE(table.find("\x1b[1;31mFAIL\x1b[0m"), std::string::npos);
  EXPECT_EQ(lines_of(table).back(), "1 scenario, 0 passed, \x1b[1;31m1 failed\x1b[0m");
}

TEST(ReportTable, ManyStreamsShowWorstAndEveryFailing) {
  RunResult r = base_run("many", 40, {"attn"});
  CheckResult& numeric = r.checks[2];
  for (int b = 0; b < 40; ++b) numeric.figures.push_back(figure(0, b, "out", 1e-4 * (b % 7), 8e-3));
  numeric.figures[17].max_abs = 7e-3;  // the worst passing stream
  numeric.figures[5] = figure(0, 5, "out", 2e-2, 8e-3);
  numeric.fail(0, 5, "stream 5: max_abs 2e-2 over limit 8e-3");
  r.checks[4].fail(0, 33, "stream 33: slot 12 of block 7 not written");
  r.checks[4].fail(0, 38, "stream 38: slot 3 of block 2 holds stream 37's key");
  r.device.name = std::string("NVIDIA H200 with a very long marketing name ") + std::string(60, 'x');
  const std::string table = format_table({r}, false);
  expect_fits(table);
  // The header shortens the device name; the line below it holds it whole.
  EXPECT_NE(squeeze(table).find("device " + r.device.name), std::string::npos) << table;
  for (int b : {5, 33, 38, 17}) EXPECT_NE(table.find(stream_row(r, b)), std::string::npos) << b;
  EXPECT_NE(table.find("... 32 more streams all passing"), std::string::npos) << table;
  int rows = 0;
  for (int b = 0; b < 40; ++b) rows += table.find(stream_row(r, b)) != std::string::npos;
  EXPECT_EQ(rows, 8);
}

TEST(ReportTable, ManyLayersAggregateByKind) {
  std::vector<std::string> kinds;
  for (int l = 0; l < 12; ++l) kinds.push_back(l % 4 == 3 ? "attn" : "gdn");
  RunResult r = base_run("deep", 2, kinds);
  r.device.peak_tflops = 0;
  r.device.peak_gbps = 0;
  for (int l = 0; l < 12; ++l) {
    if (kinds[l] == "attn") {
      r.timings.push_back(timing(l, "attention", 0.2 + 0.01 * l, 1e10, 1e7));
    } else {
      r.timings.push_back(timing(l, "conv1d", 0.05, 0, 1e7));
      r.timings.push_back(timing(l, "gdn", 0.1, 4e9, 2e7));
    }
  }
  const std::string table = format_table({r}, false);
  expect_fits(table);
  EXPECT_NE(table.find("attn x3"), std::string::npos) << table;
  EXPECT_NE(table.find("gdn x9"), std::string::npos);
  EXPECT_EQ(table.find("3 attn   "), std::string::npos) << "per-layer lines with 12 layers";
  EXPECT_EQ(table.find("%peak"), std::string::npos) << "no peaks known";
  // gdn: 9 layers of 4e9 FLOPs over 9 x 0.1 ms = 40 TFLOP/s.
  EXPECT_NE(table.find("40.00*"), std::string::npos) << table;
}

TEST(ReportJson, HoldsEveryFieldAndNullForNaN) {
  const nlohmann::json j = report_json({passing_run(), failing_run()});
  EXPECT_EQ(j.at("schema_version"), kReportSchemaVersion);
  EXPECT_EQ(j.at("tool").at("name"), "prefill-bench");
  for (const char* k : {"version", "git_revision", "build_flags"})
    EXPECT_TRUE(j.at("tool").at(k).is_string()) << k;
  EXPECT_EQ(j.at("passed"), false);
  ASSERT_EQ(j.at("runs").size(), 2u);
  const nlohmann::json& ok = j.at("runs")[0];
  const nlohmann::json& bad = j.at("runs")[1];
  EXPECT_EQ(ok.at("passed"), true);
  EXPECT_EQ(bad.at("passed"), false);

  const nlohmann::json& sc = bad.at("scenario");
  EXPECT_EQ(sc.at("path"), "scenarios/hybrid_mix.yaml");
  EXPECT_EQ(sc.at("name"), "hybrid_mix");
  EXPECT_EQ(sc.at("seed"), 1234567u);
  EXPECT_EQ(sc.at("inputs_checksum"), "00000000deadbeef");
  EXPECT_EQ(sc.at("layers"), nlohmann::json({"attn", "gdn"}));
  EXPECT_EQ(sc.at("total_tokens"), 406);
  EXPECT_EQ(sc.at("chunk_len"), 103);
  EXPECT_EQ(sc.at("max_blocks_per_seq"), 11);
  EXPECT_EQ(sc.at("staged_bytes"), 4096);
  EXPECT_EQ(bad.at("backend"), "host");
  for (const char* k : {"name", "driver", "runtime", "sm_count", "peak_tflops", "peak_gbps"})
    EXPECT_TRUE(ok.at("device").contains(k)) << k;
  EXPECT_EQ(ok.at("device").at("sm_count"), 132);
  EXPECT_EQ(bad.at("faults_injected"), nlohmann::json({"slot-off-by-one"}));
  EXPECT_EQ(bad.at("ref_sample"), 4);
  ASSERT_EQ(bad.at("streams").size(), 4u);
  EXPECT_EQ(bad.at("streams")[1],
            nlohmann::json({{"index", 1}, {"chunk_start", 64}, {"count", 101}, {"kv_len", 165},
                            {"blocks", 11}, {"has_image", true}}));

  ASSERT_EQ(bad.at("checks").size(), all_check_names().size());
  const nlohmann::json& numeric = bad.at("checks")[2];
  EXPECT_EQ(numeric.at("name"), "numeric");
  EXPECT_EQ(numeric.at("passed"), false);
  EXPECT_EQ(numeric.at("finding_count"), 1);
  EXPECT_EQ(numeric.at("findings")[0],
            nlohmann::json({{"layer", 1}, {"stream", 2}, {"message", kNumericMessage}}));
  const nlohmann::json& nan_fig = numeric.at("figures")[6];
  EXPECT_EQ(nan_fig.at("stream"), 2);
  EXPECT_TRUE(nan_fig.at("max_abs").is_null());
  EXPECT_TRUE(nan_fig.at("rel_l2").is_null());  // +Inf
  EXPECT_EQ(nan_fig.at("nonfinite"), 17);
  EXPECT_EQ(nan_fig.at("pass"), false);
  for (const char* k : {"layer", "what", "lowp_max_abs", "limit", "elements"})
    EXPECT_TRUE(nan_fig.contains(k)) << k;
  EXPECT_EQ(bad.at("checks")[3].at("finding_count"), 9);
  EXPECT_EQ(bad.at("checks")[3].at("findings").size(), 2u);
  EXPECT_EQ(bad.at("checks")[6].at("ran"), false);
  EXPECT_EQ(bad.at("checks")[6].at("not_run_why"), "no MRoPE in this scenario");

  const nlohmann::json& t = bad.at("timings")[2];
  EXPECT_EQ(t.at("layer"), 1);
  EXPECT_EQ(t.at("kernel"), "gdn");
  EXPECT_EQ(t.at("samples"), 10);
  for (const char* k : {"median_ms", "min_ms", "max_ms", "q1_ms", "q3_ms", "flops", "bytes"})
    EXPECT_TRUE(t.at(k).is_number()) << k;
  EXPECT_DOUBLE_EQ(t.at("tflops").get<double>(), 4e10 / (3.0 * 1e9));
  EXPECT_DOUBLE_EQ(t.at("gbps").get<double>(), 5e7 / (3.0 * 1e6));
  EXPECT_DOUBLE_EQ(bad.at("wall_s").get<double>(), 1.25);
  // The text parses back with null where the figure was NaN.
  const nlohmann::json back = nlohmann::json::parse(j.dump());
  EXPECT_TRUE(back.at("runs")[1].at("checks")[2].at("figures")[6].at("max_abs").is_null());
  EXPECT_EQ(back, j);
}

using pb::test::run_command;

std::string temp_file(const char* name) {
  return fmt::format("{}pb_report_test_{}_{}", ::testing::TempDir(), getpid(), name);
}

TEST(ReportJson, ValidatesAgainstSchema) {
  std::string probe;
  if (run_command("/usr/bin/python3 -c 'import jsonschema'", &probe) != 0)
    GTEST_SKIP() << "/usr/bin/python3 cannot import jsonschema (apt-get install "
                    "python3-jsonschema; scripts/deps.sh installs it): "
                 << probe;
  const std::string validate = fmt::format("/usr/bin/python3 '{}' '{}' ",
                                           test::source_path("tests/validate_report.py"),
                                           test::source_path("lib/report_schema.json"));
  nlohmann::json j = report_json({passing_run(), failing_run()});
  const std::string good = temp_file("good.json");
  write_json(good, j);
  std::string out;
  EXPECT_EQ(run_command(validate + "'" + good + "'", &out), 0) << out;

  // The schema is strict: an unknown field, a wrong version, a NaN-as-string fail.
  j["schema_version"] = kReportSchemaVersion + 1;
  j["runs"][0]["bogus"] = 1;
  j["runs"][0]["verdict"] = "maybe";
  j["runs"][1]["checks"][2]["figures"][6]["max_abs"] = "nan";
  const std::string bad = temp_file("bad.json");
  write_json(bad, j);
  out.clear();
  EXPECT_EQ(run_command(validate + "'" + bad + "'", &out), 1) << out;
  EXPECT_NE(out.find("schema_version"), std::string::npos) << out;
  EXPECT_NE(out.find("bogus"), std::string::npos) << out;
  EXPECT_NE(out.find("$.runs[0].verdict"), std::string::npos) << out;
  EXPECT_NE(out.find("$.runs[1].checks[2].figures[6].max_abs"), std::string::npos) << out;
  std::remove(good.c_str());
  std::remove(bad.c_str());
}

// The schema's enums are the library's names.
TEST(ReportJson, SchemaNamesMatchLibrary) {
  std::ifstream in(test::source_path("lib/report_schema.json"));
  ASSERT_TRUE(in) << "lib/report_schema.json";
  const nlohmann::json schema = nlohmann::json::parse(in);
  EXPECT_EQ(schema.at("properties").at("schema_version").at("const"), kReportSchemaVersion);
  const nlohmann::json& defs = schema.at("$defs");
  // Every check a run reports: all_check_names() and, under --graph, graph.
  nlohmann::json checks = nlohmann::json(all_check_names());
  checks.push_back(kCheckGraph);
  EXPECT_EQ(defs.at("check_name").at("enum"), checks);
  nlohmann::json faults = nlohmann::json::array();
  for (const FaultInfo& f : all_faults()) faults.push_back(f.name);
  EXPECT_EQ(defs.at("fault_name").at("enum"), faults);
}

TEST(ReportJson, WriteMakesTheDirectoryAndNamesThePathOnFailure) {
  const std::string dir = temp_file("dir");
  const std::string path = dir + "/sub/report.json";
  write_json(path, report_json({}));
  std::ifstream in(path);
  ASSERT_TRUE(in) << path;
  EXPECT_EQ(nlohmann::json::parse(in).at("runs").size(), 0u);
  std::filesystem::remove_all(dir);

  // A parent that is a plain file: neither made nor written.
  const std::string file = temp_file("plain");
  std::ofstream(file) << "x";
  const std::string bad = file + "/report.json";
  try {
    write_json(bad, report_json({}));
    FAIL() << "no exception";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find(bad), std::string::npos) << e.what();
  }
  std::remove(file.c_str());
}

}  // namespace
}  // namespace pb
