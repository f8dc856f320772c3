// host_variant.h: the table of a stand-in user library in the ABI tests: our host
// kernels' table under another name (version "0.1"), with `tweak` applied to its
// entries once. Each library calls it from its pb_kernel_table_get.
#pragma once
#include "lib/host_kernels/host_kernels.h"

template <class F>
const pb_kernel_table* host_variant(const char* name, F tweak) {
  static const pb_kernel_table t = [&] {
    pb_kernel_table c = *pb::host_kernel_table();
    c.name = name;
    c.version = "0.1";
    tweak(c);
    return c;
  }();
  return &t;
}
