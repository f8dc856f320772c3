// expected_scratch.h: what the scratch buffer and the table arena must hold,
// encoded straight from the ground truth and the layout recomputation
// (compute_layout, plan_scratch, plan_table_arena), never from stage_batch's
// output: the scratch guard's expectation, so a value staged wrong is a finding.
#pragma once
#include <cstdint>
#include <vector>

#include "batch.h"

namespace pb {

// `capacity` bytes: canary words everywhere, the metadata block at `off` with
// every field from the truth (padding zero), table pointers and seq_len pointers
// into the arena at `arena_base`. h_state_ptrs are left as canaries (the caller
// writes each gdn layer's own).
std::vector<uint8_t> expected_scratch_image(const Batch& batch, bool mrope, size_t capacity,
                                            uint64_t arena_base);

// The table arena: each stream's block ids, the poison guard entry and a canary
// word; the poison slack; each stream's kv_len.
std::vector<uint8_t> expected_arena_image(const Batch& batch);

}  // namespace pb
