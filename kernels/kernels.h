// kernels.h: plain C++ launch wrappers for the batched prefill kernels, one
// launch per layer kernel for all streams. They take a cudaStream_t, raw device
// pointers, the staged metadata's device addresses (u64) and scalars, and the
// LayerShape; the kernels read cu_seqlens, kv_lens, slots, positions and block
// tables from device memory (the staged scratch), never from host copies.
// Every wrapper returns the launch's error (cudaGetLastError) and launches
// nothing when the shape is unsupported (cudaErrorInvalidValue).
#pragma once
#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <vector>

#include "lib/bf16.h"
#include "lib/metadata.h"

namespace pb::kernels {

// [begin, end): the device buffer a pointer read back from staged metadata
// (a block-table pointer, an h_state pointer) must point into, together with
// everything read through it. A pointer outside it is corrupt: the kernel
// skips that stream, whose output stays poisoned for the checks to report.
// {0, 0} (the default, for callers that own no such buffer) rejects only null
// and misaligned pointers.
struct AddressRange {
  uint64_t begin = 0, end = 0;
};

// ---- rope.cu --------------------------------------------------------------
// inv_freq[i] = rope_theta ^ (-2i / rotary_dim) in double, rounded to float:
// the table the rope kernel takes (device copy of rotary_dim / 2 floats).
std::vector<float> rope_inv_freq(const LayerShape& shape);
// q_rot/k_rot[r] = RoPE(q/k[r]) at positions (T, H, W)[r] for r < total_tokens.
cudaError_t launch_rope(cudaStream_t stream, const LayerShape& shape, uint32_t total_tokens,
                        uint64_t positions, uint64_t positions_h, uint64_t positions_w,
                        const float* inv_freq, const bf16* q, const bf16* k, bf16* q_rot,
                        bf16* k_rot);

// ---- kv_write.cu ----------------------------------------------------------
// k_cache[slots[r]] = k_rot[r], v_cache[slots[r]] = v[r] for every row whose
// slot lies in [0, num_blocks * block_size); other rows are skipped.
cudaError_t launch_kv_write(cudaStream_t stream, const LayerShape& shape, uint32_t total_tokens,
                            uint64_t slots, const bf16* k_rot, const bf16* v, bf16* k_cache,
                            bf16* v_cache);

// ---- attention.cu ---------------------------------------------------------
// (The tensor-core version, which the CUDA backend runs by default where the
// head dim allows, is kernels/attention_mma.h; this fp32 kernel is its oracle.)
// One unit of attention work: q-tile `tile` of stream `stream`. A q-tile is
// attention_rows_per_tile() packed rows times all q heads of one GQA group.
struct AttnWorkItem {
  int32_t stream;
  int32_t tile;
};
int attention_rows_per_tile(const LayerShape& shape);
// The work list of q-tiles of `rows_per_tile` packed rows, longest (most keys)
// first so the heaviest tiles start in the first wave, from the host copies of
// the metadata. Kernels re-read every bound from device memory.
std::vector<AttnWorkItem> plan_attention_tiles(int rows_per_tile,
                                               const std::vector<int32_t>& cu_seqlens_host,
                                               const std::vector<int32_t>& kv_lens_host);
// plan_attention_tiles with this kernel's attention_rows_per_tile().
std::vector<AttnWorkItem> plan_attention_work(const LayerShape& shape,
                                              const std::vector<int32_t>& cu_seqlens_host,
                                              const std::vector<int32_t>& kv_lens_host);
// Paged varlen causal GQA attention: out[T, Hq, D] from q_rot and the paged
// caches. `causal_off_by_one` is the fault: a token also sees the key after it.
// `tables`: the table arena every block_table_ptrs[b] must point into (with its
// max_blocks_per_seq + 1 entries); a stream whose pointer does not is skipped.
// (kernels/attention_mma.h does not take it yet: see docs/DESIGN.md.)
cudaError_t launch_attention(cudaStream_t stream, const LayerShape& shape, uint32_t batch_size,
                             uint32_t total_tokens, uint32_t max_blocks_per_seq,
                             uint64_t cu_seqlens, uint64_t kv_lens, uint64_t block_table_ptrs,
                             const AttnWorkItem* work, int num_work, const bf16* q_rot,
                             const bf16* k_cache, const bf16* v_cache, bf16* out, float scale,
                             bool causal_off_by_one, AddressRange tables = {});

// ---- gdn_conv.cu ----------------------------------------------------------
// Depthwise causal conv1d + SiLU over x [T, conv_dim] into conv_out, reading
// each stream's conv_state [N, conv_dim, d_conv-1] before its first token, then
// (a second launch, after all reads) the new conv_state. `conv_state_bleed` is
// the fault: streams b > 0 read the previous stream's rows instead of their state.
cudaError_t launch_conv1d(cudaStream_t stream, const LayerShape& shape, uint32_t batch_size,
                          uint32_t total_tokens, uint64_t cu_seqlens, const bf16* x,
                          const bf16* conv_w, bf16* conv_state, bf16* conv_out,
                          bool conv_state_bleed);

// ---- gdn.cu ---------------------------------------------------------------
// Gated delta rule, token by token in fp32, per (stream, v head): S read and
// written through h_state_ptrs (u64 [N] at that address), q/k/v from conv_out,
// g/beta f32 [T, Hv], out bf16 [T, Hv, v_dim]. `stream_order` (device, [N],
// may be null) lists the streams longest first. `states`: the h_state buffer
// every h_state_ptrs[b] must point into (with its whole [Hv, v_dim, k_dim]
// state); a stream whose pointer does not is skipped.
cudaError_t launch_gdn(cudaStream_t stream, const LayerShape& shape, uint32_t batch_size,
                       uint32_t total_tokens, uint64_t cu_seqlens, uint64_t h_state_ptrs,
                       const int32_t* stream_order, const bf16* conv_out, const float* g,
                       const float* beta, bf16* out, AddressRange states = {});
// (kernels/gdn_chunked.h: the chunked form, same arguments; the CUDA backend's
// default, this one the oracle under PB_GDN_KERNEL=token.)
// The streams by token count (host copy), longest first.
std::vector<int32_t> plan_gdn_order(const std::vector<int32_t>& cu_seqlens_host);

// ---- fill.cu --------------------------------------------------------------
// Fills `count` 16-bit words at `dst` with `value` (NaN poison of outputs).
cudaError_t launch_fill_u16(cudaStream_t stream, void* dst, size_t count, uint16_t value);

}  // namespace pb::kernels
