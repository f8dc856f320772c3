// sub_batch.h: a Batch holding some of another batch's streams, in a given order,
// built from the ground truth (never from staged bytes): each stream keeps its
// chunk start, positions, physical blocks, prior KV and states; rows are repacked.
// Invariant: the cache geometry (num_blocks, poison_block) is the original's.
#pragma once
#include <vector>

#include "batch.h"

namespace pb {

// Streams `order` of `batch` (indices into batch.streams, each at most once), in
// that order. Throws std::invalid_argument on an empty, repeated or out-of-range index.
Batch sub_batch(const Batch& batch, const std::vector<int>& order);

}  // namespace pb
