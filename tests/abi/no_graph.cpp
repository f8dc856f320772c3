// no_graph.cpp: a stand-in for a user's library that does not say it can be
// captured: our host kernels under another name without PB_CAP_GRAPH. A --graph
// run through it must leave the graph check NOT CHECKED with that reason and
// never pass (exit 1), while every other check still runs.
#include "lib/host_kernels/host_kernels.h"

extern "C" PB_KERNEL_EXPORT const pb_kernel_table* pb_kernel_table_get(void) {
  static const pb_kernel_table t = [] {
    pb_kernel_table c = *pb::host_kernel_table();
    c.name = "no-graph";
    c.version = "0.1";
    c.capabilities &= ~PB_CAP_GRAPH;
    return c;
  }();
  return &t;
}
