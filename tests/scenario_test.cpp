// scenario_test.cpp: the scenario reader. Every shipped scenario loads (and fits the CI
// cost budget); every malformed input is rejected with a message naming the right
// file, line and field path, and saying what was expected and what was found.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <set>
#include <string>
#include <vector>

#include "lib/batch.h"
#include "lib/faults.h"
#include "lib/scenario.h"
#include "test_util.h"

namespace pb {
namespace {

// A valid scenario; the line numbers below are what the error tests expect.
const char* kBase =
    "name: t\n"                                                                 // 1
    "seed: 1\n"                                                                 // 2
    "model:\n"                                                                  // 3
    "  num_q_heads: 4\n"                                                        // 4
    "  num_kv_heads: 2\n"                                                       // 5
    "  head_dim: 64\n"                                                          // 6
    "  gdn: {num_k_heads: 2, num_v_heads: 4, k_dim: 32, v_dim: 32, d_conv: 4}\n"  // 7
    "layers:\n"                                                                 // 8
    "  pattern: [attn, gdn]\n"                                                  // 9
    "streams:\n"                                                                // 10
    "  - tokens: 5\n"                                                           // 11
    "  - {chunk_start: 3, tokens: 17}\n"                                        // 12
    "  - generate: {dist: uniform, count: 3, min: 1, max: 40}\n";               // 13

// kBase with `from` (which must occur exactly once) replaced by `to`.
std::string edit(const std::string& from, const std::string& to, std::string text = kBase) {
  const size_t at = text.find(from);
  EXPECT_NE(at, std::string::npos) << "'" << from << "' not in the base text";
  EXPECT_EQ(text.find(from, at + 1), std::string::npos) << "'" << from << "' occurs twice";
  if (at != std::string::npos) text.replace(at, from.size(), to);
  return text;
}

// The message parse_scenario throws for `text` ("" and a test failure when it does not).
std::string error_of(const std::string& text) {
  try {
    parse_scenario(text, "t.yaml");
  } catch (const InputError& e) {
    return e.what();
  }
  ADD_FAILURE() << "accepted:\n" << text;
  return "";
}

// The error is located at `line` of t.yaml, names `field` and says `what`.
void expect_error(const std::string& text, int line, const std::string& field, const std::string& what) {
  const std::string msg = error_of(text);
  SCOPED_TRACE(msg);
  EXPECT_EQ(msg.rfind("t.yaml:" + std::to_string(line) + ":", 0), 0u) << "wrong line";
  if (!field.empty()) EXPECT_NE(msg.find(": " + field + ": "), std::string::npos) << "wrong field";
  EXPECT_NE(msg.find(what), std::string::npos) << "wrong text";
}

std::vector<std::string> shipped_scenarios() {
  std::vector<std::string> files;
  for (const auto& e : std::filesystem::directory_iterator(pb::test::source_dir() + "/scenarios"))
    if (e.path().extension() == ".yaml") files.push_back(e.path().string());
  std::sort(files.begin(), files.end());
  return files;
}

TEST(ScenarioFiles, EveryShippedScenarioLoads) {
  const auto files = shipped_scenarios();
  ASSERT_GE(files.size(), 11u);
  std::set<uint64_t> seeds;
  std::set<std::string> names;
  for (const auto& f : files) {
    SCOPED_TRACE(f);
    Scenario s;
    ASSERT_NO_THROW(s = load_scenario(f));
    EXPECT_FALSE(s.name.empty());
    EXPECT_TRUE(seeds.insert(s.seed).second) << "seed " << s.seed << " used twice";
    EXPECT_TRUE(names.insert(s.name).second) << "name " << s.name << " used twice";
    EXPECT_EQ(s.warmup, 2);
    EXPECT_FALSE(s.repeat.has_value()) << "a shipped scenario is timed by the noise rule, not a fixed count";
    EXPECT_TRUE(s.l2_flush);
    EXPECT_TRUE(s.faults.empty()) << "a shipped scenario must pass: it may not inject faults";
    const bool attn = std::count(s.layers.begin(), s.layers.end(), LayerKind::attn) > 0;
    const bool gdn = std::count(s.layers.begin(), s.layers.end(), LayerKind::gdn) > 0;
    EXPECT_TRUE(attn && gdn) << "every shipped scenario exercises both layer kinds";
    // Each file opens with 2-4 comment lines saying what it exercises.
    std::ifstream in(f);
    std::string line;
    int comments = 0;
    while (std::getline(in, line) && line.rfind("#", 0) == 0) ++comments;
    EXPECT_GE(comments, 2);
    EXPECT_LE(comments, 4);
  }
}

// The CI cost model of the brief: attention ~3 x 4*Hq*D*sum(kv position) FLOPs at
// 20 GFLOP/s, GDN ~3 x 6*T*Hv*v_dim*k_dim at 3 GFLOP/s, per layer. The whole suite
// must stay well inside two minutes.
TEST(ScenarioFiles, ShippedSuiteFitsTheCiBudget) {
  double total_s = 0;
  for (const auto& f : shipped_scenarios()) {
    const Scenario s = load_scenario(f);
    const auto streams = resolve_streams(s);
    double positions = 0, tokens = 0;
    for (const auto& st : streams) {
      tokens += st.tokens;
      for (int i = 0; i < st.tokens; ++i) positions += st.chunk_start + i + 1;
    }
    const ModelSpec& m = s.model;
    double sec = 0;
    for (LayerKind k : s.layers) {
      if (k == LayerKind::attn) sec += 3.0 * 4 * m.num_q_heads * m.head_dim * positions / 20e9;
      else sec += 3.0 * 6 * tokens * m.gdn.num_v_heads * m.gdn.v_dim * m.gdn.k_dim / 3e9;
    }
    EXPECT_LT(sec, 15.0) << f << " alone would take about " << sec << " s in CI";
    total_s += sec;
  }
  EXPECT_LT(total_s, 60.0) << "the shipped suite would take about " << total_s << " s in CI";
}

TEST(ScenarioParse, BaseAndDefaults) {
  const Scenario s = parse_scenario(kBase, "t.yaml");
  EXPECT_EQ(s.name, "t");
  EXPECT_EQ(s.seed, 1u);
  EXPECT_EQ(s.model.rotary_dim, 64);  // defaults to head_dim
  EXPECT_EQ(s.model.rope_theta, 10000.0);
  EXPECT_EQ(s.model.block_size, 16);
  EXPECT_FALSE(s.model.mrope.enabled);
  EXPECT_TRUE(s.model.gdn.present);
  EXPECT_EQ(s.model.gdn.conv_dim(), 2 * 2 * 32 + 4 * 32);
  EXPECT_EQ(s.layers, (std::vector<LayerKind>{LayerKind::attn, LayerKind::gdn}));
  ASSERT_EQ(s.streams.size(), 3u);
  EXPECT_EQ(s.streams[1].stream->chunk_start, 3);
  EXPECT_EQ(s.streams[1].stream->tokens, 17);
  ASSERT_TRUE(s.streams[2].generate.has_value());
  EXPECT_EQ(s.streams[2].generate->dist, StreamDist::uniform);
  EXPECT_EQ(s.streams[2].mark.line, 13);
  EXPECT_EQ(s.warmup, 2);
  EXPECT_FALSE(s.repeat.has_value());  // unset: the noise rule (lib/timing.h)
  EXPECT_TRUE(s.l2_flush);             // cold by default, as nvbench
  EXPECT_EQ(s.noise.target, 0.005);
  EXPECT_EQ(s.noise.min_samples, 10);
  EXPECT_EQ(s.noise.max_time_s, 1.0);
  EXPECT_EQ(s.tol_bf16.factor, 2.0);
  EXPECT_EQ(s.tol_bf16.atol, 1e-5);
  EXPECT_EQ(s.kv_num_blocks, 0);
  EXPECT_EQ(s.scratch_capacity, 0);
  EXPECT_EQ(s.ref_sample, 0);
  EXPECT_TRUE(s.checks.empty());
  EXPECT_TRUE(s.faults.empty());
}

TEST(ScenarioParse, EveryOptionalSection) {
  const Scenario s = parse_scenario(
      edit("  pattern: [attn, gdn]\n", "  pattern: [gdn, attn]\n  repeat: 3\n") +
          "run: {warmup: 0, repeat: 1, l2_flush: false, noise: {target: 0.02, min_samples: 3, max_time_s: 0.25}}\n"
          "tolerances: {bf16: {factor: 3.5, atol: 0}}\n"
          "kv_cache: {num_blocks: 100}\n"
          "scratch: {capacity_bytes: 65536}\n"
          "reference: {sample: 16}\n"
          "checks: [layout, numeric]\n"
          "faults: [kv-lens-max, h-state-ptr-swap]\n"
          "description: all of it\n",
      "t.yaml");
  EXPECT_EQ(s.layers.size(), 6u);
  EXPECT_EQ(s.layers[0], LayerKind::gdn);
  EXPECT_EQ(s.layers[5], LayerKind::attn);
  EXPECT_EQ(s.warmup, 0);
  EXPECT_EQ(s.repeat, 1);
  EXPECT_FALSE(s.l2_flush);
  EXPECT_EQ(s.noise.target, 0.02);
  EXPECT_EQ(s.noise.min_samples, 3);
  EXPECT_EQ(s.noise.max_time_s, 0.25);
  EXPECT_EQ(s.tol_bf16.factor, 3.5);
  EXPECT_EQ(s.tol_bf16.atol, 0.0);
  EXPECT_EQ(s.kv_num_blocks, 100);
  EXPECT_EQ(s.scratch_capacity, 65536);
  EXPECT_EQ(s.ref_sample, 16);
  EXPECT_EQ(s.checks, (std::vector<std::string>{"layout", "numeric"}));
  EXPECT_TRUE(s.faults.has(Fault::kv_lens_max));
  EXPECT_TRUE(s.faults.has(Fault::h_state_ptr_swap));
  EXPECT_FALSE(s.faults.has(Fault::slot_off_by_one));
  EXPECT_EQ(s.description, "all of it");
}

TEST(ScenarioParse, MropeAndImages) {
  const Scenario s = parse_scenario(
      edit("  - tokens: 5\n",
           "  - tokens: 50\n"
           "    images: [{start: 2, grid: [1, 2, 3]}, {start: 8, grid: [2, 2, 2]}]\n",
           edit("  head_dim: 64\n", "  head_dim: 64\n  rotary_dim: 32\n  mrope: {sections: [4, 6, 6], interleaved: true}\n")),
      "t.yaml");
  EXPECT_TRUE(s.model.mrope.enabled);
  EXPECT_TRUE(s.model.mrope.interleaved);
  EXPECT_EQ(s.model.mrope.sections[1], 6);
  ASSERT_EQ(s.streams[0].stream->images.size(), 2u);
  EXPECT_EQ(s.streams[0].stream->images[1].tokens(), 8);
}

TEST(ScenarioParse, MarksAndWhere) {
  const Scenario s = parse_scenario(kBase, "t.yaml");
  EXPECT_EQ(s.marks.at("model.head_dim").line, 6);
  EXPECT_EQ(s.marks.at("streams[1].tokens").line, 12);
  EXPECT_EQ(s.marks.at("streams[2].generate.max").line, 13);
  EXPECT_EQ(s.where("model.head_dim"), "t.yaml:6:3");
  // A field without a mark of its own takes its closest parent's.
  EXPECT_EQ(s.where("streams[1].blocks[2]").rfind("t.yaml:12:", 0), 0u);
  EXPECT_EQ(s.where("nothing.here"), "t.yaml");
  const std::string msg = s.error("streams[0].tokens", "too many").what();
  EXPECT_EQ(msg, "t.yaml:11:5: streams[0].tokens: too many");
}

TEST(ScenarioErrors, MissingField) {
  expect_error(edit("  head_dim: 64\n", ""), 3, "model.head_dim", "required field missing");
  expect_error(edit("seed: 1\n", ""), 1, "seed", "required field missing");
  expect_error(edit("  - tokens: 5\n", "  - chunk_start: 5\n"), 11, "streams[0].tokens", "required field missing");
  expect_error(edit("min: 1, ", ""), 13, "streams[2].generate.min", "required field missing");
}

TEST(ScenarioErrors, WrongType) {
  expect_error(edit("head_dim: 64", "head_dim: abc"), 6, "model.head_dim", "expected an integer, found 'abc'");
  expect_error(edit("head_dim: 64", "head_dim: 6.5"), 6, "model.head_dim", "expected an integer, found '6.5'");
  expect_error(edit("seed: 1", "seed: [1]"), 2, "seed", "expected a non-negative integer, found a list");
  expect_error(edit("  pattern: [attn, gdn]\n", "  pattern: attn\n"), 9, "layers.pattern", "expected a list");
  expect_error("name: t\nseed: 1\nmodel: 7\nlayers: {pattern: [attn]}\nstreams: [{tokens: 5}]\n", 3, "model",
               "expected a map, found '7'");
  expect_error(edit("  head_dim: 64\n", "  head_dim: 64\n  mrope: {sections: [16, 8, 8], interleaved: maybe}\n"), 7,
               "model.mrope.interleaved", "expected true or false, found 'maybe'");
  expect_error(std::string(kBase) + "run: {repeat: 3, l2_flush: maybe}\n", 14, "run.l2_flush",
               "expected true or false, found 'maybe'");
  expect_error(std::string(kBase) + "run: {flush: true}\n", 14, "run.flush",
               "unknown key 'flush' (known: warmup, repeat, l2_flush, noise)");
  expect_error(std::string(kBase) + "run: {noise: {target: 0}}\n", 14, "run.noise.target", "expected a positive number");
  expect_error(std::string(kBase) + "run: {noise: {min_samples: 0}}\n", 14, "run.noise.min_samples",
               "expected a positive integer");
  expect_error(std::string(kBase) + "run: {noise: {max_time_s: -1}}\n", 14, "run.noise.max_time_s",
               "expected a positive number");
  expect_error(std::string(kBase) + "run: {noise: {stdrel: 0.01}}\n", 14, "run.noise.stdrel", "unknown key 'stdrel'");
  expect_error(edit("[attn, gdn]", "[attn, mlp]"), 9, "layers.pattern[1]", "expected attn or gdn, found 'mlp'");
  expect_error(std::string(kBase) + "tolerances: {bf16: {factor: 0}}\n", 14, "tolerances.bf16.factor",
               "expected a positive number, found 0");
}

TEST(ScenarioErrors, UnknownKeySuggestsTheClosest) {
  expect_error(edit("num_q_heads", "num_q_head"), 4, "model.num_q_head",
               "unknown key 'num_q_head' (did you mean 'num_q_heads'? known: num_q_heads, num_kv_heads");
  expect_error(edit("seed: 1", "sed: 1"), 2, "sed", "did you mean 'seed'?");
  expect_error(edit("d_conv: 4", "d_conv: 4, extra: 1"), 7, "model.gdn.extra", "unknown key 'extra' (known:");
  expect_error(edit("count: 3", "count: 3, median: 4"), 13, "streams[2].generate.median",
               "'median' is not a field of dist uniform (its fields: dist, count, chunk_start, chunk_start_max, min, max)");
  expect_error(edit("count: 3", "count: 3, mean: 4"), 13, "streams[2].generate.mean", "unknown key 'mean'");
  expect_error(edit("{chunk_start: 3, tokens: 17}", "{chunk_start: 3, tokens: 17, token: 1}"), 12,
               "streams[1].token", "did you mean 'tokens'?");
  expect_error(edit("  num_kv_heads: 2\n", "  num_kv_heads: 2\n  num_kv_heads: 2\n"), 6, "model.num_kv_heads", "given twice");
}

TEST(ScenarioErrors, NegativeAndZeroTokens) {
  expect_error(edit("- tokens: 5", "- tokens: -3"), 11, "streams[0].tokens", "expected a positive integer");
  expect_error(edit("- tokens: 5", "- tokens: -3"), 11, "", "found -3");
  expect_error(edit("tokens: 17", "tokens: 0"), 12, "streams[1].tokens", "expected a positive integer");
  expect_error(edit("max: 40", "max: 0"), 13, "streams[2].generate.max", "expected a positive integer");
  expect_error(edit("min: 1, max: 40", "min: 50, max: 40"), 13, "streams[2].generate.max", "expected max >= min 50, found 40");
  expect_error(edit("chunk_start: 3,", "chunk_start: -1,"), 12, "streams[1].chunk_start", "expected a non-negative integer");
  expect_error(edit("- tokens: 5", "- tokens: 1048577"), 11, "streams[0].tokens", "<= 1048576");
  expect_error(edit("- tokens: 5", "- tokens:"), 11, "streams[0].tokens", "expected an integer, found nothing");
}

TEST(ScenarioErrors, ModelShape) {
  expect_error(edit("num_kv_heads: 2", "num_kv_heads: 3"), 4, "model.num_q_heads",
               "GQA ratio: num_q_heads 4 is not a multiple of num_kv_heads 3");
  expect_error(edit("  head_dim: 64\n", "  head_dim: 64\n  rotary_dim: 96\n"), 7, "model.rotary_dim",
               "expected rotary_dim <= head_dim 64, found 96");
  expect_error(edit("  head_dim: 64\n", "  head_dim: 64\n  rotary_dim: 33\n"), 7, "model.rotary_dim",
               "expected an even rotary_dim >= 2, found 33");
  expect_error(edit("head_dim: 64", "head_dim: 63"), 6, "model.head_dim", "expected an even head_dim, found 63");
  expect_error(edit("num_q_heads: 4", "num_q_heads: 0"), 4, "model.num_q_heads", "expected a positive integer");
  expect_error(edit("  head_dim: 64\n", "  head_dim: 64\n  dtype: fp16\n"), 7, "model.dtype",
               "this build supports bf16 only, found 'fp16'");
  expect_error(edit("  head_dim: 64\n", "  head_dim: 64\n  rope_theta: -1\n"), 7, "model.rope_theta",
               "expected a positive number, found -1");
  expect_error(edit("num_v_heads: 4", "num_v_heads: 3"), 7, "model.gdn.num_v_heads",
               "num_v_heads 3 is not a multiple of num_k_heads 2");
  expect_error(edit("d_conv: 4", "d_conv: 9"), 7, "model.gdn.d_conv", "expected an integer in [2, 8], found 9");
  expect_error(edit("d_conv: 4", "d_conv: 1"), 7, "model.gdn.d_conv", "expected an integer in [2, 8], found 1");
}

TEST(ScenarioErrors, MropeSections) {
  expect_error(edit("  head_dim: 64\n", "  head_dim: 64\n  mrope: {sections: [16, 8, 6]}\n"), 7,
               "model.mrope.sections", "sections sum to 30, expected rotary_dim / 2 = 32");
  expect_error(edit("  head_dim: 64\n", "  head_dim: 64\n  mrope: {sections: [16, 16]}\n"), 7,
               "model.mrope.sections", "expected 3 integers [t, h, w], found 2 entries");
  expect_error(edit("  head_dim: 64\n", "  head_dim: 64\n  mrope:\n    sections: [16, -8, 24]\n"), 8,
               "model.mrope.sections[1]", "expected a non-negative integer");
  expect_error(edit("  head_dim: 64\n", "  head_dim: 64\n  mrope: {interleaved: true}\n"), 7,
               "model.mrope.sections", "required field missing");
}

TEST(ScenarioErrors, Images) {
  const std::string mrope =
      edit("  head_dim: 64\n", "  head_dim: 64\n  mrope: {sections: [16, 8, 8]}\n");  // streams now at line 11
  expect_error(edit("  - tokens: 5\n", "  - tokens: 50\n    images: [{start: 0, grid: [1, 2, 2]}]\n"), 12,
               "streams[0].images", "image segments need model.mrope");
  expect_error(edit("  - tokens: 5\n", "  - tokens: 20\n    images: [{start: 0, grid: [1, 4, 4]}, {start: 10, grid: [1, 2, 2]}]\n", mrope),
               13, "streams[0].images[1]", "sorted and non-overlapping: starts at 10 but the previous one ends at 16");
  expect_error(edit("  - tokens: 5\n", "  - tokens: 20\n    images: [{start: 8, grid: [1, 4, 4]}]\n", mrope), 13,
               "streams[0].images[0]", "image tokens [8, 24) reach past the stream's sequence [0, 20)");
  expect_error(edit("  - tokens: 5\n", "  - tokens: 20\n    images: [{start: 0, grid: [1, 0, 4]}]\n", mrope), 13,
               "streams[0].images[0].grid[1]", "expected a positive integer");
  expect_error(edit("  - tokens: 5\n", "  - tokens: 20\n    images: [{start: 0, grid: [4, 4]}]\n", mrope), 13,
               "streams[0].images[0].grid", "expected 3 positive integers [t, h, w], found 2 entries");
}

TEST(ScenarioErrors, Streams) {
  const std::string no_streams = std::string(kBase).substr(0, std::string(kBase).find("streams:"));
  expect_error(no_streams + "streams: []\n", 10, "streams", "expected a non-empty list, found []");
  expect_error(no_streams, 1, "streams", "required field missing");
  expect_error(no_streams + "streams:\n  - generate: {dist: zipf, count: 3}\n", 11, "streams[0].generate.dist",
               "expected fixed, uniform, lognormal or long_tail, found 'zipf'");
  expect_error(no_streams + "streams:\n  - generate: {count: 3}\n", 11, "streams[0].generate.dist", "required field missing");
  expect_error(no_streams + "streams:\n  - {tokens: 3, generate: {dist: fixed, count: 1, tokens: 2}}\n", 11, "streams[0]",
               "not both");
  expect_error(no_streams + "streams:\n  - generate: {dist: long_tail, count: 3, long: 100, long_count: 4, min: 1, max: 9}\n",
               11, "streams[0].generate.long_count", "expected 1 <= long_count <= count 3, found 4");
  expect_error(no_streams + "streams:\n  - generate: {dist: fixed, count: 4, tokens: 9, chunk_start: 10, chunk_start_max: 5}\n",
               11, "streams[0].generate.chunk_start_max", "expected chunk_start_max >= chunk_start 10, found 5");
  expect_error(no_streams + "streams:\n  - generate: {dist: lognormal, count: 4, median: 100, sigma: 0, min: 1, max: 9}\n",
               11, "streams[0].generate.sigma", "expected a positive number, found 0");
  expect_error(no_streams + "streams:\n  - generate: {dist: fixed, count: 4000, tokens: 1}\n"
                            "  - generate: {dist: fixed, count: 97, tokens: 1}\n",
               12, "streams[1]", "4097 streams here, at most 4096");
}

TEST(ScenarioErrors, Layers) {
  expect_error(edit("  pattern: [attn, gdn]\n", "  pattern: [attn, gdn]\n  repeat: 33\n"), 10, "layers.repeat",
               "2 layers x repeat 33 = 66 layers, at most 64");
  expect_error(edit("  pattern: [attn, gdn]\n", "  pattern: []\n"), 9, "layers.pattern", "expected a non-empty list");
  expect_error(edit("  pattern: [attn, gdn]\n", "  pattern: [attn, gdn]\n  repeat: 0\n"), 10, "layers.repeat",
               "expected a positive integer");
}

TEST(ScenarioErrors, GdnLayerWithoutGdnModel) {
  expect_error(edit("  gdn: {num_k_heads: 2, num_v_heads: 4, k_dim: 32, v_dim: 32, d_conv: 4}\n", ""), 3, "model.gdn",
               "layers.pattern holds a gdn layer");
  // The other way round is fine: an unused gdn shape.
  EXPECT_NO_THROW(parse_scenario(edit("[attn, gdn]", "[attn]"), "t.yaml"));
}

TEST(ScenarioErrors, UnknownCheckName) {
  expect_error(std::string(kBase) + "checks: [layout, numerics]\n", 14, "checks[1]",
               "unknown check 'numerics' (did you mean 'numeric'? known: layout, scratch_guard");
  expect_error(std::string(kBase) + "checks: []\n", 14, "checks", "expected a non-empty list");
  expect_error(std::string(kBase) + "checks: [state, state]\n", 14, "checks[1]", "listed twice");
}

TEST(ScenarioErrors, UnknownFault) {
  expect_error(std::string(kBase) + "faults:\n  - kv-lens-max\n  - slot-off-by-two\n", 16, "faults[1]",
               "unknown fault 'slot-off-by-two' (known: kv-lens-max, staged-bytes-undercount");
}

TEST(ScenarioErrors, ResourceSections) {
  expect_error(std::string(kBase) + "kv_cache: {num_blocks: 0}\n", 14, "kv_cache.num_blocks", "expected a positive integer");
  expect_error(std::string(kBase) + "scratch: {capacity_bytes: -8}\n", 14, "scratch.capacity_bytes", "expected a positive integer");
  expect_error(std::string(kBase) + "reference: {sample: -1}\n", 14, "reference.sample", "expected a non-negative integer");
  expect_error(std::string(kBase) + "run: {repeat: 0}\n", 14, "run.repeat", "expected a positive integer");
  expect_error(std::string(kBase) + "run: {warmup: -1}\n", 14, "run.warmup", "expected a non-negative integer");
  expect_error(std::string(kBase) + "kv_cache: {size: 9}\n", 14, "kv_cache.size", "unknown key 'size'");
}

TEST(ScenarioErrors, YamlSyntax) {
  // An unclosed flow list: yaml-cpp reports where it gave up, with the file name.
  const std::string msg = error_of(edit("[attn, gdn]", "[attn, gdn"));
  EXPECT_EQ(msg.rfind("t.yaml:", 0), 0u) << msg;
  EXPECT_NE(msg.find("YAML syntax error"), std::string::npos) << msg;
  // A tab-free indentation error, located on its own line.
  expect_error(edit("  num_kv_heads: 2\n", "   num_kv_heads: 2\n"), 5, "", "YAML syntax error");
  // Not a map at all.
  expect_error("- 1\n- 2\n", 1, "", "expected a map of scenario fields at the top level, found a list");
  expect_error("", 1, "", "found nothing");
}

TEST(ScenarioErrors, FileNotFound) {
  try {
    load_scenario("/nonexistent/dir/none.yaml");
    FAIL() << "accepted a missing file";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("/nonexistent/dir/none.yaml"), std::string::npos) << e.what();
  }
}

TEST(ScenarioFaults, TableIsCompleteAndRoundTrips) {
  const auto& faults = all_faults();
  ASSERT_EQ(faults.size(), 18u);
  std::set<std::string> names;
  for (size_t i = 0; i < faults.size(); ++i) {
    EXPECT_EQ(static_cast<size_t>(faults[i].fault), i);
    EXPECT_EQ(parse_fault(faults[i].name), faults[i].fault);
    EXPECT_EQ(fault_info(faults[i].fault).name, std::string(faults[i].name));
    EXPECT_TRUE(names.insert(faults[i].name).second);
    EXPECT_GT(std::string(faults[i].description).size(), 20u);
  }
  EXPECT_STREQ(fault_info(Fault::kv_lens_max).must_trip, "causal_bound");
  EXPECT_STREQ(fault_info(Fault::staged_bytes_undercount).must_trip, "layout");
  EXPECT_STREQ(fault_info(Fault::slot_off_by_one).must_trip, "kv_write");
  EXPECT_STREQ(fault_info(Fault::block_table_swap).must_trip, "causal_bound");
  EXPECT_STREQ(fault_info(Fault::cu_seqlens_off_by_one).must_trip, "kv_write");
  EXPECT_STREQ(fault_info(Fault::causal_off_by_one).must_trip, "causal_bound");
  EXPECT_STREQ(fault_info(Fault::mrope_hw_alias).must_trip, "positions");
  EXPECT_STREQ(fault_info(Fault::conv_state_bleed).must_trip, "state");
  EXPECT_STREQ(fault_info(Fault::h_state_ptr_swap).must_trip, "state");
  EXPECT_STREQ(fault_info(Fault::seq_len_ptr_stride).must_trip, "metadata");
  EXPECT_STREQ(fault_info(Fault::table_guard_last_block).must_trip, "metadata");
  EXPECT_STREQ(fault_info(Fault::mrope_section_swap).must_trip, "positions");
  EXPECT_STREQ(fault_info(Fault::grid_short_by_one).must_trip, "numeric");
  EXPECT_STREQ(fault_info(Fault::gdn_state_race).must_trip, "determinism");
  EXPECT_STREQ(fault_info(Fault::graph_baked_kv_len).must_trip, "graph");
  EXPECT_STREQ(fault_info(Fault::batch_dependent_split).must_trip, "invariance");
  EXPECT_STREQ(fault_info(Fault::out_row_past_end).must_trip, "buffer_guard");
  EXPECT_STREQ(fault_info(Fault::inputs_in_place).must_trip, "buffer_guard");
  EXPECT_THROW(parse_fault("kv_lens_max"), InputError);
}

}  // namespace
}  // namespace pb
