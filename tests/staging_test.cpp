// staging_test.cpp: the staged layout against hand-computed offsets (N=1, N=3
// with MRoPE on and off, odd token counts, N=256), the staged values against
// the truth, and the scratch guard naming a one-byte overwrite in each field.
#include <gtest/gtest.h>

#include <cstring>

#include "lib/batch.h"
#include "lib/checks.h"
#include "lib/staging.h"

namespace pb {
namespace {

TEST(StagedLayout, OneStreamFiveTokens) {
  const StagedLayout L = compute_layout(1, 5, false);
  // positions 20 -> 24; slots 40; two pointer arrays 8 each; cu_seqlens 8; kv_lens 4 -> 8.
  EXPECT_EQ(L.positions, 0u);
  EXPECT_EQ(L.positions_h, 0u);
  EXPECT_EQ(L.positions_w, 0u);
  EXPECT_EQ(L.slots, 24u);
  EXPECT_EQ(L.block_table_ptrs, 64u);
  EXPECT_EQ(L.seq_len_ptrs, 72u);
  EXPECT_EQ(L.cu_seqlens, 80u);
  EXPECT_EQ(L.kv_lens, 88u);
  EXPECT_EQ(L.staged_bytes, 96u);
}

TEST(StagedLayout, ThreeStreamsWithoutMrope) {
  const StagedLayout L = compute_layout(3, 10, false);
  EXPECT_EQ(L.slots, 40u);
  EXPECT_EQ(L.block_table_ptrs, 120u);
  EXPECT_EQ(L.seq_len_ptrs, 144u);
  EXPECT_EQ(L.cu_seqlens, 168u);
  EXPECT_EQ(L.kv_lens, 184u);  // cu_seqlens: 4 x 4 = 16
  EXPECT_EQ(L.staged_bytes, 200u);  // kv_lens: 12 -> 16
}

TEST(StagedLayout, ThreeStreamsWithMrope) {
  const StagedLayout L = compute_layout(3, 10, true);
  EXPECT_EQ(L.positions_h, 40u);
  EXPECT_EQ(L.positions_w, 80u);
  EXPECT_EQ(L.slots, 120u);
  EXPECT_EQ(L.block_table_ptrs, 200u);
  EXPECT_EQ(L.seq_len_ptrs, 224u);
  EXPECT_EQ(L.cu_seqlens, 248u);
  EXPECT_EQ(L.kv_lens, 264u);
  EXPECT_EQ(L.staged_bytes, 280u);
}

TEST(StagedLayout, OddTokenCountIsPadded) {
  const StagedLayout L = compute_layout(3, 7, true);
  EXPECT_EQ(L.positions_h, 32u);  // 28 -> 32
  EXPECT_EQ(L.positions_w, 64u);
  EXPECT_EQ(L.slots, 96u);
  EXPECT_EQ(L.block_table_ptrs, 152u);
  EXPECT_EQ(L.staged_bytes, 232u);
  for (const FieldSpan& f : L.fields()) EXPECT_EQ(f.offset % 8, 0u) << f.name;
}

TEST(StagedLayout, TwoHundredFiftySixStreams) {
  const StagedLayout L = compute_layout(256, 1000, false);
  EXPECT_EQ(L.slots, 4000u);
  EXPECT_EQ(L.block_table_ptrs, 12000u);
  EXPECT_EQ(L.seq_len_ptrs, 14048u);
  EXPECT_EQ(L.cu_seqlens, 16096u);
  EXPECT_EQ(L.kv_lens, 17128u);  // 257 x 4 = 1028 -> 1032
  EXPECT_EQ(L.staged_bytes, 18152u);
}

// A hand-built batch: three streams, one continuing a chunk.
Batch three_streams(bool mrope) {
  Batch b;
  b.num_streams = 3;
  b.block_size = 4;
  b.num_blocks = 16;
  b.poison_block = 9;
  const int chunk_start[3] = {0, 5, 0}, count[3] = {3, 4, 1};
  const std::vector<int32_t> blocks[3] = {{7}, {2, 12, 5}, {0}};
  for (int s = 0; s < 3; ++s) {
    StreamTruth st;
    st.chunk_start = chunk_start[s];
    st.count = count[s];
    st.kv_len = chunk_start[s] + count[s];
    st.row_begin = b.total_tokens;
    for (int i = 0; i < count[s]; ++i) {
      st.pos_t.push_back(chunk_start[s] + i);
      st.pos_h.push_back(chunk_start[s] + i + (mrope && s == 1 ? 100 : 0));
      st.pos_w.push_back(chunk_start[s] + i + (mrope && s == 1 ? 200 : 0));
    }
    st.has_image = mrope && s == 1;
    st.blocks = blocks[s];
    b.total_tokens += count[s];
    b.chunk_len = std::max(b.chunk_len, count[s]);
    b.max_blocks_per_seq = std::max<int>(b.max_blocks_per_seq, st.blocks.size());
    b.streams.push_back(st);
  }
  return b;
}

template <typename T>
T read_at(const std::vector<uint8_t>& img, size_t at) {
  T v;
  std::memcpy(&v, &img[at], sizeof(T));
  return v;
}

TEST(Staging, ValuesMatchTheTruth) {
  const Batch b = three_streams(true);
  const uint64_t scratch_base = 0x10000, arena_base = 0x80000;
  const StagedImage img = stage_batch(b, true, 0, scratch_base, arena_base, FaultSet{});
  const StagedLayout& L = img.layout;
  const size_t off = img.plan.off;
  // Stream 1, token 2: p = 7 -> block_table[1] = 12, slot 12*4 + 3.
  EXPECT_EQ(read_at<int64_t>(img.scratch, off + L.slots + 8 * 5), 12 * 4 + 3);
  EXPECT_EQ(read_at<uint32_t>(img.scratch, off + L.positions_h + 4 * 5), 107u);
  EXPECT_EQ(read_at<int32_t>(img.scratch, off + L.cu_seqlens + 4 * 3), 8);
  EXPECT_EQ(read_at<int32_t>(img.scratch, off + L.kv_lens + 4 * 1), 9);
  const TableArena ta = plan_table_arena(b);
  EXPECT_EQ(read_at<uint64_t>(img.scratch, off + L.block_table_ptrs + 8 * 1), arena_base + ta.table_offset[1]);
  // Table of stream 1: its 3 blocks, the poison guard entry, the canary word.
  EXPECT_EQ(read_at<int32_t>(img.arena, ta.table_offset[1] + 4 * 2), 5);
  EXPECT_EQ(read_at<int32_t>(img.arena, ta.table_offset[1] + 4 * 3), 9);
  EXPECT_EQ(read_at<uint32_t>(img.arena, ta.table_offset[1] + 4 * 4), kCanary32);
  EXPECT_EQ(read_at<int32_t>(img.arena, ta.seq_len_offset[1]), 9);
  EXPECT_EQ(img.meta.staged_bytes, L.staged_bytes);
  EXPECT_EQ(img.plan.h_state_ptrs, off + L.staged_bytes);
  EXPECT_EQ(read_at<uint64_t>(img.scratch, 0), kCanary64);
  EXPECT_EQ(read_at<uint64_t>(img.scratch, img.plan.end_of_h_state), kCanary64);
  CheckResult layout;
  check_layout(b, true, img, scratch_base, layout);
  EXPECT_TRUE(layout.passed) << (layout.findings.empty() ? "" : layout.findings[0].message);
}

TEST(Staging, UndercountTripsTheLayoutCheck) {
  const Batch b = three_streams(false);
  FaultSet f;
  f.add(Fault::staged_bytes_undercount);
  const StagedImage img = stage_batch(b, false, 0, 0, 0, f);
  EXPECT_EQ(img.meta.staged_bytes, compute_layout(3, 8, false).staged_bytes - 24);
  CheckResult layout;
  check_layout(b, false, img, 0, layout);
  ASSERT_FALSE(layout.passed);
  EXPECT_NE(layout.findings[0].message.find("staged_bytes"), std::string::npos);
}

class GuardNamesField : public ::testing::TestWithParam<bool> {};

TEST_P(GuardNamesField, OneByteOverwriteInEachField) {
  const bool mrope = GetParam();
  const Batch b = three_streams(mrope);
  const StagedImage img = stage_batch(b, mrope, 0, 0, 0, FaultSet{});
  CheckResult clean;
  check_scratch_guard(b, mrope, img, img.scratch, img.scratch, img.arena, 0, clean);
  EXPECT_TRUE(clean.passed);
  for (const FieldSpan& f : img.layout.fields()) {
    if (f.alias) continue;
    std::vector<uint8_t> hit = img.scratch;
    hit[img.plan.off + f.offset + f.bytes / 2] ^= 0x40;
    CheckResult r;
    check_scratch_guard(b, mrope, img, img.scratch, hit, img.arena, 2, r);
    ASSERT_FALSE(r.passed) << f.name;
    EXPECT_NE(r.findings[0].message.find(std::string("'") + f.name + "'"), std::string::npos)
        << f.name << ": " << r.findings[0].message;
    EXPECT_EQ(r.findings[0].layer, 2);
  }
  const struct { const char* name; size_t at; } guards[] = {
      {"front guard", 3}, {"h_state_ptrs", img.plan.h_state_ptrs + 1}, {"rear guard", img.plan.end_of_h_state + 5}};
  for (const auto& g : guards) {
    std::vector<uint8_t> hit = img.scratch;
    hit[g.at] ^= 1;
    CheckResult r;
    check_scratch_guard(b, mrope, img, img.scratch, hit, img.arena, 0, r);
    ASSERT_FALSE(r.passed) << g.name;
    EXPECT_NE(r.findings[0].message.find(g.name), std::string::npos) << r.findings[0].message;
  }
  const TableArena ta = plan_table_arena(b);
  std::vector<uint8_t> arena = img.arena;
  arena[ta.table_offset[1] + 4 * 3 + 4] ^= 1;  // stream 1's canary word
  CheckResult r;
  check_scratch_guard(b, mrope, img, img.scratch, img.scratch, arena, 0, r);
  ASSERT_FALSE(r.passed);
  EXPECT_NE(r.findings[0].message.find("stream 1 block table canary"), std::string::npos);
}

INSTANTIATE_TEST_SUITE_P(Mrope, GuardNamesField, ::testing::Values(false, true));

TEST(Staging, FaultsChangeWhatTheyModel) {
  const Batch b = three_streams(true);
  const StagedImage clean = stage_batch(b, true, 0, 0, 0, FaultSet{});
  auto staged = [&](Fault fault) {
    FaultSet f;
    f.add(fault);
    return stage_batch(b, true, 0, 0, 0, f);
  };
  const size_t off = clean.plan.off;
  const StagedLayout& L = clean.layout;
  EXPECT_EQ(read_at<int32_t>(staged(Fault::kv_lens_max).scratch, off + L.kv_lens + 4 * 2), 9);
  EXPECT_EQ(read_at<int64_t>(staged(Fault::slot_off_by_one).scratch, off + L.slots),
            read_at<int64_t>(clean.scratch, off + L.slots) + 1);
  EXPECT_EQ(read_at<uint64_t>(staged(Fault::block_table_swap).scratch, off + L.block_table_ptrs),
            read_at<uint64_t>(clean.scratch, off + L.block_table_ptrs + 8));
  EXPECT_EQ(read_at<int32_t>(staged(Fault::cu_seqlens_off_by_one).scratch, off + L.cu_seqlens + 4), 4);
  EXPECT_EQ(read_at<uint32_t>(staged(Fault::mrope_hw_alias).scratch, off + L.positions_h + 4 * 5), 7u);
  EXPECT_EQ(make_h_state_ptrs({1, 2, 3}, [] { FaultSet f; f.add(Fault::h_state_ptr_swap); return f; }()),
            (std::vector<uint64_t>{2, 1, 3}));
}

}  // namespace
}  // namespace pb
