// foreign.cpp: a stand-in for a user's library: our host kernels under another
// name, which run no SSM layer (supports() refuses it) and have none of our
// kernel-internal fault switches (set_option refuses "fault"). A run through it
// must skip the SSM layers with this reason and never pass; a kernel fault must
// be reported as not applying to it.
#include <cstdio>
#include <cstring>

#include "tests/abi/host_variant.h"

namespace {
pb_status supports(void* ctx, const pb_layer_shape* s, char* why, size_t len) {
  if (s->kind == PB_LAYER_SSM) {
    std::snprintf(why, len, "foreign runs no SSM layer");
    return PB_ERR_UNSUPPORTED;
  }
  return pb::host_kernel_table()->supports(ctx, s, why, len);
}
pb_status set_option(void* ctx, const char* key, const char* value, char* msg, size_t len) {
  if (std::strcmp(key, "fault") == 0) {
    std::snprintf(msg, len, "foreign has no option 'fault'");
    return PB_ERR_UNSUPPORTED;
  }
  return pb::host_kernel_table()->set_option(ctx, key, value, msg, len);
}
}  // namespace

extern "C" PB_KERNEL_EXPORT const pb_kernel_table* pb_kernel_table_get(void) {
  return host_variant("foreign", [](pb_kernel_table& c) {
    c.supports = supports;
    c.set_option = set_option;
  });
}
