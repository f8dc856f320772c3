// bad_input_test.cpp: a table of bad inputs driven through the real CLI. Every row
// must be refused before anything runs: its exit code (2 unless it says otherwise),
// every message fragment present (file, line, field), and no run table printed.
// One good run per subcommand shape proves the same files pass once repaired.
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "tests/test_util.h"

#include "lib/report.h"
#include "lib/run.h"

namespace pb {
namespace {

namespace fs = std::filesystem;

// A small valid scenario with both layer kinds; rows edit it by replacing text.
constexpr const char* kGood = R"(name: good
seed: 1
model:
  num_q_heads: 4
  num_kv_heads: 2
  head_dim: 64
  block_size: 16
  gdn: {num_k_heads: 2, num_v_heads: 4, k_dim: 32, v_dim: 32, d_conv: 4}
layers:
  pattern: [attn, gdn]
streams:
  - tokens: 23
  - {chunk_start: 9, tokens: 40}
)";

std::string replace(std::string s, const std::string& from, const std::string& to) {
  const size_t at = s.find(from);
  if (at == std::string::npos) throw std::runtime_error("test row: no '" + from + "' in the scenario");
  return s.replace(at, from.size(), to);
}

struct Row {
  std::string name;
  std::string file;      // scenario file name in the temp dir ("" = none written)
  std::string yaml;      // its content
  std::string args;      // after the CLI path; {dir} = the temp dir, {f} = the file's path
  int exit = 2;
  std::vector<std::string> fragments;  // each must be in the output
};

class BadInput : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    char tmpl[] = "/tmp/pb_bad_input_XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    // Reports for the compare rows: a checked run, a profile run (no check ran),
    // another scenario, and an empty report.
    RunResult checked;
    checked.scenario_name = "good";
    checked.backend = "host";
    CheckResult c;
    c.name = "numeric";
    checked.checks.push_back(c);
    RunResult profile = checked;
    profile.checks[0].ran = false;
    profile.checks[0].not_run_why = "--profile: no checks";
    RunResult other = checked;
    other.scenario_name = "other";
    write_json(dir_ + "/checked.json", report_json({checked}));
    write_json(dir_ + "/profile.json", report_json({profile}));
    write_json(dir_ + "/other.json", report_json({other}));
    write_json(dir_ + "/empty.json", report_json({}));
    std::ofstream(dir_ + "/big.yaml") << std::string((16 << 20) + 1, '#');
    fs::create_directory(dir_ + "/a-directory.yaml");
    mkfifo((dir_ + "/fifo.yaml").c_str(), 0644);
    std::ofstream(dir_ + "/plain-file") << "x";
  }
  static void TearDownTestSuite() { fs::remove_all(dir_); }
  static std::string dir_;
};
std::string BadInput::dir_;

