// run_suite.h: a list of scenarios run in order. A scenario that stops on an error
// ends the suite, but what completed is kept and the failing scenario becomes an
// error entry (RunResult::error), so the reports still say what ran.
#pragma once
#include <vector>

#include "run.h"

namespace pb {

struct SuiteResult {
  std::vector<RunResult> runs;  // completed runs, then at most one error entry
  int stop_code = 0;            // 0, or kExitBadInput / kExitInternal when a scenario stopped
};

// An InputError before any scenario completed is rethrown (nothing ran: plain
// exit 2); any other exception, std::bad_alloc included, becomes the error entry.
SuiteResult run_suite(const std::vector<Scenario>& scenarios, const RunOptions& options);

}  // namespace pb
