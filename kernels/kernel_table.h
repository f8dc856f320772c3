// kernel_table.h: our CUDA kernel library's table (kernels/kernel_table.cu),
// the only way the harness reaches the CUDA kernels.
#pragma once
#include "prefill_bench/kernel_abi.h"

namespace pb {
const pb_kernel_table* cuda_kernel_table();
}  // namespace pb
