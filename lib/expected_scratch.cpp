// expected_scratch.cpp: the scratch and arena images encoded from the truth
// (expected_scratch.h). Positions, slots, boundaries and lengths come from the
// StreamTruth (pos_t/h/w, blocks, row_begin, kv_len); offsets from the layout
// recomputation. Without MRoPE positions_h/w alias positions and take no bytes.
#include "expected_scratch.h"

#include <cstring>

#include "staging.h"

namespace pb {

namespace {

template <typename T>
void put(std::vector<uint8_t>& img, size_t at, const T& v) {
  if (at + sizeof(T) <= img.size()) std::memcpy(img.data() + at, &v, sizeof(T));
}

}  // namespace

std::vector<uint8_t> expected_scratch_image(const Batch& batch, bool mrope, size_t capacity,
                                            uint64_t arena_base) {
  const StagedLayout L = compute_layout(batch.num_streams, batch.total_tokens, mrope);
  const ScratchPlan plan = plan_scratch(L, capacity);
  std::vector<uint8_t> img(capacity, 0);
  for (size_t i = 0; i + 8 <= img.size(); i += 8) put(img, i, kCanary64);
  const size_t off = plan.off;
  std::fill(img.begin() + off, img.begin() + std::min(img.size(), off + L.staged_bytes), 0);
  const TableArena arena = plan_table_arena(batch);
  const int bs = batch.block_size;
  for (int b = 0; b < batch.num_streams; ++b) {
    const StreamTruth& st = batch.streams[b];
    for (int i = 0; i < st.count; ++i) {
      const size_t r = static_cast<size_t>(st.row_begin) + i;
      const int p = st.chunk_start + i;
      put(img, off + L.positions + 4 * r, st.pos_t[i]);
      if (mrope) {
        put(img, off + L.positions_h + 4 * r, st.pos_h[i]);
        put(img, off + L.positions_w + 4 * r, st.pos_w[i]);
      }
      put(img, off + L.slots + 8 * r, static_cast<int64_t>(st.blocks[p / bs]) * bs + p % bs);
    }
    put(img, off + L.block_table_ptrs + 8 * b, arena_base + arena.table_offset[b]);
    put(img, off + L.seq_len_ptrs + 8 * b, arena_base + arena.seq_len_offset[b]);
    put(img, off + L.cu_seqlens + 4 * b, static_cast<int32_t>(st.row_begin));
    put(img, off + L.kv_lens + 4 * b, static_cast<int32_t>(st.kv_len));
  }
  put(img, off + L.cu_seqlens + 4 * static_cast<size_t>(batch.num_streams),
      static_cast<int32_t>(batch.total_tokens));
  return img;
}

std::vector<uint8_t> expected_arena_image(const Batch& batch) {
  const TableArena arena = plan_table_arena(batch);
  std::vector<uint8_t> img(arena.bytes, 0);
  size_t end_of_tables = 0;
  for (int b = 0; b < batch.num_streams; ++b) {
    const StreamTruth& st = batch.streams[b];
    const size_t at = arena.table_offset[b], n = st.blocks.size();
    for (size_t e = 0; e < n; ++e) put(img, at + 4 * e, st.blocks[e]);
    put(img, at + 4 * n, static_cast<int32_t>(batch.poison_block));
    put(img, at + 4 * n + 4, kCanary32);
    end_of_tables = round8(at + 4 * (n + 2));
    put(img, arena.seq_len_offset[b], static_cast<int32_t>(st.kv_len));
  }
  if (!arena.seq_len_offset.empty())
    for (size_t at = end_of_tables; at + 4 <= arena.seq_len_offset.front(); at += 4)
      put(img, at, static_cast<int32_t>(batch.poison_block));
  return img;
}

}  // namespace pb
