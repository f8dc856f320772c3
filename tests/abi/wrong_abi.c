/* wrong_abi.c: a kernel library built against a future, incompatible ABI
 * (abi_version PB_KERNEL_ABI_VERSION + 1): --kernels must refuse it with exit 2. */
#include <string.h>

#include "prefill_bench/kernel_abi.h"

const pb_kernel_table* pb_kernel_table_get(void) {
  static pb_kernel_table t;
  memset(&t, 0, sizeof t);
  t.abi_version = PB_KERNEL_ABI_VERSION + 1;
  t.struct_size = sizeof t;
  t.name = "from-the-future";
  t.version = "9.0";
  t.device = PB_DEVICE_HOST;
  return &t;
}
