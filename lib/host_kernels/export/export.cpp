// export.cpp: the one exported symbol of libpb_kernels_host.so (only that
// library is built from this file; prefill-bench links the table directly).
#include "lib/host_kernels/host_kernels.h"

extern "C" PB_KERNEL_EXPORT const pb_kernel_table* pb_kernel_table_get(void) { return pb::host_kernel_table(); }
