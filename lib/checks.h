// checks.h: the checks of docs/DESIGN.md ("The checks"). Each takes the ground truth (Batch, the
// reference) and what the backend produced or staged, and fills a CheckResult:
// figures per stream and layer, findings naming layer, stream, expected and
// found. The checks never trust staged metadata for the truth.
#pragma once
#include <vector>

#include "backend.h"
#include "batch.h"
#include "check_result.h"
#include "reference/reference.h"
#include "scenario.h"
#include "staging.h"

namespace pb {

// layout: offsets, alignment and staged_bytes against compute_layout() from the
// truth; H/W alias T without MRoPE; scalar fields (batch_size, total_tokens,
// chunk_len, max_blocks_per_seq) against the batch.
void check_layout(const Batch& batch, bool mrope, const StagedImage& img, uint64_t scratch_base,
                  CheckResult& r);

// metadata: every staged array decoded from the read-back scratch and arena at
// the metadata's addresses (positions T/H/W, slots, block_table_ptrs and the
// tables they point to, guard entries, seq_len_ptrs and their values,
// cu_seqlens, kv_lens), the host copies and the scalars, against the truth.
// Findings name the field, stream and element; no address is read outside the buffers.
void check_metadata(const Batch& batch, const BatchedAttnMetadata& meta, const std::vector<uint8_t>& scratch,
                    uint64_t scratch_base, const std::vector<uint8_t>& arena, uint64_t arena_base,
                    CheckResult& r);

// scratch_guard: the scratch buffer read back after a layer equals `expected`
// (expected_scratch_image: canaries, the metadata from the truth, the layer's
// h_state_ptrs at off + true staged_bytes) and the table arena equals the truth's
// (expected_arena_image); names the region whose bytes differ and whether the
// staged image (`img`) already held them (staged wrong) or the layer changed them.
// `before`: the scratch and arena as read back before the layer's first run (null:
// not known); a byte that held the same value then was changed by an earlier layer
// and reported there. `when` is appended to each finding.
struct ScratchBefore {
  const std::vector<uint8_t>* scratch = nullptr;
  const std::vector<uint8_t>* arena = nullptr;
};
void check_scratch_guard(const Batch& batch, bool mrope, const StagedImage& img,
                         const std::vector<uint8_t>& expected_scratch,
                         const std::vector<uint8_t>& scratch, const std::vector<uint8_t>& arena,
                         int layer, CheckResult& r, const ScratchBefore& before = {}, const std::string& when = "");

// buffer_guard: after a layer's runs, its read-only inputs (`now`, read back)
// equal the truth bit for bit, the metadata's host copies the library was given
// (`given`, as it holds them now) equal the staged ones (`staged`), and every guard
// zone (Backend::read_guards) still holds kBufferGuardBits. Findings name the input
// and stream, the host copy and entry, or the buffer, the side and how far outside
// it the bytes changed.
void check_buffer_guard(const Batch& batch, int layer, const LayerInputs& now, const BatchedAttnMetadata& staged,
                        const BatchedAttnMetadata& given, const std::vector<GuardZones>& guards, CheckResult& r);

// buffer_guard, prepare's contract: prepare (untimed) may write only its workspace.
// `before` is the layer's outputs, caches and states as reset_layer leaves them,
// `after` the same after prepare alone (Backend::prepare_only). A library doing a
// layer's work in prepare would be timed without it; the finding names each buffer
// prepare changed, how many elements and the first one.
void check_prepare_writes(int layer, const char* entry, const LayerOutputs& before, const LayerOutputs& after,
                          CheckResult& r);

// positions: T/H/W read at the staged addresses equal the truth per token.
void check_positions(const Batch& batch, bool mrope, const StagedImage& img,
                     const std::vector<uint8_t>& scratch, uint64_t scratch_base, CheckResult& r);

// positions, as applied: the roped k each attention layer stored at a token's
// own slot, split by RoPE section (T, H, W under MRoPE; T alone without), against
// the rotation by that section's positions. Names the section whose positions are
// wrong and which positions it matches instead. Tokens whose slot does not hold
// their v are left to kv_write.
void check_rope_sections(const Batch& batch, const LayerShape& shape, int layer, const LayerOutputs& out,
                         CheckResult& r);

// numeric (attention output) and causal_bound (NaN poison reached a stream's
// output). `staged_kv_lens` (what the kernel was given, read back from scratch;
// empty when unreadable) only sharpens the causal finding's explanation.
void check_attention(const Batch& batch, const LayerShape& shape, int layer,
                     const AttnReference& ref, const LayerOutputs& out, const Tolerance& tol,
                     const std::vector<int32_t>& staged_kv_lens, CheckResult& numeric,
                     CheckResult& causal);
// kv_write: the whole cache against the expected cache.
void check_kv_write(const Batch& batch, const LayerShape& shape, int layer,
                    const AttnReference& ref, const LayerOutputs& out, CheckResult& r);
// numeric (gdn output) and state (h_state, conv_state per stream).
void check_gdn(const Batch& batch, const LayerShape& shape, int layer, const GdnReference& ref,
               const LayerOutputs& out, const Tolerance& tol, CheckResult& numeric,
               CheckResult& state);
// determinism: two runs of one layer are bit-identical.
// `which` names the two runs in the findings; with `batch`, out's first differing
// element is named with its token row and stream.
void check_determinism(int layer, const LayerOutputs& first, const LayerOutputs& again, CheckResult& r,
                       const std::string& which = "between two runs", const Batch* batch = nullptr);

}  // namespace pb
