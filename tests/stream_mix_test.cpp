// stream_mix_test.cpp: the stream generators and the batch resource checks. The golden
// vector pins the PRNG and the documented draw order across machines and libraries;
// every resource error must be located at the field that causes it.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "lib/batch.h"
#include "lib/scenario.h"

namespace pb {
namespace {

const char* kHead =
    "name: g\n"                                                  // 1
    "seed: 20240601\n"                                           // 2
    "model: {num_q_heads: 2, num_kv_heads: 1, head_dim: 64}\n"   // 3
    "layers: {pattern: [attn]}\n";                               // 4

Scenario parse(const std::string& streams_and_more, uint64_t seed = 20240601) {
  std::string text = kHead + streams_and_more;
  if (seed != 20240601) text.replace(text.find("20240601"), 8, std::to_string(seed));
  return parse_scenario(text, "g.yaml");
}

std::string error_of(const std::string& streams_and_more) {
  try {
    parse(streams_and_more);
  } catch (const InputError& e) {
    return e.what();
  }
  ADD_FAILURE() << "accepted:\n" << streams_and_more;
  return "";
}

void expect_error(const std::string& streams_and_more, int line, const std::string& field, const std::string& what) {
  const std::string msg = error_of(streams_and_more);
  SCOPED_TRACE(msg);
  EXPECT_EQ(msg.rfind("g.yaml:" + std::to_string(line) + ":", 0), 0u) << "wrong line";
  EXPECT_NE(msg.find(": " + field + ": "), std::string::npos) << "wrong field";
  EXPECT_NE(msg.find(what), std::string::npos) << "wrong text";
}

std::vector<int> tokens_of(const std::vector<StreamSpec>& v) {
  std::vector<int> t;
  for (const auto& s : v) t.push_back(s.tokens);
  return t;
}
std::vector<int> starts_of(const std::vector<StreamSpec>& v) {
  std::vector<int> t;
  for (const auto& s : v) t.push_back(s.chunk_start);
  return t;
}

const char* kMix =
    "streams:\n"                                                                                         // 5
    "  - tokens: 7\n"                                                                                    // 6
    "  - generate: {dist: uniform, count: 5, min: 1, max: 1000}\n"                                       // 7
    "  - generate: {dist: lognormal, count: 4, median: 200, sigma: 1.0, min: 1, max: 4000}\n"            // 8
    "  - {chunk_start: 3, tokens: 9}\n"                                                                  // 9
    "  - generate: {dist: long_tail, count: 4, long: 3000, long_count: 1, min: 10, max: 50,"
    " chunk_start: 16, chunk_start_max: 64}\n"                                                           // 10
    "  - generate: {dist: fixed, count: 2, tokens: 33, chunk_start: 5}\n";                               // 11

TEST(StreamMix, GoldenVectorPinsThePrng) {
  // Computed once with this build and cross-checked with an independent Python
  // mt19937_64 + splitmix64 + rejection sampling + Box-Muller (same draw order).
  // In range by inspection: uniform 1..1000; lognormal around 200 within [1, 4000];
  // long_tail: 3000 first, then 10..50, chunk_start 16..64; fixed 33 at chunk_start 5.
  const std::vector<StreamSpec> v = resolve_streams(parse(kMix));
  const std::vector<int> tokens = {7, 868, 575, 904, 515, 872, 452, 120, 237, 430, 9, 3000, 31, 23, 27, 33, 33};
  const std::vector<int> starts = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 3, 28, 40, 16, 39, 5, 5};
  EXPECT_EQ(tokens_of(v), tokens);
  EXPECT_EQ(starts_of(v), starts);
}

TEST(StreamMix, SameSeedSameStreamsOtherSeedOthers) {
  const auto a = resolve_streams(parse(kMix));
  const auto b = resolve_streams(parse(kMix));
  EXPECT_EQ(tokens_of(a), tokens_of(b));
  EXPECT_EQ(starts_of(a), starts_of(b));
  const auto c = resolve_streams(parse(kMix, 7));
  EXPECT_EQ(c.size(), a.size());
  EXPECT_NE(tokens_of(c), tokens_of(a));
}

TEST(StreamMix, ExplicitStreamsKeepTheirPlaceAndFields) {
  const auto v = resolve_streams(parse(kMix));
  ASSERT_EQ(v.size(), 1u + 5 + 4 + 1 + 4 + 2);
  EXPECT_EQ(v[0].tokens, 7);
  EXPECT_EQ(v[0].chunk_start, 0);
  EXPECT_EQ(v[10].tokens, 9);
  EXPECT_EQ(v[10].chunk_start, 3);
}

TEST(StreamMix, DistributionsRespectTheirRanges) {
  const auto v = resolve_streams(parse(
      "streams:\n"
      "  - generate: {dist: uniform, count: 400, min: 10, max: 20, chunk_start: 4, chunk_start_max: 9}\n"
      "  - generate: {dist: lognormal, count: 400, median: 100, sigma: 2.0, min: 5, max: 300}\n"
      "  - generate: {dist: long_tail, count: 50, long: 5000, long_count: 3, min: 1, max: 8}\n"
      "  - generate: {dist: fixed, count: 3, tokens: 77}\n"));
  ASSERT_EQ(v.size(), 853u);
  std::vector<int> uni, logn;
  for (int i = 0; i < 400; ++i) {
    uni.push_back(v[i].tokens);
    EXPECT_GE(v[i].chunk_start, 4);
    EXPECT_LE(v[i].chunk_start, 9);
    logn.push_back(v[400 + i].tokens);
    EXPECT_EQ(v[400 + i].chunk_start, 0);
  }
  EXPECT_EQ(*std::min_element(uni.begin(), uni.end()), 10);  // both ends reached in 400 draws
  EXPECT_EQ(*std::max_element(uni.begin(), uni.end()), 20);
  // sigma 2 clamps both tails: P(x < 5) ~ 7%, P(x > 300) ~ 29%.
  EXPECT_EQ(*std::min_element(logn.begin(), logn.end()), 5);
  EXPECT_EQ(*std::max_element(logn.begin(), logn.end()), 300);
  std::vector<int> sorted = logn;
  std::sort(sorted.begin(), sorted.end());
  EXPECT_GT(sorted[200], 60);  // the median stays near 100
  EXPECT_LT(sorted[200], 160);
  for (int i = 0; i < 50; ++i) {
    const int t = v[800 + i].tokens;
    if (i < 3) EXPECT_EQ(t, 5000) << i;  // long streams first, not shuffled
    else EXPECT_TRUE(t >= 1 && t <= 8) << i << ": " << t;
  }
  for (int i = 850; i < 853; ++i) EXPECT_EQ(v[i].tokens, 77);
}

TEST(StreamMix, KvCacheTooSmall) {
  // 40 tokens -> 3 blocks, 17 -> 2, 16 at chunk_start 16 -> 2: 7 blocks + 1 poison.
  const std::string streams =
      "streams:\n"
      "  - tokens: 40\n"
      "  - tokens: 17\n"
      "  - {chunk_start: 16, tokens: 16}\n"
      "kv_cache:\n"               // 9
      "  num_blocks: ";           // 10
  expect_error(streams + "7\n", 10, "kv_cache.num_blocks",
               "KV cache too small: needs 8 blocks (7 for 3 streams at block_size 16, plus 1 poison block), given 7");
  EXPECT_EQ(parse(streams + "8\n").kv_num_blocks, 8);
}

TEST(StreamMix, ExplicitBlockTableLength) {
  expect_error("streams:\n  - tokens: 5\n  - tokens: 40\n    blocks: [3, 9]\nkv_cache: {num_blocks: 64}\n", 8,
               "streams[1].blocks",
               "stream 1: block table has 2 entries but the stream needs 3 (kv_len 40, block_size 16)");
  expect_error("streams:\n  - {chunk_start: 20, tokens: 10, blocks: [3, 9, 4]}\nkv_cache: {num_blocks: 64}\n", 6,
               "streams[0].blocks",
               "stream 0: block table has 3 entries but the stream needs 2 (kv_len 30, block_size 16)");
  EXPECT_NO_THROW(parse("streams:\n  - {chunk_start: 20, tokens: 10, blocks: [3, 9]}\nkv_cache: {num_blocks: 64}\n"));
}

TEST(StreamMix, RepeatedOrOutOfRangeBlockId) {
  expect_error("streams:\n  - {tokens: 40, blocks: [3, 9, 3]}\nkv_cache: {num_blocks: 64}\n", 6, "streams[0].blocks[2]",
               "stream 0: block id 3 is already used by stream 0");
  expect_error(
      "streams:\n"
      "  - {tokens: 40, blocks: [3, 9, 4]}\n"
      "  - generate: {dist: fixed, count: 2, tokens: 8}\n"
      "  - tokens: 20\n"
      "    blocks:\n"
      "      - 11\n"
      "      - 9\n"
      "kv_cache: {num_blocks: 64}\n",
      11, "streams[2].blocks[1]", "stream 3: block id 9 is already used by stream 0 (entry 1)");
  expect_error("streams:\n  - {tokens: 40, blocks: [3, 64, 4]}\nkv_cache: {num_blocks: 64}\n", 6, "streams[0].blocks[1]",
               "block id 64 is outside the KV cache [0, 64)");
  expect_error("streams:\n  - {tokens: 40, blocks: [3, 6, 4]}\n", 6, "streams[0].blocks",
               "explicit block ids need kv_cache.num_blocks");
}

TEST(StreamMix, GeneratedStreamErrorsNameTheGenerator) {
  const Scenario s = parse(kMix);
  auto v = resolve_streams(s);
  v[12].tokens = 0;  // the second long_tail stream, from the entry at line 10
  try {
    validate_batch(s, v);
    FAIL() << "accepted a zero-token stream";
  } catch (const InputError& e) {
    const std::string msg = e.what();
    EXPECT_EQ(msg.rfind("g.yaml:10:", 0), 0u) << msg;
    EXPECT_NE(msg.find("streams[4]: stream 12 (generated): expected a positive token count, found 0"),
              std::string::npos) << msg;
  }
}

TEST(StreamMix, ImageSegmentsInsideTheSequence) {
  const Scenario s = parse_scenario(
      "name: m\nseed: 3\n"
      "model: {num_q_heads: 2, num_kv_heads: 1, head_dim: 64, mrope: {sections: [8, 12, 12]}}\n"
      "layers: {pattern: [attn]}\n"
      "streams:\n  - {chunk_start: 10, tokens: 20, images: [{start: 4, grid: [1, 4, 4]}]}\n",
      "m.yaml");
  auto v = resolve_streams(s);
  EXPECT_NO_THROW(validate_batch(s, v));
  v[0].tokens = 5;  // the sequence is now [0, 15): the image [4, 20) reaches past it
  try {
    validate_batch(s, v);
    FAIL() << "accepted an image past the sequence";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("m.yaml:6:"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("streams[0].images[0]: stream 0: image tokens [4, 20) reach past"),
              std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace pb
