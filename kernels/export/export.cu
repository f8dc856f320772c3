// export.cu: the one exported symbol of libpb_kernels_cuda.so (only that
// library is built from this file; prefill-bench links the table directly).
#include "kernels/kernel_table.h"

extern "C" PB_KERNEL_EXPORT const pb_kernel_table* pb_kernel_table_get(void) { return pb::cuda_kernel_table(); }
