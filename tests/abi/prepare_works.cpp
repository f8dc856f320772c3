// prepare_works.cpp: a stand-in for a user's library that does a layer's work in
// prepare, which the harness runs outside timing: our host kernels under another
// name, whose prepare_attn / prepare_ssm run the whole layer and whose timed entries
// do nothing. Every output, cache and state comes out right and the timings are
// near zero; buffer_guard must name prepare's writes to out, the caches and states.
#include "tests/abi/host_variant.h"

namespace {
const pb_kernel_table& host() { return *pb::host_kernel_table(); }
pb_status prepare_attn(void* ctx, const pb_attn_layer_args* a, void* stream, char* msg, size_t len) {
  return host().attn_layer(ctx, a, stream, msg, len);
}
pb_status prepare_ssm(void* ctx, const pb_ssm_layer_args* a, void* stream, char* msg, size_t len) {
  return host().ssm_layer(ctx, a, stream, msg, len);
}
pb_status attn_nothing(void*, const pb_attn_layer_args*, void*, char*, size_t) { return PB_OK; }
pb_status ssm_nothing(void*, const pb_ssm_layer_args*, void*, char*, size_t) { return PB_OK; }
}  // namespace

extern "C" PB_KERNEL_EXPORT const pb_kernel_table* pb_kernel_table_get(void) {
  return host_variant("prepare-works", [](pb_kernel_table& c) {
    c.prepare_attn = prepare_attn;
    c.prepare_ssm = prepare_ssm;
    c.attn_layer = c.rope = c.kv_write = c.attention = attn_nothing;
    c.ssm_layer = c.conv1d = c.gdn = ssm_nothing;
  });
}
