// check_layer.h: the checks of one layer's read-back outputs against the reference
// built from the truth (numeric, causal_bound, kv_write, positions on attention;
// numeric and state on gdn), shared by the eager run and --graph's second batch.
// Only the checks whose CheckResult says `ran` are filled.
#pragma once
#include <map>
#include <string>
#include <vector>

#include "backend.h"
#include "batch.h"
#include "check_result.h"
#include "scenario.h"

namespace pb {

void check_layer(const Scenario& s, const Batch& batch, const LayerShape& shape, int layer, Backend& backend,
                 const LayerOutputs& out, int ref_sample, const std::vector<int32_t>& staged_kv_lens,
                 std::map<std::string, CheckResult>& checks);

}  // namespace pb
