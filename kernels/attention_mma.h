// attention_mma.h: the tensor-core versions of the paged varlen causal GQA
// attention of kernels.h: version 2 (FlashAttention-2 style, bf16 mma.sync
// m16n8k16) and version 3 (Hopper wgmma, the default on compute capability
// 9.0). Same math contract and the same invariants as launch_attention (the
// fp32 kernel, kept as their oracle): every bound from device memory, masked
// keys contribute nothing, bad block ids / table indices read as NaN without a
// dereference. Their q-tiles are larger (128 query vectors), so they have
// their own work list.
#pragma once
#include <cuda_runtime_api.h>

#include <cstdint>
#include <vector>

#include "kernels/kernels.h"

namespace pb::kernels {

// Head dims with a traits struct (64, 128, 256) and a valid GQA shape.
bool attention_mma_supported(const LayerShape& shape);
// Packed rows per q-tile: 128 query vectors / q heads of a GQA group (capped).
int attention_mma_rows_per_tile(const LayerShape& shape);
// The work list (plan_attention_tiles: L2 sections, longest first in each) for this
// kernel's q-tiles, from host copies.
std::vector<AttnWorkItem> plan_attention_mma_work(const LayerShape& shape,
                                                  const std::vector<int32_t>& cu_seqlens_host,
                                                  const std::vector<int32_t>& kv_lens_host);
// Same arguments and semantics as launch_attention; `work` from plan_attention_mma_work.
// `args.variant` picks a tuning variant (-1: attention_mma_default_variant(head_dim);
// attention_mma_variants() lists them) so a benchmark can compare them in one
// run. Variants >= kFirstWgmmaVariant are the Hopper wgmma kernel (version 3):
// cudaErrorInvalidDeviceFunction on a device that is not compute capability 9.0.
cudaError_t launch_attention_mma(cudaStream_t stream, const AttnArgs& args);

constexpr int kFirstWgmmaVariant = 8;

// The variant launch_attention_mma runs for variant -1.
int attention_mma_default_variant(int head_dim);

// One tuning variant of one head dim, as compiled.
struct AttnMmaVariant {
  int head_dim = 0, variant = 0;
  bool wgmma = false;          // version 3 (wgmma) rather than version 2 (mma.sync)
  const char* name = "";       // "N64.S2.Qreg"
  int block_m = 0, block_n = 0, stages = 0;
  bool q_in_regs = false;
  int threads = 0;
  size_t smem_bytes = 0;       // dynamic shared memory per CTA
  int regs = 0;                // registers per thread (cudaFuncGetAttributes)
  size_t local_bytes = 0;      // stack frame / spills
  int ctas_per_sm = 0;         // occupancy
};
// Variants compiled for `head_dim` that this device runs (empty when unsupported);
// queries the device.
std::vector<AttnMmaVariant> attention_mma_variants(int head_dim);

}  // namespace pb::kernels