std::vector<Row> rows() {
  const std::string g = kGood;
  const std::string attn_only = replace(g, "pattern: [attn, gdn]", "pattern: [attn]");
  const std::string gdn_only = replace(g, "pattern: [attn, gdn]", "pattern: [gdn]");
  // Qwen3-Next GDN shape, 2000 continuation streams: ~5 GB of its own tensors, far
  // more with the backend's copies, the reference and the read-backs.
  const std::string qwen_2000 =
      "name: qwen-2000\nseed: 1\nmodel:\n  num_q_heads: 16\n  num_kv_heads: 2\n  head_dim: 256\n"
      "  rotary_dim: 64\n  gdn: {num_k_heads: 16, num_v_heads: 32, k_dim: 128, v_dim: 128, d_conv: 4}\n"
      "layers:\n  pattern: [gdn, gdn, gdn, attn]\nstreams:\n"
      "  - generate: {dist: fixed, count: 2000, tokens: 8, chunk_start: 64}\n";
  // The good file's streams, and the same file reading line N of tests/bad/batches.jsonl instead.
  const std::string kStreams = "streams:\n  - tokens: 23\n  - {chunk_start: 9, tokens: 40}\n";
  auto jsonl = [&](int line) {
    return replace(g, kStreams, fmt::format("streams: {{from_jsonl: {}/tests/bad/batches.jsonl, line: {}}}\n",
                                            pb::test::source_dir(), line));
  };
  const std::string three_problems =
      replace(replace(replace(g, "head_dim: 64", "head_dim: sixty-four"), "tokens: 23", "tokens: -1"),
              "seed: 1", "seed: \"1\"");
  return {
      // ---- checks that cannot run (item 1) ----
      {"state_on_attention_only", "a.yaml", replace(attn_only, "streams:", "checks: [numeric, state]\nstreams:"),
       "validate {f}", 2, {"a.yaml:11:19: checks[1]: check 'state' cannot run on this model: no gdn layer"}},
      {"kv_write_on_gdn_only", "g.yaml", replace(gdn_only, "streams:", "checks: [kv_write]\nstreams:"),
       "run {f} --backend host", 2, {"g.yaml:11:10: checks[0]: check 'kv_write' cannot run", "no attention layer"}},
      {"causal_bound_on_gdn_only", "g.yaml", replace(gdn_only, "streams:", "checks: [causal_bound]\nstreams:"),
       "validate {f}", 2, {"checks[0]: check 'causal_bound' cannot run"}},
      {"unknown_check", "c.yaml", replace(g, "streams:", "checks: [numerc]\nstreams:"), "validate {f}", 2,
       {"checks[0]: unknown check 'numerc' (did you mean 'numeric'?"}},
      // ---- resource ceilings ----
      {"scratch_2_pow_40", "s.yaml", g + "scratch: {capacity_bytes: 1099511627776}\n", "run {f} --backend host", 2,
       {"s.yaml:14:11: scratch.capacity_bytes: the run would hold an estimated", "--max-memory"}},
      {"num_blocks_1e8_plain", "k.yaml", g + "kv_cache: {num_blocks: 100000000}\n", "run {f} --backend host", 2,
       {"k.yaml:14:12: kv_cache.num_blocks: the paged KV cache", "more than an i32 index reaches"}},
      {"num_blocks_1e6_memory", "k.yaml", g + "kv_cache: {num_blocks: 1000000}\n", "run {f} --backend host --max-memory 16", 2,
       {"k.yaml:14:12: kv_cache.num_blocks: the run would hold an estimated", "KV caches"}},
      {"num_blocks_1e8_float", "k.yaml", g + "kv_cache: {num_blocks: 1e8}\n", "validate {f}", 2,
       {"k.yaml:14:24: kv_cache.num_blocks: expected an integer, found '1e8'"}},
      {"num_blocks_2_pow_31_minus_1", "k.yaml", g + "kv_cache: {num_blocks: 2147483647}\n", "validate {f}", 2,
       {"kv_cache.num_blocks: the paged KV cache", "more than an i32 index reaches"}},
      {"chunk_start_and_tokens_2_pow_20", "t.yaml",
       replace(g, "  - tokens: 23\n", "  - {chunk_start: 1048576, tokens: 1048576}\n"),
       "run {f} --backend host --max-memory 100000", 2, {"t.yaml:11:1: streams: the reference would take", "--ref-sample"}},
      {"chunk_start_and_tokens_2_pow_20_memory", "t.yaml",
       replace(g, "  - tokens: 23\n", "  - {chunk_start: 1048576, tokens: 1048576}\n"),
       "validate {f} --max-memory 1", 2, {"t.yaml:11:1: streams: the run would hold an estimated", "given by --max-memory"}},
      {"qwen3_next_2000_streams_on_24_gb", "q.yaml", qwen_2000, "run {f} --backend host --max-memory 24", 2,
       {"q.yaml:11:1: streams: the run would hold an estimated", "gdn states", "more than the 24.0 GB given by --max-memory"}},
      {"qwen3_next_2000_streams_device", "q.yaml", qwen_2000, "stage {f} --max-memory 24", 2, {"q.yaml:11:1: streams:"}},
      {"ref_ceiling_flag", "t.yaml", g, "run {f} --backend host --max-ref-gflop 0.000001", 2,
       {"the reference would take", "--max-ref-gflop"}},
      // ---- scenario paths ----
      {"dev_zero", "", "", "validate /dev/zero", 2, {"/dev/zero: not a regular file (a device)"}},
      {"directory", "", "", "run {dir}/a-directory.yaml --backend host", 2, {"a-directory.yaml: not a regular file (a directory)"}},
      {"fifo", "", "", "validate {dir}/fifo.yaml", 2, {"fifo.yaml: not a regular file (a FIFO)"}},
      {"over_16_mib", "", "", "validate {dir}/big.yaml", 2, {"big.yaml: the file holds 16777217 bytes, more than the 16777216"}},
      {"missing_file", "", "", "validate {dir}/missing.yaml", 2, {"missing.yaml: cannot open the scenario file"}},
      // ---- YAML ----
      {"second_document", "d.yaml", g + "---\nname: second\n", "validate {f}", 2,
       {"d.yaml:15:1: a second YAML document"}},
      {"quoted_seed", "q.yaml", replace(g, "seed: 1", "seed: \"42\""), "validate {f}", 2,
       {"q.yaml:2:7: seed: expected a non-negative integer, found the string \"42\" (quoted"}},
      {"quoted_tokens", "q.yaml", replace(g, "tokens: 23", "tokens: '23'"), "validate {f}", 2,
       {"q.yaml:12:13: streams[0].tokens: expected an integer, found the string \"23\""}},
      {"quoted_head_dim", "q.yaml", replace(g, "head_dim: 64", "head_dim: \"64\""), "validate {f}", 2,
       {"model.head_dim: expected an integer, found the string"}},
      {"quoted_factor", "q.yaml", g + "tolerances:\n  bf16: {factor: \"2.0\"}\n", "validate {f}", 2,
       {"tolerances.bf16.factor: expected a number, found the string \"2.0\""}},
      {"quoted_boolean", "q.yaml", replace(g, "block_size: 16", "block_size: 16\n  mrope: {sections: [16, 8, 8], interleaved: \"true\"}"),
       "validate {f}", 2, {"model.mrope.interleaved: expected true or false, found the string"}},
      {"syntax_error", "y.yaml", replace(g, "pattern: [attn, gdn]", "pattern: [attn, gdn"), "validate {f}", 2,
       {"y.yaml:", "YAML syntax error"}},
      {"empty_file", "e.yaml", "", "validate {f}", 2, {"e.yaml:", "expected a map of scenario fields"}},
      {"unknown_key", "u.yaml", replace(g, "seed: 1", "seed: 1\nsede: 2"), "validate {f}", 2,
       {"u.yaml:3:1: sede: unknown key 'sede' (did you mean 'seed'?"}},
      {"gdn_layer_without_gdn_shape", "n.yaml",
       replace(g, "  gdn: {num_k_heads: 2, num_v_heads: 4, k_dim: 32, v_dim: 32, d_conv: 4}\n", ""), "validate {f}", 2,
       {"model.gdn: required field missing"}},
      {"g_range_positive", "g.yaml", replace(g, "d_conv: 4}", "d_conv: 4, g_range: [-0.1, 0.5]}"), "validate {f}", 2,
       {"g.yaml:8:", "model.gdn.g_range[1]: expected a number <= 0 (g is a log-decay), found 0.5"}},
      {"g_range_reversed", "g.yaml", replace(g, "d_conv: 4}", "d_conv: 4, g_range: [-0.001, -0.5]}"), "validate {f}", 2,
       {"g.yaml:8:", "model.gdn.g_range: expected lo <= hi, found [-0.001, -0.5]"}},
      {"g_range_one_number", "g.yaml", replace(g, "d_conv: 4}", "d_conv: 4, g_range: [-0.1]}"), "validate {f}", 2,
       {"g.yaml:8:", "model.gdn.g_range: expected two numbers [lo, hi], found 1"}},
      {"g_range_below_minus_100", "g.yaml", replace(g, "d_conv: 4}", "d_conv: 4, g_range: [-1e6, -1]}"), "validate {f}", 2,
       {"g.yaml:8:", "model.gdn.g_range[0]: expected a number >= -100, found -1e6"}},
      {"g_range_text", "g.yaml", replace(g, "d_conv: 4}", "d_conv: 4, g_range: [slow, -1]}"), "validate {f}", 2,
       {"g.yaml:8:", "model.gdn.g_range[0]: expected a number, found 'slow'"}},
      {"validate_reports_every_problem", "m.yaml", three_problems, "validate {f}", 2,
       {"m.yaml:2:7: seed: expected a non-negative integer, found the string \"1\"",
        "m.yaml:6:13: model.head_dim: expected an integer, found 'sixty-four'",
        "m.yaml:12:13: streams[0].tokens: expected a positive integer <= 1048576, found -1"}},
      {"validate_every_stream_problem", "b.yaml",
       replace(replace(g, "  - tokens: 23\n", "  - {tokens: 23, blocks: [0, 1]}\n"), "{chunk_start: 9, tokens: 40}",
               "{chunk_start: 9, tokens: 40, blocks: [2, 3, 4, 5]}"),
       "validate {f}", 2,
       {"b.yaml:12:18: streams[0].blocks: stream 0: explicit block ids need kv_cache.num_blocks",
        "b.yaml:13:34: streams[1].blocks: stream 1: explicit block ids need kv_cache.num_blocks"}},
      {"validate_every_check_problem", "c.yaml", replace(attn_only, "streams:", "checks: [numerc, numeric, numeric]\nstreams:"),
       "validate {f}", 2, {"checks[0]: unknown check 'numerc'", "checks[2]: check 'numeric' listed twice"}},
      {"validate_every_file", "m.yaml", three_problems, "validate {f} /dev/zero", 2,
       {"model.head_dim", "/dev/zero: not a regular file"}},
      // ---- overflow in derived sizes ----
      {"tokens_past_2_pow_20", "o.yaml", replace(g, "tokens: 23", "tokens: 1048577"), "validate {f}", 2,
       {"streams[0].tokens: expected a positive integer <= 1048576, found 1048577"}},
      {"q_elements_past_i32", "o.yaml",
       replace(replace(g, "num_q_heads: 4", "num_q_heads: 1024"), "  - tokens: 23\n", "  - tokens: 1048576\n"),
       "validate {f}", 2, {"streams: q (total tokens x num_q_heads x head_dim) would hold", "i32 index"}},
      {"sweep_scale_1e9", "w.yaml", g, "sweep {f} --grid scale=1e9 --out {dir}/sweep-scale", 2,
       {"scale=1000000000: stream 0 would have 23000000000 tokens", "at most 1048576 per stream"}},
      // ---- command-line numbers ----
      {"repeat_negative", "r.yaml", g, "run {f} --backend host --repeat -1", 2, {"--repeat"}},
      {"repeat_zero", "r.yaml", g, "run {f} --backend host --repeat 0", 2, {"--repeat: Value 0 not in range 1 to 10000"}},
      {"repeat_1e9", "r.yaml", g, "run {f} --backend host --repeat 1000000000", 2, {"--repeat"}},
      {"repeat_exponent", "r.yaml", g, "run {f} --backend host --repeat 1e9", 2, {"--repeat"}},
      {"repeat_text", "r.yaml", g, "run {f} --backend host --repeat many", 2, {"--repeat"}},
      {"warmup_negative", "r.yaml", g, "run {f} --backend host --warmup -3", 2, {"--warmup"}},
      {"ref_sample_negative", "r.yaml", g, "run {f} --backend host --ref-sample -5", 2, {"--ref-sample"}},
      {"sweep_repeat_zero", "r.yaml", g, "sweep {f} --grid scale=1 --out {dir}/sweep-r --repeat 0", 2, {"--repeat"}},
      {"backend_unknown", "r.yaml", g, "run {f} --backend gpu", 2, {"--backend"}},
      {"max_memory_zero", "r.yaml", g, "run {f} --backend host --max-memory 0", 2, {"--max-memory"}},
      {"max_memory_nan", "r.yaml", g, "validate {f} --max-memory nan", 2,
       {"--max-memory: expected a finite positive number, found nan"}},
      {"max_ref_gflop_nan", "r.yaml", g, "run {f} --backend host --max-ref-gflop nan", 2,
       {"--max-ref-gflop: expected a finite positive number, found nan"}},
      {"no_subcommand", "", "", "", 2, {"A subcommand is required"}},
      {"unknown_fault", "r.yaml", g, "run {f} --backend host --inject no-such-bug", 2, {"unknown fault 'no-such-bug'"}},
      // ---- engine-captured batches: streams: {from_jsonl: FILE, line: N} (tests/bad/batches.jsonl) ----
      {"jsonl_bad_json", "j.yaml", jsonl(1), "validate {f}", 2, {"batches.jsonl:1:", "bad JSON", "(streams.from_jsonl at "}},
      {"jsonl_cu_seqlens_not_growing", "j.yaml", jsonl(2), "run {f} --backend host", 2,
       {"batches.jsonl:2:1: cu_seqlens[2]: expected more than cu_seqlens[1] = 7"}},
      {"jsonl_kv_lens_length", "j.yaml", jsonl(3), "validate {f}", 2,
       {"batches.jsonl:3:1: kv_lens: expected one entry per stream, 2 (cu_seqlens has 3 entries), found 1"}},
      {"jsonl_kv_len_below_count", "j.yaml", jsonl(4), "validate {f}", 2,
       {"batches.jsonl:4:1: kv_lens[1]: expected at least the stream's token count 130"}},
      {"jsonl_negative_chunk_start", "j.yaml", jsonl(5), "validate {f}", 2,
       {"batches.jsonl:5:1: streams[0].chunk_start: expected an integer in [0, 1048576], found -3"}},
      {"jsonl_tokens_too_large", "j.yaml", jsonl(6), "validate {f}", 2,
       {"batches.jsonl:6:1: streams[0].tokens: expected an integer in [1, 1048576], found 2000000"}},
      {"jsonl_unknown_field", "j.yaml", jsonl(7), "validate {f}", 2, {"batches.jsonl:7:1: streams[0].len: unknown field"}},
      {"jsonl_cu_seqlens_not_from_0", "j.yaml", jsonl(8), "validate {f}", 2,
       {"batches.jsonl:8:1: cu_seqlens[0]: expected an integer in [0, 0], found 1"}},
      {"jsonl_not_an_object", "j.yaml", jsonl(9), "validate {f}", 2, {"batches.jsonl:9:1: expected a JSON object"}},
      {"jsonl_resource_estimate", "j.yaml", jsonl(10), "run {f} --backend host", 2,
       {"j.yaml:11:1: streams: the", "would take"}},
      {"jsonl_float", "j.yaml", jsonl(11), "validate {f}", 2, {"batches.jsonl:11:1: kv_lens[0]: expected an integer, found 7.5"}},
      {"jsonl_blank_line", "j.yaml", jsonl(12), "validate {f}", 2, {"batches.jsonl:12:1: the line is blank"}},
      {"jsonl_both_forms", "j.yaml", jsonl(13), "validate {f}", 2,
       {"batches.jsonl:13:1: streams: give either streams or cu_seqlens and kv_lens, not both"}},
      {"jsonl_line_out_of_range", "j.yaml", jsonl(99), "validate {f}", 2,
       {"batches.jsonl: line: line 99 is out of range: the file has 13 line(s)"}},
      {"jsonl_line_zero", "j.yaml", jsonl(0), "validate {f}", 2, {"j.yaml:11:", "streams.line: expected a positive integer, found 0"}},
      {"jsonl_line_missing", "j.yaml", replace(g, kStreams, "streams: {from_jsonl: x.jsonl}\n"), "validate {f}", 2,
       {"j.yaml:11:", "streams.line: required field missing", "--grid line=all"}},
      {"jsonl_missing_file", "j.yaml", replace(g, kStreams, "streams: {from_jsonl: no-such.jsonl, line: 1}\n"),
       "validate {f}", 2, {"{dir}/no-such.jsonl: cannot open the batch file: No such file or directory"}},
      // ---- the invariance check's knob ----
      {"invariance_streams_negative", "i.yaml", g + "invariance: {streams: -1}\n", "validate {f}", 2,
       {"i.yaml:14:23: invariance.streams: expected a non-negative integer <= 4096, found -1"}},
      {"invariance_streams_text", "i.yaml", g + "invariance: {streams: all}\n", "validate {f}", 2,
       {"i.yaml:14:23: invariance.streams: expected an integer"}},
      {"invariance_unknown_key", "i.yaml", g + "invariance: {stream: 2}\n", "validate {f}", 2,
       {"i.yaml:14:14: invariance.stream: unknown key 'stream'"}},
      {"invariance_on_one_stream", "i.yaml",
       replace(g, kStreams, "checks: [numeric, invariance]\nstreams:\n  - tokens: 23\n"), "validate {f}", 2,
       {"checks[1]: check 'invariance' cannot run on this model: one stream"}},
      // ---- output paths, checked before the run ----
      {"json_under_a_file", "p.yaml", g, "run {f} --backend host --json {dir}/plain-file/report.json", 2,
       {"--json {dir}/plain-file/report.json: {dir}/plain-file is not a directory"}},
      {"json_is_a_directory", "p.yaml", g, "run {f} --backend host --json {dir}", 2, {"--json {dir}: is a directory"}},
      {"json_cannot_create", "p.yaml", g, "run {f} --backend host --json /proc/self/report.json", 2,
       {"--json /proc/self/report.json: cannot"}},
      {"junit_under_a_file", "p.yaml", g, "run {f} --backend host --junit {dir}/plain-file/junit.xml", 2,
       {"--junit {dir}/plain-file/junit.xml"}},
      {"export_out_directory", "p.yaml", g, "export {f} -o {dir}", 2, {"--out {dir}: is a directory"}},
      {"sweep_out_under_a_file", "p.yaml", g, "sweep {f} --grid scale=1 --out {dir}/plain-file/sweep", 2,
       {"--out {dir}/plain-file/sweep: {dir}/plain-file is not a directory"}},
      {"compare_json_directory", "", "", "compare {dir}/checked.json {dir}/checked.json --json {dir}", 2,
       {"--json {dir}: is a directory"}},
      // ---- non-UTF-8 file names ----
      {"export_non_utf8_name", "bad-\xff\xfe.yaml", g, "export {f} -o {dir}/batch.json", 2, {"is not valid UTF-8"}},
      {"sweep_non_utf8_name", "bad-\xff\xfe.yaml", g, "sweep {f} --grid scale=1 --out {dir}/sweep-u", 2,
       {"is not valid UTF-8"}},
      // ---- compare: vacuous cases and options ----
      {"compare_error_factor_nan", "", "", "compare {dir}/checked.json {dir}/checked.json --error-factor nan", 2,
       {"--error-factor: expected a finite positive number, found nan"}},
      {"compare_error_factor_inf", "", "", "compare {dir}/checked.json {dir}/checked.json --error-factor inf", 2,
       {"--error-factor: expected a finite positive number"}},
      {"compare_error_floor_zero", "", "", "compare {dir}/checked.json {dir}/checked.json --error-floor 0", 2,
       {"--error-floor: expected a finite positive number, found 0"}},
      {"compare_time_threshold_negative", "", "", "compare {dir}/checked.json {dir}/checked.json --time-threshold -1",
       2, {"--time-threshold: expected a finite positive number"}},
      {"compare_empty_new", "", "", "compare {dir}/checked.json {dir}/empty.json", 2,
       {"{dir}/empty.json: $.runs: the report holds no run"}},
      {"compare_new_ran_no_check", "", "", "compare {dir}/checked.json {dir}/profile.json", 2,
       {"{dir}/profile.json: no check ran in any of its 1 runs"}},
      {"compare_dev_zero", "", "", "compare {dir}/checked.json /dev/zero", 2, {"/dev/zero: not a regular file"}},
      {"compare_nothing_in_common", "", "", "compare {dir}/checked.json {dir}/other.json", 2,
       {"have no scenario in common"}},
  };
}

