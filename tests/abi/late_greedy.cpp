// late_greedy.cpp: a stand-in for a user's library that sizes its workspace from
// the device arrays: our host kernels under another name, whose workspace_bytes
// asks 1 MiB more once the metadata carries device addresses. Asked with every
// address 0 before the run (to hold the memory ceiling) it gives the smaller
// answer, so the run must stop naming both answers, not allocate past the estimate.
#include "tests/abi/host_variant.h"

namespace {
pb_status workspace_bytes(void* ctx, const pb_layer_shape* s, const pb_batched_attn_metadata* m, uint64_t* bytes,
                          char* msg, size_t len) {
  const pb_status st = pb::host_kernel_table()->workspace_bytes(ctx, s, m, bytes, msg, len);
  if (st == PB_OK && m->cu_seqlens) *bytes += 1ull << 20;
  return st;
}
}  // namespace

extern "C" PB_KERNEL_EXPORT const pb_kernel_table* pb_kernel_table_get(void) {
  return host_variant("late-greedy", [](pb_kernel_table& c) { c.workspace_bytes = workspace_bytes; });
}
