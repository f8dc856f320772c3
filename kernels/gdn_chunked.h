// gdn_chunked.h: the chunked (WY / UT-transform) Gated DeltaNet prefill kernel,
// same contract and arguments as launch_gdn (kernels/kernels.h), which stays the
// oracle (PB_GDN_KERNEL=token in the CUDA backend).
// Invariants: reference/reference.h's math with an fp32 state, fp32 sums and
// tf32 (tensor-core) operands in the chunk's matrix products (the .cu says why
// that keeps the tolerance); S f32 read from and written back to h_state_ptrs[b]
// as [Hv, v_dim, k_dim]; q, k L2-normalised with eps 1e-6 inside the sqrt; out
// rounded to bf16. Shapes: k_dim <= 128, k_dim % 8 == 0, v_dim % 8 == 0 (other
// shapes: cudaErrorInvalidValue, the caller falls back to the token kernel).
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/kernels.h"
#include "lib/bf16.h"
#include "lib/metadata.h"

namespace pb::kernels {

// True when launch_gdn_chunked takes this shape.
bool gdn_chunked_supports(const LayerShape& shape);

cudaError_t launch_gdn_chunked(cudaStream_t stream, const LayerShape& shape, uint32_t batch_size,
                               uint32_t total_tokens, uint64_t cu_seqlens, uint64_t h_state_ptrs,
                               const int32_t* stream_order, const bf16* conv_out, const float* g,
                               const float* beta, bf16* out, AddressRange states = {});

}  // namespace pb::kernels
