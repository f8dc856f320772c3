// staging.cpp: packs the staged metadata block into the scratch image the way
// the engine does (docs/DESIGN.md "The staged layout"), builds the table arena,
// and applies the staging faults. The scratch image starts as canary words
// everywhere; staging writes only the block [off, off + staged_bytes) (padding
// bytes zero). The caller's h_state_ptrs go at off + staged_bytes later, per
// gdn layer.
#include "staging.h"

#include <algorithm>
#include <cstring>

namespace pb {

namespace {

template <typename T>
void put(std::vector<uint8_t>& img, size_t at, const T& v) {
  std::memcpy(img.data() + at, &v, sizeof(T));
}

void fill_canary(std::vector<uint8_t>& img) {
  for (size_t i = 0; i + 8 <= img.size(); i += 8) put(img, i, kCanary64);
}

}  // namespace

TableArena plan_table_arena(const Batch& batch) {
  TableArena a;
  size_t o = 0;
  for (const StreamTruth& st : batch.streams) {
    a.table_offset.push_back(o);
    o += round8(4 * (st.blocks.size() + 2));  // blocks, poison guard entry, canary word
  }
  o += round8(4 * (static_cast<size_t>(batch.max_blocks_per_seq) + 2));  // poison slack
  for (size_t b = 0; b < batch.streams.size(); ++b) {
    a.seq_len_offset.push_back(o);
    o += 8;
  }
  a.bytes = o;
  return a;
}

StagedImage stage_batch(const Batch& batch, bool mrope, size_t capacity, uint64_t scratch_base,
                        uint64_t arena_base, FaultSet faults) {
  StagedImage img;
  const int N = batch.num_streams, T = batch.total_tokens;
  img.layout = compute_layout(N, T, mrope);
  const StagedLayout& L = img.layout;

  // Table arena: each stream's table exactly as long as it needs, a poison
  // guard entry and a canary word; then poison slack; then the seq_len values.
  const TableArena arena = plan_table_arena(batch);
  img.arena.assign(arena.bytes, 0);
  for (int b = 0; b < N; ++b) {
    const StreamTruth& st = batch.streams[b];
    size_t at = arena.table_offset[b];
    for (int32_t id : st.blocks) put(img.arena, (at += 4) - 4, id);
    const bool repeat_last = faults.has(Fault::table_guard_last_block) && !st.blocks.empty();
    put(img.arena, at, static_cast<int32_t>(repeat_last ? st.blocks.back() : batch.poison_block));
    put(img.arena, at + 4, kCanary32);
    put(img.arena, arena.seq_len_offset[b], static_cast<int32_t>(st.kv_len));
  }
  const size_t slack = arena.table_offset.empty() ? 0
                       : arena.table_offset.back() + round8(4 * (batch.streams.back().blocks.size() + 2));
  for (size_t at = slack; at + 4 <= arena.seq_len_offset.front(); at += 4)
    put(img.arena, at, static_cast<int32_t>(batch.poison_block));

  // Stream boundaries as the (possibly faulty) stager sees them.
  std::vector<int32_t> cu(N + 1, 0);
  for (int b = 0; b < N; ++b) cu[b + 1] = cu[b] + batch.streams[b].count;
  if (faults.has(Fault::cu_seqlens_off_by_one))
    for (int b = 1; b < N; ++b) cu[b] = std::min(cu[b] + 1, T);
  std::vector<int32_t> kv(N);
  int32_t kv_max = 0;
  for (int b = 0; b < N; ++b) kv_max = std::max(kv_max, kv[b] = batch.streams[b].kv_len);
  if (faults.has(Fault::kv_lens_max)) std::fill(kv.begin(), kv.end(), kv_max);

  const size_t reported_bytes =
      faults.has(Fault::staged_bytes_undercount) ? L.staged_bytes - 8 * static_cast<size_t>(N)
                                                 : L.staged_bytes;
  StagedLayout reported = L;
  reported.staged_bytes = reported_bytes;
  img.plan = plan_scratch(reported, capacity);
  // The scratch buffer must hold the true block too (validation refuses a
  // capacity below the true need; the undercount only moves h_state_ptrs).
  img.plan.capacity = std::max(img.plan.capacity, plan_scratch(L, 0).needed());
  img.layout.staged_bytes = reported_bytes;

  img.scratch.assign(img.plan.capacity, 0);
  fill_canary(img.scratch);
  const size_t off = img.plan.off;
  std::fill(img.scratch.begin() + off, img.scratch.begin() + off + L.staged_bytes, 0);

  // Per-token fields, stacked in cu_seqlens order.
  for (int b = 0; b < N; ++b) {
    const StreamTruth& st = batch.streams[b];
    for (int r = cu[b]; r < cu[b + 1]; ++r) {
      const int i = r - cu[b];
      const int p = st.chunk_start + i;
      const bool inside = i < st.count;  // false only under cu-seqlens-off-by-one
      const uint32_t pt = inside ? st.pos_t[i] : static_cast<uint32_t>(p);
      const uint32_t ph = faults.has(Fault::mrope_hw_alias) ? pt : inside ? st.pos_h[i] : pt;
      const uint32_t pw = faults.has(Fault::mrope_hw_alias) ? pt : inside ? st.pos_w[i] : pt;
      put(img.scratch, off + L.positions + 4 * r, pt);
      if (mrope) {
        put(img.scratch, off + L.positions_h + 4 * r, ph);
        put(img.scratch, off + L.positions_w + 4 * r, pw);
      }
      const int block_size = batch.block_size;
      const int entry = p / block_size;
      const int32_t blk = entry < static_cast<int>(st.blocks.size()) ? st.blocks[entry] : batch.poison_block;
      int64_t slot = static_cast<int64_t>(blk) * block_size + p % block_size;
      if (faults.has(Fault::slot_off_by_one)) slot += 1;
      put(img.scratch, off + L.slots + 8 * r, slot);
    }
  }

  // Per-stream pointer arrays and lengths.
  std::vector<uint64_t> table_ptr(N), seq_ptr(N);
  for (int b = 0; b < N; ++b) {
    table_ptr[b] = arena_base + arena.table_offset[b];
    seq_ptr[b] = faults.has(Fault::seq_len_ptr_stride) ? arena_base + arena.seq_len_offset[0] + 4 * b
                                                        : arena_base + arena.seq_len_offset[b];
  }
  if (faults.has(Fault::block_table_swap) && N >= 2) std::swap(table_ptr[0], table_ptr[1]);
  for (int b = 0; b < N; ++b) {
    put(img.scratch, off + L.block_table_ptrs + 8 * b, table_ptr[b]);
    put(img.scratch, off + L.seq_len_ptrs + 8 * b, seq_ptr[b]);
    put(img.scratch, off + L.kv_lens + 4 * b, kv[b]);
  }
  for (int b = 0; b <= N; ++b) put(img.scratch, off + L.cu_seqlens + 4 * b, cu[b]);

  BatchedAttnMetadata& m = img.meta;
  const uint64_t base = scratch_base + off;
  m.positions_stacked = base + L.positions;
  m.positions_h_stacked = base + L.positions_h;
  m.positions_w_stacked = base + L.positions_w;
  m.slot_stacked = base + L.slots;
  m.block_table_ptrs = base + L.block_table_ptrs;
  m.seq_len_ptrs = base + L.seq_len_ptrs;
  m.batch_size = static_cast<uint32_t>(N);
  m.chunk_len = static_cast<uint32_t>(batch.chunk_len);
  m.total_tokens = static_cast<uint32_t>(T);
  m.cu_seqlens = base + L.cu_seqlens;
  m.cu_seqlens_host = cu;
  m.kv_lens = base + L.kv_lens;
  m.kv_lens_host = kv;
  m.max_blocks_per_seq = static_cast<uint32_t>(batch.max_blocks_per_seq);
  m.staged_bytes = reported_bytes;
  return img;
}

std::vector<uint64_t> make_h_state_ptrs(const std::vector<uint64_t>& state_address, FaultSet faults) {
  std::vector<uint64_t> p = state_address;
  if (faults.has(Fault::h_state_ptr_swap) && p.size() >= 2) std::swap(p[0], p[1]);
  return p;
}

}  // namespace pb
