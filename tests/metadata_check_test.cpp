// metadata_check_test.cpp: the metadata check and the truth-built scratch guard
// expectation. Each finding is shown to fire on the staging fault or hand-made
// corruption it exists for, naming field, stream and element, and to stay quiet
// on the clean image; corrupted addresses are bounded, never followed out.
#include <gtest/gtest.h>

#include <fmt/format.h>

#include <cstring>
#include <set>

#include "lib/checks.h"
#include "lib/expected_scratch.h"
#include "lib/scenario.h"
#include "lib/staging.h"
#include "test_util.h"

namespace pb {
namespace {

constexpr uint64_t kScratchBase = 0x10000000, kArenaBase = 0x20000000;

bool has(const CheckResult& r, const std::string& text) {
  for (const Finding& f : r.findings)
    if (f.message.find(text) != std::string::npos) return true;
  return false;
}

std::string all(const CheckResult& r) {
  std::string s;
  for (const Finding& f : r.findings) s += f.message + "\n";
  return s;
}

struct Staged {
  Scenario s;
  Batch batch;
  StagedImage img;
};

Staged stage(const char* scenario, FaultSet faults = {}) {
  Staged st;
  st.s = load_scenario(pb::test::source_dir() + "/scenarios/" + scenario + ".yaml");
  st.batch = generate_batch(st.s);
  st.img = stage_batch(st.batch, st.s.model.mrope.enabled, 0, kScratchBase, kArenaBase, faults);
  return st;
}

FaultSet with(Fault f) {
  FaultSet s;
  s.add(f);
  return s;
}

CheckResult metadata(const Staged& st, const std::vector<uint8_t>& scratch, const std::vector<uint8_t>& arena) {
  CheckResult r;
  check_metadata(st.batch, st.img.meta, scratch, kScratchBase, arena, kArenaBase, r);
  return r;
}

template <typename T>
void poke(std::vector<uint8_t>& img, uint64_t addr, T v) {
  std::memcpy(img.data() + (addr - kScratchBase), &v, sizeof(T));
}

class MetadataCheck : public ::testing::TestWithParam<const char*> {};

TEST_P(MetadataCheck, CleanImagePassesWithEveryFieldCounted) {
  const Staged st = stage(GetParam());
  const CheckResult r = metadata(st, st.img.scratch, st.img.arena);
  EXPECT_TRUE(r.passed) << all(r);
  std::set<std::string> counted;
  for (const Figure& f : r.figures) {
    counted.insert(f.what);
    EXPECT_EQ(f.mismatched, 0) << f.what;
    EXPECT_GT(f.elements, 0) << f.what;
  }
  for (const char* field : {"positions", "positions_h", "positions_w", "slots", "block_table_ptrs",
                            "block_table_entries", "seq_len_ptrs", "cu_seqlens", "kv_lens", "cu_seqlens_host",
                            "kv_lens_host"})
    EXPECT_TRUE(counted.count(field)) << field;
}

INSTANTIATE_TEST_SUITE_P(Shipped, MetadataCheck,
                         ::testing::Values("smoke", "mrope-image", "block-size-1", "gqa-group-7"));

TEST(MetadataCheck, SeqLenPtrStrideNamesPointerValueAndKvLen) {
  const Staged st = stage("smoke", with(Fault::seq_len_ptr_stride));
  const CheckResult r = metadata(st, st.img.scratch, st.img.arena);
  ASSERT_FALSE(r.passed);
  // Stream 1's pointer lands on the upper half of stream 0's 8-byte slot.
  const uint64_t p1 = kArenaBase + plan_table_arena(st.batch).seq_len_offset[0] + 4;
  EXPECT_TRUE(has(r, fmt::format("seq_len_ptrs[1] -> 0x{:x} holds 0, expected kv_len {}", p1,
                                 st.batch.streams[1].kv_len))) << all(r);
  EXPECT_TRUE(has(r, "stream 1's seq_len")) << all(r);  // stream 2's pointer lands on stream 1's value
  EXPECT_EQ(r.findings[0].stream, 1);
}

TEST(MetadataCheck, GuardEntryThatIsALiveBlockIsAFinding) {
  const Staged st = stage("smoke", with(Fault::table_guard_last_block));
  const CheckResult r = metadata(st, st.img.scratch, st.img.arena);
  ASSERT_FALSE(r.passed);
  const StreamTruth& s0 = st.batch.streams[0];
  EXPECT_TRUE(has(r, fmt::format("guard entry {} holds block {} (a live block of stream 0), expected the poison "
                                 "block {}", s0.blocks.size(), s0.blocks.back(), st.batch.poison_block)))
      << all(r);
  EXPECT_EQ(r.finding_count, st.batch.num_streams);
}

TEST(MetadataCheck, KvLensAndHostCopyAgainstTheTruth) {
  const Staged st = stage("smoke", with(Fault::kv_lens_max));
  const CheckResult r = metadata(st, st.img.scratch, st.img.arena);
  EXPECT_TRUE(has(r, "kv_lens[0] holds 49, expected 23")) << all(r);
  EXPECT_TRUE(has(r, "kv_lens_host[0] holds 49, expected 23")) << all(r);
  // Only the host copy wrong: the device array passes, the copy does not.
  Staged clean = stage("smoke");
  clean.img.meta.kv_lens_host[2] = 7;
  const CheckResult h = metadata(clean, clean.img.scratch, clean.img.arena);
  EXPECT_EQ(h.finding_count, 1) << all(h);
  EXPECT_TRUE(has(h, "kv_lens_host[2] holds 7, expected 1")) << all(h);
}

TEST(MetadataCheck, EachPerTokenArrayNamesStreamTokenAndPosition) {
  const Staged st = stage("mrope-image");
  const BatchedAttnMetadata& m = st.img.meta;
  const StreamTruth& s2 = st.batch.streams[2];
  const size_t row = s2.row_begin + 7;
  struct Case { const char* field; uint64_t at; size_t bytes; };
  for (const Case& c : {Case{"positions_h", m.positions_h_stacked + 4 * row, 4},
                        Case{"positions_w", m.positions_w_stacked + 4 * row, 4},
                        Case{"positions", m.positions_stacked + 4 * row, 4},
                        Case{"slots", m.slot_stacked + 8 * row, 8}}) {
    std::vector<uint8_t> scratch = st.img.scratch;
    scratch[c.at - kScratchBase] ^= 0x10;
    const CheckResult r = metadata(st, scratch, st.img.arena);
    ASSERT_EQ(r.finding_count, 1) << c.field << "\n" << all(r);
    EXPECT_EQ(r.findings[0].stream, 2);
    EXPECT_NE(r.findings[0].message.find(fmt::format("{}[{}] (stream 2 token 7, position {})", c.field, row,
                                                     s2.chunk_start + 7)), std::string::npos)
        << r.findings[0].message;
  }
  std::vector<uint8_t> scratch = st.img.scratch;
  poke<int32_t>(scratch, m.cu_seqlens + 4 * 3, 5);
  const CheckResult r = metadata(st, scratch, st.img.arena);
  EXPECT_TRUE(has(r, fmt::format("cu_seqlens[3] holds 5, expected {}", st.batch.streams[3].row_begin))) << all(r);
}

TEST(MetadataCheck, BlockTablePointerAtAnotherStreamsTable) {
  const Staged st = stage("smoke", with(Fault::block_table_swap));
  const CheckResult r = metadata(st, st.img.scratch, st.img.arena);
  EXPECT_TRUE(has(r, "block_table_ptrs[0] -> ")) << all(r);
  EXPECT_TRUE(has(r, "is stream 1's table, expected stream 0's table")) << all(r);
  EXPECT_TRUE(has(r, "stream 0's block table via block_table_ptrs[0]")) << all(r);
}

TEST(MetadataCheck, WildAddressesAreBoundedNotFollowed) {
  const Staged st = stage("smoke");
  std::vector<uint8_t> scratch = st.img.scratch;
  poke<uint64_t>(scratch, st.img.meta.block_table_ptrs + 8, 0xdead0000);           // outside the arena
  poke<uint64_t>(scratch, st.img.meta.seq_len_ptrs + 16, kArenaBase + 2);          // misaligned
  poke<uint64_t>(scratch, st.img.meta.seq_len_ptrs, kArenaBase + st.img.arena.size());  // just past the end
  CheckResult r = metadata(st, scratch, st.img.arena);
  EXPECT_TRUE(has(r, "block_table_ptrs[1] -> 0xdead0000 (20 bytes) lies outside the read-back arena")) << all(r);
  EXPECT_TRUE(has(r, "seq_len_ptrs[2] -> 0x20000002 is not 4-byte aligned")) << all(r);
  EXPECT_TRUE(has(r, fmt::format("seq_len_ptrs[0] -> 0x{:x} (4 bytes) lies outside the read-back arena",
                                 kArenaBase + st.img.arena.size()))) << all(r);
  // The metadata's own array addresses outside the scratch.
  Staged moved = stage("smoke");
  moved.img.meta.slot_stacked = kScratchBase + moved.img.scratch.size() - 8;
  moved.img.meta.kv_lens = 0x8;
  r = metadata(moved, moved.img.scratch, moved.img.arena);
  EXPECT_TRUE(has(r, "lies outside the read-back scratch")) << all(r);
  EXPECT_TRUE(has(r, "kv_lens -> 0x8 (12 bytes)")) << all(r);
}

// The guard's expectation comes from the truth: a value staged wrong is a
// finding on its own, and the message says it was staged so.
TEST(ScratchGuardExpectation, EqualsACleanStagingByteForByte) {
  for (const char* scenario : {"smoke", "mrope-image", "block-size-1"}) {
    const Staged st = stage(scenario);
    EXPECT_EQ(expected_scratch_image(st.batch, st.s.model.mrope.enabled, st.img.scratch.size(), kArenaBase),
              st.img.scratch) << scenario;
    EXPECT_EQ(expected_arena_image(st.batch), st.img.arena) << scenario;
  }
}

TEST(ScratchGuardExpectation, ValueStagedWrongIsAFindingThatSaysSo) {
  const Staged clean = stage("smoke");
  const std::vector<uint8_t> expected =
      expected_scratch_image(clean.batch, false, clean.img.scratch.size(), kArenaBase);
  CheckResult ok;
  check_scratch_guard(clean.batch, false, clean.img, expected, clean.img.scratch, clean.img.arena, 0, ok);
  EXPECT_TRUE(ok.passed) << all(ok);

  const Staged bad = stage("smoke", with(Fault::kv_lens_max));
  CheckResult r;
  check_scratch_guard(bad.batch, false, bad.img, expected, bad.img.scratch, bad.img.arena, 0, r);
  ASSERT_FALSE(r.passed);
  EXPECT_TRUE(has(r, "scratch region 'kv_lens'")) << all(r);
  EXPECT_TRUE(has(r, "staged wrong (the layer left it as uploaded)")) << all(r);

  const Staged guard = stage("smoke", with(Fault::table_guard_last_block));
  CheckResult g;
  check_scratch_guard(guard.batch, false, guard.img, expected, guard.img.scratch, guard.img.arena, 0, g);
  EXPECT_TRUE(has(g, "stream 0 block table guard entry holds")) << all(g);

  // A byte the layer changed after a clean staging says so too.
  std::vector<uint8_t> hit = clean.img.scratch;
  hit[clean.img.meta.kv_lens - kScratchBase] ^= 1;
  CheckResult c;
  check_scratch_guard(clean.batch, false, clean.img, expected, hit, clean.img.arena, 1, c);
  EXPECT_TRUE(has(c, "changed by the layer")) << all(c);

  // Read against the scratch as it was at the check before: a byte that already
  // held its value then (an earlier layer's write, reported there) is left out, a
  // new one is named with when it happened.
  CheckResult again;
  check_scratch_guard(clean.batch, false, clean.img, expected, hit, clean.img.arena, 2, again, {&hit, &clean.img.arena});
  EXPECT_TRUE(again.passed) << all(again);
  std::vector<uint8_t> later = hit;
  later[clean.img.meta.cu_seqlens - kScratchBase + 4] ^= 1;
  std::vector<uint8_t> arena = clean.img.arena;
  arena[0] ^= 1;
  CheckResult d;
  check_scratch_guard(clean.batch, false, clean.img, expected, later, arena, 2, d, {&hit, &clean.img.arena},
                      " (on a run after the checked one)");
  EXPECT_EQ(d.finding_count, 2) << all(d);
  EXPECT_TRUE(has(d, "scratch region 'cu_seqlens'")) << all(d);
  EXPECT_FALSE(has(d, "scratch region 'kv_lens'")) << all(d);
  EXPECT_TRUE(has(d, "changed by the layer (on a run after the checked one)")) << all(d);
}

}  // namespace
}  // namespace pb
