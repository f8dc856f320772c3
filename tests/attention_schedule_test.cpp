// attention_schedule_test.cpp: the attention work list's L2 sections and the
// persistent kernel's CTA lists (kernels/attention_schedule.h), on the host: every
// q-tile and every entry exactly once, sections of streams whose K/V fits the budget,
// longest first inside each, and list scheduling's balance and start order.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <numeric>
#include <set>
#include <vector>

#include "kernels/attention_schedule.h"

namespace {

using pb::kernels::AttnWorkItem;
using pb::kernels::attention_tile_keys;
using pb::kernels::order_attention_tiles;
using pb::kernels::schedule_attention_entries;

std::vector<int32_t> cu_of(const std::vector<int>& counts) {
  std::vector<int32_t> cu{0};
  for (int c : counts) cu.push_back(cu.back() + c);
  return cu;
}

std::vector<int32_t> kv_of(const std::vector<int>& counts, const std::vector<int>& starts) {
  std::vector<int32_t> kv;
  for (size_t b = 0; b < counts.size(); ++b) kv.push_back(counts[b] + starts[b]);
  return kv;
}

void expect_every_tile_once(const std::vector<AttnWorkItem>& work, const std::vector<int>& counts, int rows) {
  std::set<std::pair<int, int>> seen;
  for (const AttnWorkItem& w : work) EXPECT_TRUE(seen.insert({w.stream, w.tile}).second) << w.stream << "," << w.tile;
  size_t tiles = 0;
  for (int c : counts) tiles += (c + rows - 1) / rows;
  EXPECT_EQ(seen.size(), tiles);
}

TEST(AttentionSchedule, SectionsHoldStreamsWhoseKvFitsAndGoLongestFirstInside) {
  // 32 x 512 at 16 kv heads of d128: 8 KB of K/V a token, 4 MB a stream; 25 MB sections
  // hold 6 streams, so the list is the q-tiles of streams 0-5 (3, 3, ..., 0, 0), then 6-11, ...
  const std::vector<int> counts(32, 512);
  const auto cu = cu_of(counts);
  const auto kv = kv_of(counts, std::vector<int>(32, 0));
  const uint64_t per_token = 16 * 128 * 2 * 2, budget = 25u << 20;
  const auto work = order_attention_tiles(128, cu, kv, per_token, budget);
  expect_every_tile_once(work, counts, 128);
  ASSERT_EQ(work.size(), 128u);
  for (size_t i = 0; i < work.size(); ++i) {
    const int section = static_cast<int>(i) / 24, in = static_cast<int>(i) % 24;
    EXPECT_EQ(work[i].stream / 6, section) << i;
    if (i < 120) EXPECT_EQ(work[i].tile, 3 - in / 6) << i;  // the last section holds streams 30 and 31 only
  }
  // No budget: one section, plain longest first.
  const auto flat = order_attention_tiles(128, cu, kv, per_token, 0);
  expect_every_tile_once(flat, counts, 128);
  for (size_t i = 0; i < flat.size(); ++i) EXPECT_EQ(flat[i].tile, 3 - static_cast<int>(i) / 32) << i;
}

TEST(AttentionSchedule, LongStreamsStandAloneAndChunkStartsCountAsKeys) {
  // A 4096-token continuation at chunk_start 8192 has the batch's largest K/V, then an 8192-token
  // stream; each exceeds the 1 MB budget alone. The short streams share the last section.
  const std::vector<int> counts{7, 8192, 300, 4096, 33};
  const std::vector<int> starts{0, 0, 0, 8192, 5};
  const auto cu = cu_of(counts);
  const auto kv = kv_of(counts, starts);
  const auto work = order_attention_tiles(64, cu, kv, 256, 1u << 20);
  expect_every_tile_once(work, counts, 64);
  EXPECT_EQ(attention_tile_keys(64, cu, kv, {3, 0}), 8192 + 64);
  EXPECT_EQ(attention_tile_keys(64, cu, kv, {4, 0}), 5 + 33);
  std::vector<int> stream_order;
  for (const AttnWorkItem& w : work)
    if (stream_order.empty() || stream_order.back() != w.stream) stream_order.push_back(w.stream);
  // Stream 3 (12288 keys) whole, then stream 1 whole, then the section {2, 4, 0} longest first.
  ASSERT_GE(stream_order.size(), 3u);
  EXPECT_EQ(stream_order[0], 3);
  EXPECT_EQ(stream_order[1], 1);
  for (size_t i = 1; i < work.size(); ++i) {
    const bool same_section = (work[i].stream == work[i - 1].stream) ||
                              (work[i].stream != 3 && work[i].stream != 1 && work[i - 1].stream != 3 && work[i - 1].stream != 1);
    if (same_section)
      EXPECT_GE(attention_tile_keys(64, cu, kv, work[i - 1]), attention_tile_keys(64, cu, kv, work[i])) << i;
  }
  // Empty streams have no tiles; an empty batch no work.
  EXPECT_TRUE(order_attention_tiles(64, cu_of({0, 0}), kv_of({0, 0}, {0, 0}), 256, 1u << 20).empty());
  EXPECT_TRUE(order_attention_tiles(64, {}, {}, 256, 1u << 20).empty());
}

// Replays list scheduling: each entry's start (its CTA's cost before it) and each CTA's total.
struct Replay {
  std::map<int32_t, long long> start;
  std::vector<long long> total;
};
Replay replay(const std::vector<int32_t>& s, int ctas, int per_item, const std::vector<long long>& cost) {
  Replay r;
  r.total.assign(ctas, 0);
  for (int i = 0; i < ctas; ++i)
    for (int32_t k = s[i]; k < s[i + 1]; ++k) {
      const int32_t x = s[ctas + 1 + k];
      r.start[x] = r.total[i];
      r.total[i] += cost[x / per_item];
    }
  return r;
}

TEST(AttentionSchedule, ListSchedulingPlacesEveryEntryOnceInListOrderAndBalances) {
  // A work list as launched: longest first, then padding; 4 entries an item (kv heads x chunks).
  std::vector<AttnWorkItem> work;
  std::vector<long long> cost;
  for (int t = 40; t >= 1; --t) {
    work.push_back({t % 3, t});
    cost.push_back(2 * ((t + 1) / 2) + 1);
  }
  work.resize(50, AttnWorkItem{-1, -1});
  cost.resize(50, 0);
  const int per_item = 4, ctas = 13;
  const auto s = schedule_attention_entries(work, cost, per_item, ctas);
  ASSERT_EQ(s.size(), size_t(ctas) + 1 + 40 * per_item);
  EXPECT_EQ(s[0], 0);
  for (int i = 0; i < ctas; ++i) EXPECT_LE(s[i], s[i + 1]);
  EXPECT_EQ(s[ctas], 40 * per_item);
  std::vector<int32_t> entries(s.begin() + ctas + 1, s.end());
  std::sort(entries.begin(), entries.end());
  std::vector<int32_t> want(40 * per_item);
  std::iota(want.begin(), want.end(), 0);  // the 40 valid items' entries, none of the padding's
  EXPECT_EQ(entries, want);
  const Replay r = replay(s, ctas, per_item, cost);
  for (int32_t x = 1; x < 40 * per_item; ++x) EXPECT_GE(r.start.at(x), r.start.at(x - 1)) << x;  // starts in list order
  long long sum = 0, max_cost = 0;
  for (int i = 0; i < 40; ++i) sum += per_item * cost[i], max_cost = std::max(max_cost, cost[i]);
  const long long most = *std::max_element(r.total.begin(), r.total.end());
  const long long least = *std::min_element(r.total.begin(), r.total.end());
  EXPECT_LE(most, sum / ctas + max_cost);  // list scheduling's bound
  EXPECT_LE(most - least, max_cost);
  // The same inputs give the same plan.
  EXPECT_EQ(schedule_attention_entries(work, cost, per_item, ctas), s);
}

TEST(AttentionSchedule, MoreCtasThanEntriesLeavesTheRestEmpty) {
  const std::vector<AttnWorkItem> work{{0, 0}, {1, 0}, {-1, -1}};
  const auto s = schedule_attention_entries(work, {3, 3, 0}, 2, 8);
  ASSERT_EQ(s.size(), 9u + 4u);
  int busy = 0;
  for (int i = 0; i < 8; ++i) busy += s[i + 1] - s[i] == 1;
  EXPECT_EQ(busy, 4);
  EXPECT_EQ(s[8], 4);
  const auto none = schedule_attention_entries({}, {}, 2, 3);
  EXPECT_EQ(none, std::vector<int32_t>(4, 0));
}

}  // namespace
