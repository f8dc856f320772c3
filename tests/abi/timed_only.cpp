// timed_only.cpp: a stand-in for a user's library that computes otherwise once it
// is being timed: our host kernels under another name, whose attention flips the
// lowest bit of out's first element on every normal-order call after the first.
// The checked run (the first) and the determinism rerun (another order) are right;
// the last timed run is not, and determinism must say so.
#include "tests/abi/host_variant.h"

namespace {
pb_status attention(void* ctx, const pb_attn_layer_args* a, void* stream, char* msg, size_t len) {
  static int normal_calls = 0;
  const pb_status st = pb::host_kernel_table()->attention(ctx, a, stream, msg, len);
  if (st == PB_OK && a->schedule == 0 && normal_calls++ > 0) reinterpret_cast<uint16_t*>(a->out.data)[0] ^= 1;
  return st;
}
}  // namespace

extern "C" PB_KERNEL_EXPORT const pb_kernel_table* pb_kernel_table_get(void) {
  return host_variant("timed-only", [](pb_kernel_table& c) { c.attention = attention; });
}
