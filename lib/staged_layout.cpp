// staged_layout.cpp: offsets of the staged metadata block (docs/DESIGN.md) and the
// scratch plan around it. Pure arithmetic: the layout check recomputes this
// from the ground truth and compares it with what staging reported.
#include "staged_layout.h"

namespace pb {

StagedLayout compute_layout(int num_streams, int total_tokens, bool mrope) {
  StagedLayout L;
  L.num_streams = num_streams;
  L.total_tokens = total_tokens;
  L.mrope = mrope;
  const size_t N = static_cast<size_t>(num_streams), T = static_cast<size_t>(total_tokens);
  size_t o = 0;
  L.positions = o;
  o += round8(4 * T);
  if (mrope) {
    L.positions_h = o;
    o += round8(4 * T);
    L.positions_w = o;
    o += round8(4 * T);
  } else {
    L.positions_h = L.positions_w = L.positions;
  }
  L.slots = o;
  o += 8 * T;
  L.block_table_ptrs = o;
  o += 8 * N;
  L.seq_len_ptrs = o;
  o += 8 * N;
  L.cu_seqlens = o;
  o += round8(4 * (N + 1));
  L.kv_lens = o;
  o += round8(4 * N);
  L.staged_bytes = o;
  return L;
}

std::vector<FieldSpan> StagedLayout::fields() const {
  const size_t N = static_cast<size_t>(num_streams), T = static_cast<size_t>(total_tokens);
  return {
      {"positions", positions, round8(4 * T), T, 4, false},
      {"positions_h", positions_h, mrope ? round8(4 * T) : 0, T, 4, !mrope},
      {"positions_w", positions_w, mrope ? round8(4 * T) : 0, T, 4, !mrope},
      {"slots", slots, 8 * T, T, 8, false},
      {"block_table_ptrs", block_table_ptrs, 8 * N, N, 8, false},
      {"seq_len_ptrs", seq_len_ptrs, 8 * N, N, 8, false},
      {"cu_seqlens", cu_seqlens, round8(4 * (N + 1)), N + 1, 4, false},
      {"kv_lens", kv_lens, round8(4 * N), N, 4, false},
  };
}

ScratchPlan plan_scratch(const StagedLayout& layout, size_t capacity) {
  ScratchPlan p;
  p.off = kGuardBytes;
  p.h_state_ptrs = p.off + layout.staged_bytes;
  p.end_of_h_state = p.h_state_ptrs + 8 * static_cast<size_t>(layout.num_streams);
  p.capacity = capacity ? capacity : p.needed();
  return p;
}

}  // namespace pb
