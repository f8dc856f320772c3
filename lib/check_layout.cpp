// check_layout.cpp: the layout check: what staging reported (offsets through
// the metadata addresses, staged_bytes, scalar fields) against an independent
// recomputation from the ground truth.
#include <fmt/format.h>

#include "checks.h"

namespace pb {

void check_layout(const Batch& batch, bool mrope, const StagedImage& img, uint64_t scratch_base,
                  CheckResult& r) {
  const StagedLayout want = compute_layout(batch.num_streams, batch.total_tokens, mrope);
  const BatchedAttnMetadata& m = img.meta;
  const uint64_t base = scratch_base + img.plan.off;
  const struct { const char* name; uint64_t got; size_t want; } addrs[] = {
      {"positions", m.positions_stacked, want.positions},
      {"positions_h", m.positions_h_stacked, want.positions_h},
      {"positions_w", m.positions_w_stacked, want.positions_w},
      {"slots", m.slot_stacked, want.slots},
      {"block_table_ptrs", m.block_table_ptrs, want.block_table_ptrs},
      {"seq_len_ptrs", m.seq_len_ptrs, want.seq_len_ptrs},
      {"cu_seqlens", m.cu_seqlens, want.cu_seqlens},
      {"kv_lens", m.kv_lens, want.kv_lens},
  };
  for (const auto& a : addrs) {
    if (a.got != base + a.want)
      r.fail(-1, -1, fmt::format("{} at offset {} from off, expected {}", a.name,
                                 static_cast<long long>(a.got - base), a.want));
    if ((a.got - base) % 8 != 0) r.fail(-1, -1, fmt::format("{} is not 8-byte aligned", a.name));
  }
  if (m.staged_bytes != want.staged_bytes)
    r.fail(-1, -1, fmt::format("staged_bytes is {}, expected {} (N={}, total_tokens={}, mrope={}): "
                               "h_state_ptrs at off+staged_bytes lands {} bytes {} the end of kv_lens",
                               m.staged_bytes, want.staged_bytes, batch.num_streams,
                               batch.total_tokens, mrope,
                               static_cast<long long>(m.staged_bytes) - static_cast<long long>(want.staged_bytes) < 0
                                   ? want.staged_bytes - m.staged_bytes : m.staged_bytes - want.staged_bytes,
                               m.staged_bytes < want.staged_bytes ? "before" : "after"));
  if (img.plan.h_state_ptrs != img.plan.off + m.staged_bytes)
    r.fail(-1, -1, "h_state_ptrs is not placed at off + staged_bytes");
  if (!mrope && (m.positions_h_stacked != m.positions_stacked || m.positions_w_stacked != m.positions_stacked))
    r.fail(-1, -1, "without MRoPE positions_h/positions_w must alias positions");
  if (mrope && (m.positions_h_stacked == m.positions_stacked || m.positions_w_stacked == m.positions_stacked))
    r.fail(-1, -1, "under MRoPE positions_h/positions_w must be their own arrays");
  const struct { const char* name; long long got, want; } scalars[] = {
      {"batch_size", m.batch_size, batch.num_streams},
      {"total_tokens", m.total_tokens, batch.total_tokens},
      {"chunk_len", m.chunk_len, batch.chunk_len},
      {"max_blocks_per_seq", m.max_blocks_per_seq, batch.max_blocks_per_seq},
  };
  for (const auto& s : scalars)
    if (s.got != s.want) r.fail(-1, -1, fmt::format("{} is {}, expected {}", s.name, s.got, s.want));
}

}  // namespace pb
