// staging.h: packs one batch's metadata into the host image of the scratch
// buffer, exactly as the engine's stage_batched_attn_metadata does (docs/DESIGN.md),
// plus the table arena that the pointer arrays point into. The image is then
// uploaded with one copy. Staging faults (faults.h) are applied here.
#pragma once
#include <cstdint>
#include <vector>

#include "batch.h"
#include "faults.h"
#include "metadata.h"
#include "staged_layout.h"

namespace pb {

// Per-stream block tables and seq_len values live in their own buffer (the
// engine keeps them per stream). Each table holds exactly the stream's blocks,
// then one guard entry = poison_block, then a canary word (kCanary32). After the
// last table, max_blocks_per_seq + 1 poison entries keep an over-read inside.
struct TableArena {
  std::vector<size_t> table_offset;    // per stream, bytes from the arena base
  std::vector<size_t> seq_len_offset;  // per stream
  size_t bytes = 0;
};
TableArena plan_table_arena(const Batch& batch);

struct StagedImage {
  StagedLayout layout;            // as staged; layout.staged_bytes is what staging reports
  ScratchPlan plan;               // where the block sits in scratch (h_state_ptrs from the reported staged_bytes)
  std::vector<uint8_t> scratch;   // the whole scratch buffer, guards included (plan.capacity bytes)
  std::vector<uint8_t> arena;     // the table arena
  BatchedAttnMetadata meta;       // addresses resolved against the bases given
};

// `capacity` 0 means just what the layout needs. Staging faults alter the image
// and meta the way the modelled bug would.
StagedImage stage_batch(const Batch& batch, bool mrope, size_t capacity, uint64_t scratch_base,
                        uint64_t arena_base, FaultSet faults);

// The per-SSM-layer h_state pointer array: state_base(b) for each stream, with
// the h-state-ptr-swap fault applied.
std::vector<uint64_t> make_h_state_ptrs(const std::vector<uint64_t>& state_address, FaultSet faults);

}  // namespace pb
