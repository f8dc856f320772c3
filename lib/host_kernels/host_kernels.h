// host_kernels.h: our host (CPU) kernels behind the kernel ABI, the part of the
// CUDA kernels played in plain C++ at kernel precision (reference.h's math
// contract). Internal to the host kernel library: the harness reaches them only
// through host_kernel_table() (include/prefill_bench/kernel_abi.h).
// Invariants: every index read from the staged metadata is bounded (cu_seqlens
// made monotone inside [0, T], kv_lens inside the table, slots and block ids
// inside the cache); a bad value reads as NaN or skips work, never out of bounds.
#pragma once
#include <cstdint>
#include <string>

#include "prefill_bench/kernel_abi.h"

namespace pb::host_kernels {

// Fault switches (set_option("fault", name)) and variants of one context.
struct Options {
  bool causal_off_by_one = false;  // attention: a token also sees the key after it
  bool conv_state_bleed = false;   // conv1d: a stream's window reads the previous stream's rows
  bool gdn_state_race = false;     // gdn: a work item reads a neighbour's state mid-update
  bool grid_short_by_one = false;  // attention and gdn: the grid leaves out the last stream
  bool graph_baked_kv_len = false; // attention: kv_len from kv_lens_host (baked in at capture), not the device array
  bool batch_dependent_split = false;  // attention: the key tile follows the batch's total tokens
  bool out_row_past_end = false;   // attention and gdn: the last output row stored again one row further
  bool inputs_in_place = false;    // rope: roped q written into q; conv1d: activations written into x
};

// Thrown inside the library, turned into a pb_status at the ABI boundary.
struct KernelError {
  pb_status status;
  std::string message;
};

// Workspace layout: attention keeps q_rot and k_rot, ssm keeps conv_out.
uint64_t attn_workspace_bytes(const pb_attn_shape& s, uint32_t total_tokens);
uint64_t ssm_workspace_bytes(const pb_ssm_shape& s, uint32_t total_tokens);

// The key tile the batch-dependent-split fault uses for a batch of `total_tokens`.
int batch_dependent_key_tile(int total_tokens);

void rope(const Options& o, const pb_attn_layer_args& a);
void kv_write(const Options& o, const pb_attn_layer_args& a);
void attention(const Options& o, const pb_attn_layer_args& a);
void conv1d(const Options& o, const pb_ssm_layer_args& a);
void gdn(const Options& o, const pb_ssm_layer_args& a);

}  // namespace pb::host_kernels

namespace pb {
// The host kernel library's table (linked into prefill-bench; libpb_kernels_host.so
// exports it as pb_kernel_table_get).
const pb_kernel_table* host_kernel_table();
}  // namespace pb
