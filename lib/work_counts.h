// work_counts.h: the work each kernel must do (docs/DESIGN.md "Counting work"):
// attention FLOPs counted exactly per stream (FlashInfer's varlen rule), GDN
// as 4*T*H*d^2 (leaves out intra-chunk terms), bytes as the fewest a kernel
// must move (each input read once, each output written once).
#pragma once
#include <string>

#include "batch.h"
#include "metadata.h"

namespace pb {

struct WorkCount {
  double flops = 0;
  double bytes = 0;
};

WorkCount count_work(const std::string& kernel, const Batch& batch, const LayerShape& shape);

}  // namespace pb
