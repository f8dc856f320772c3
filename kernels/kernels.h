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

#include "kernels/attention_schedule.h"
#include "lib/bf16.h"
#include "lib/metadata.h"

namespace pb::kernels {

// Whether device 0 runs sm_90a code (wgmma, bulk copies): compute capability 9.0
// (attention_mma.cu). The Hopper kernels (attention_ws.cu, the split's scan) need it.
bool wgmma_available();

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
int attention_rows_per_tile(const LayerShape& shape);
// The work list of q-tiles of `rows_per_tile` packed rows (AttnWorkItem,
// kernels/attention_schedule.h), from the host copies of the metadata: streams in
// L2 sections of half this device's L2, each section's tiles longest (most keys)
// first (order_attention_tiles). Kernels re-read every bound from device memory.
std::vector<AttnWorkItem> plan_attention_tiles(const LayerShape& shape, int rows_per_tile,
                                               const std::vector<int32_t>& cu_seqlens_host,
                                               const std::vector<int32_t>& kv_lens_host);
// plan_attention_tiles with this kernel's attention_rows_per_tile().
std::vector<AttnWorkItem> plan_attention_work(const LayerShape& shape,
                                              const std::vector<int32_t>& cu_seqlens_host,
                                              const std::vector<int32_t>& kv_lens_host);
// One attention launch, the same struct for the fp32 and the tensor-core
// kernels (names as in BatchedAttnMetadata and the kernel ABI): the staged
// metadata's device addresses, the work list, the roped q, the paged caches.
struct AttnArgs {
  LayerShape shape;
  uint32_t batch_size = 0, total_tokens = 0, max_blocks_per_seq = 0;
  uint64_t cu_seqlens = 0, kv_lens = 0, block_table_ptrs = 0;  // device addresses
  const AttnWorkItem* work = nullptr;  // device work list
  int num_work = 0;
  const int32_t* schedule = nullptr;   // device: the persistent kernel's CTA lists (attention_ws.h)
  const bf16* q_rot = nullptr;    // [T, Hq, D]
  const bf16* k_cache = nullptr;  // [num_blocks, block_size, Hkv, D]
  const bf16* v_cache = nullptr;
  bf16* out = nullptr;            // [T, Hq, D]
  float scale = 0;
  bool causal_off_by_one = false;  // the fault: a token also sees the key after it
  int variant = -1;                // tensor-core kernel's variant (-1: its default); fp32 ignores it
};
// Paged varlen causal GQA attention: out[T, Hq, D] from q_rot and the paged caches.
cudaError_t launch_attention(cudaStream_t stream, const AttnArgs& args);

// ---- gdn_conv.cu ----------------------------------------------------------
// Depthwise causal conv1d + SiLU over x [T, conv_dim] into conv_out, reading
// each stream's conv_state [N, conv_dim, d_conv-1] before its first token, then
// (a second launch, after all reads) the new conv_state. `conv_state_bleed` is
// the fault: streams b > 0 read the previous stream's rows instead of their state.
// `impl`: window (each thread slides down a run of rows; where
// conv1d_window_supports, else row), stage (the window walk on 4 channels, x
// staged through shared memory by cp.async; where conv1d_stage_supports, else
// row) or row (one thread per row, the oracle); all give bit-identical outputs.
enum class Conv1dImpl { window, row, stage };
bool conv1d_window_supports(const LayerShape& shape);  // conv_dim % 8 == 0, d_conv 2..4
bool conv1d_stage_supports(const LayerShape& shape);   // conv_dim % 4 == 0, d_conv 2..4
cudaError_t launch_conv1d(cudaStream_t stream, const LayerShape& shape, uint32_t batch_size,
                          uint32_t total_tokens, uint64_t cu_seqlens, const bf16* x,
                          const bf16* conv_w, bf16* conv_state, bf16* conv_out,
                          bool conv_state_bleed, Conv1dImpl impl = Conv1dImpl::row);

// ---- gdn.cu ---------------------------------------------------------------
// One gated-delta-rule launch, the same struct for the token and the chunked
// kernels: S read and written through h_state_ptrs (u64 [N] at that address),
// q/k/v from conv_out, g/beta f32 [T, Hv], out bf16 [T, Hv, v_dim].
// `stream_order` (device, [N], may be null) lists the streams in launch order.
struct GdnArgs {
  LayerShape shape;
  uint32_t batch_size = 0, total_tokens = 0;
  uint64_t cu_seqlens = 0, h_state_ptrs = 0;  // device addresses
  const int32_t* stream_order = nullptr;
  const bf16* conv_out = nullptr;  // [T, conv_dim]
  const float* g = nullptr;        // [T, Hv]
  const float* beta = nullptr;     // [T, Hv]
  bf16* out = nullptr;             // [T, Hv, v_dim]
};
// Token by token in fp32, per (stream, v head).
cudaError_t launch_gdn(cudaStream_t stream, const GdnArgs& args);
// (kernels/gdn_chunked.h: the chunked form, same arguments; pb-cuda's
// default, this one the oracle under --impl gdn=token.)
// The streams by token count (host copy), longest first.
std::vector<int32_t> plan_gdn_order(const std::vector<int32_t>& cu_seqlens_host);

// ---- fill.cu --------------------------------------------------------------
// Fills `count` 16-bit words at `dst` with `value` (NaN poison of outputs).
cudaError_t launch_fill_u16(cudaStream_t stream, void* dst, size_t count, uint16_t value);
// Up to BakedI32::kMax int32 values copied into the kernel's parameters at launch
// and written to dst: what a captured graph replays is the launch's values.
struct BakedI32 {
  static constexpr int kMax = 512;
  int count;
  int32_t v[kMax];
};
cudaError_t launch_write_baked_i32(cudaStream_t stream, int32_t* dst, const int32_t* host, int count);

}  // namespace pb::kernels
