// metadata.h: what the engine passes to its batched layers (seed doc
// BatchedAttnMetadata): device addresses into the staged scratch block plus
// host scalars and host copies. Backends read only this and the buffers it
// points to. Addresses are u64: device pointers on CUDA, host pointers on host.
#pragma once
#include <cstdint>
#include <vector>

namespace pb {

struct BatchedAttnMetadata {
  uint64_t positions_stacked = 0;    // [total_tokens] u32 (T)
  uint64_t positions_h_stacked = 0;  // [total_tokens] u32, == positions_stacked without MRoPE
  uint64_t positions_w_stacked = 0;  // [total_tokens] u32, == positions_stacked without MRoPE
  uint64_t slot_stacked = 0;         // [total_tokens] i64
  uint64_t block_table_ptrs = 0;     // [batch_size] u64 -> i32 block ids
  uint64_t seq_len_ptrs = 0;         // [batch_size] u64 -> i32 seq_len
  uint32_t batch_size = 0;
  uint32_t chunk_len = 0;
  uint32_t total_tokens = 0;
  uint64_t cu_seqlens = 0;           // [batch_size + 1] i32
  std::vector<int32_t> cu_seqlens_host;
  uint64_t kv_lens = 0;              // [batch_size] i32
  std::vector<int32_t> kv_lens_host;
  uint32_t max_blocks_per_seq = 0;
  uint64_t staged_bytes = 0;
};

// Model shape and cache facts the layer calls take besides the metadata.
struct LayerShape {
  int num_q_heads = 0, num_kv_heads = 0, head_dim = 0, rotary_dim = 0;
  float rope_theta = 0;
  bool mrope = false, mrope_interleaved = false;
  int mrope_sections[3] = {0, 0, 0};
  int block_size = 0;
  int num_blocks = 0;     // physical blocks; an id outside [0, num_blocks) reads as poison
  int poison_block = 0;
  // Gated DeltaNet
  int num_k_heads = 0, num_v_heads = 0, k_dim = 0, v_dim = 0, d_conv = 0;
};

}  // namespace pb
