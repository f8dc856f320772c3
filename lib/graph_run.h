// graph_run.h: the second batch of a --graph run (docs/DESIGN.md "Graph mode").
// Batch 1 was captured and replayed by run_scenario; here the bucket's second
// batch is staged into the SAME scratch and arena, its inputs uploaded into the
// SAME buffers, and every captured layer is prepared on its metadata and
// replayed. Every check batch 1 ran (but determinism: one replay) runs on it
// against its own reference; its failures become the graph check's findings.
#pragma once
#include <map>
#include <string>
#include <vector>

#include "backend.h"
#include "check_result.h"
#include "run.h"

namespace pb {

void run_graph_second_batch(const Scenario& s, const Batch& batch2, Backend& backend, size_t capacity,
                            FaultSet faults, int ref_sample, const std::map<std::string, CheckResult>& plan,
                            const std::vector<bool>& captured, CheckResult& graph);

// The graph check's verdict from the second batch's checks: each finding and
// figure of a check that ran, tagged "batch 2 [stream N] <check>" and filed under
// no stream (N indexes batch 2's streams, the report's streams are batch 1's);
// fails when one failed.
void fold_second_batch(const std::map<std::string, CheckResult>& second, CheckResult& graph);

}  // namespace pb
