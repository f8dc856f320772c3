// staged_layout.h: the byte layout of the staged batch metadata (docs/DESIGN.md,
// "The staged layout") and the scratch buffer around it.
// Invariants: every field starts at a multiple of 8 from `off`, every size is
// rounded up to 8; without MRoPE positions_h/positions_w alias positions and
// take no bytes; staged_bytes ends with kv_lens; h_state_ptrs sits at
// off + staged_bytes. Guard zones of canary words sit before `off` and after
// h_state_ptrs, and fill the rest of the scratch capacity.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace pb {

constexpr uint64_t kCanary64 = 0xC0DECAFE5EEDF00Dull;  // scratch guard word
constexpr uint32_t kCanary32 = 0xB10CCA9Eu;            // after each block table
constexpr size_t kGuardBytes = 64;                     // guard zone before `off` and after h_state_ptrs

inline size_t round8(size_t n) { return (n + 7) & ~size_t(7); }

struct FieldSpan {
  const char* name;   // docs/DESIGN.md name: "positions", "slots", ...
  size_t offset;      // from `off` (absolute scratch offset = off + offset)
  size_t bytes;       // rounded size (0 for an alias)
  size_t count;       // elements
  size_t elem_bytes;  // 4 or 8
  bool alias;         // positions_h / positions_w without MRoPE
};

struct StagedLayout {
  int num_streams = 0;
  int total_tokens = 0;
  bool mrope = false;
  size_t positions = 0, positions_h = 0, positions_w = 0, slots = 0,
         block_table_ptrs = 0, seq_len_ptrs = 0, cu_seqlens = 0, kv_lens = 0;
  size_t staged_bytes = 0;
  // Every field in layout order (aliases included, with bytes 0).
  std::vector<FieldSpan> fields() const;
};

StagedLayout compute_layout(int num_streams, int total_tokens, bool mrope);

// Where everything sits in the scratch buffer.
struct ScratchPlan {
  size_t off = 0;               // staging offset (after the front guard)
  size_t h_state_ptrs = 0;      // absolute offset of h_state_ptrs = off + staged_bytes
  size_t end_of_h_state = 0;    // absolute end of h_state_ptrs
  size_t capacity = 0;          // total scratch bytes
  size_t needed() const { return end_of_h_state + kGuardBytes; }
};

ScratchPlan plan_scratch(const StagedLayout& layout, size_t capacity /*0 = needed*/);

}  // namespace pb