std::string expand(std::string s, const std::string& dir, const std::string& file) {
  for (size_t at; (at = s.find("{dir}")) != std::string::npos;) s.replace(at, 5, dir);
  for (size_t at; (at = s.find("{f}")) != std::string::npos;) s.replace(at, 3, "'" + file + "'");
  return s;
}

TEST_F(BadInput, EveryRowIsRefusedBeforeAnythingRuns) {
  const std::vector<Row> table = rows();
  ASSERT_GE(table.size(), 40u);
  for (const Row& row : table) {
    SCOPED_TRACE(row.name);
    const std::string file = row.file.empty() ? "" : dir_ + "/" + row.file;
    if (!row.file.empty()) std::ofstream(file, std::ios::binary | std::ios::trunc) << row.yaml;
    std::string out;
    const auto t0 = std::chrono::steady_clock::now();
    const int rc = test::run_command(fmt::format("'{}' {}", PB_CLI_PATH, expand(row.args, dir_, file)), &out);
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    EXPECT_EQ(rc, row.exit) << out;
    for (const std::string& f : row.fragments)
      EXPECT_NE(out.find(expand(f, dir_, file)), std::string::npos) << "missing: " << expand(f, dir_, file) << "\n" << out;
    // Refused up front: no run table, no report, and quickly.
    EXPECT_EQ(out.find(" passed, "), std::string::npos) << out;
    EXPECT_LT(s, 5.0) << "a refused input should take milliseconds";
    if (!row.file.empty()) fs::remove(file);
  }
  EXPECT_FALSE(fs::exists(dir_ + "/sweep-scale/sweep.json"));
}

