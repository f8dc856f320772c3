// greedy.cpp: a stand-in for a user's library that asks for more workspace than
// any machine holds: our host kernels under another name, whose workspace_bytes
// adds a terabyte per layer. A run through it must be refused before anything is
// allocated or run (exit 2, naming the library's workspace), not die allocating.
#include <cstdio>

#include "tests/abi/host_variant.h"

namespace {
pb_status workspace_bytes(void* ctx, const pb_layer_shape* s, const pb_batched_attn_metadata* m, uint64_t* bytes,
                          char* msg, size_t len) {
  const pb_status st = pb::host_kernel_table()->workspace_bytes(ctx, s, m, bytes, msg, len);
  if (st == PB_OK) *bytes += 1ull << 40;
  return st;
}
}  // namespace

extern "C" PB_KERNEL_EXPORT const pb_kernel_table* pb_kernel_table_get(void) {
  return host_variant("greedy", [](pb_kernel_table& c) { c.workspace_bytes = workspace_bytes; });
}
