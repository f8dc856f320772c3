// declares.cpp: a stand-in for a user's library that declares its GDN kernel's precision
// (the ABI's `precision` entry, docs/KERNEL-ABI.md): our host kernels under another name,
// declaring PB_TEST_PRECISION (a compile definition: one library per name). The harness
// must model a known name in the lp (its figures carry it) and refuse an unknown one
// before any kernel runs.
#include <cstring>

#include "tests/abi/host_variant.h"

namespace {
pb_status precision(void*, const pb_layer_shape*, const char* kernel, char* buf, size_t len) {
  const char* p = std::strcmp(kernel, "gdn") == 0 ? PB_TEST_PRECISION : "fp32";
  if (len == 0 || std::strlen(p) >= len) return PB_ERR_INVALID;
  std::memcpy(buf, p, std::strlen(p) + 1);
  return PB_OK;
}
}  // namespace

extern "C" PB_KERNEL_EXPORT const pb_kernel_table* pb_kernel_table_get(void) {
  return host_variant("declares", [](pb_kernel_table& c) { c.precision = precision; });
}