// --profile computes no reference, so the reference-work ceiling does not refuse it (a
// profile of a shape too large to check, under ncu, is what it is for); the same run
// with the checks is refused (row ref_ceiling_flag above).
TEST_F(BadInput, ProfileIsNotHeldToTheReferenceCeiling) {
  const std::string file = dir_ + "/profile.yaml";
  std::ofstream(file) << kGood;
  std::string out;
  EXPECT_EQ(test::run_command(fmt::format("'{}' run '{}' --backend host --no-color --profile --max-ref-gflop 0.000001",
                                          PB_CLI_PATH, file),
                              &out),
            0)
      << out;
  EXPECT_EQ(out.find("the reference would take"), std::string::npos) << out;
  out.clear();
  EXPECT_EQ(test::run_command(fmt::format("'{}' run '{}' --backend host --no-color --max-ref-gflop 0.000001",
                                          PB_CLI_PATH, file),
                              &out),
            2)
      << out;
}

// The rows' base file is good: the refusals above come from the edits, not from it.
TEST_F(BadInput, TheBaseScenarioAndGoodFlagsPass) {
  const std::string file = dir_ + "/good.yaml";
  std::ofstream(file) << kGood;
  std::string out;
  EXPECT_EQ(test::run_command(fmt::format("'{}' validate '{}'", PB_CLI_PATH, file), &out), 0) << out;
  EXPECT_NE(out.find("ok (good): estimated host"), std::string::npos) << out;
  out.clear();
  EXPECT_EQ(test::run_command(fmt::format("'{}' run '{}' --backend host --no-color --repeat 1 --warmup 0 --ref-sample 2 "
                                          "--max-memory 64 --max-ref-gflop 10 --json '{}/ok.json'",
                                          PB_CLI_PATH, file, dir_),
                              &out),
            0)
      << out;
  // --repeat 1 without warm-up still runs determinism (one more untimed run).
  EXPECT_NE(out.find("determinism"), std::string::npos) << out;
  EXPECT_EQ(out.find("one run per layer"), std::string::npos) << out;
  EXPECT_TRUE(fs::exists(dir_ + "/ok.json"));
  // An output under directories that do not exist yet is fine (they are made) ...
  out.clear();
  EXPECT_EQ(test::run_command(fmt::format("'{}' run '{}' --backend host --no-color --json '{}/new/sub/r.json'",
                                          PB_CLI_PATH, file, dir_),
                              &out),
            0)
      << out;
  EXPECT_TRUE(fs::exists(dir_ + "/new/sub/r.json"));
  // ... and a run refused after the probe leaves no file behind.
  out.clear();
  EXPECT_EQ(test::run_command(fmt::format("'{}' run '{}' /dev/zero --backend host --json '{}/probe.json' "
                                          "--junit '{}/probe.xml'", PB_CLI_PATH, file, dir_, dir_),
                              &out),
            2)
      << out;
  EXPECT_FALSE(fs::exists(dir_ + "/probe.json"));
  EXPECT_FALSE(fs::exists(dir_ + "/probe.xml"));
  out.clear();
  EXPECT_EQ(test::run_command(fmt::format("'{}' compare '{}/checked.json' '{}/checked.json'", PB_CLI_PATH, dir_, dir_),
                              &out),
            0)
      << out;
}

}  // namespace
}  // namespace pb
