// verdict.h: the one verdict of a run and of a suite, used by the table, the JSON,
// JUnit, sweep and the exit code. PASS only when at least one check ran and every
// check that ran passed; a run with no check is "not checked", never passed.
#pragma once
#include <string>
#include <vector>

namespace pb {

struct RunResult;

enum class Verdict {
  passed,       // >= 1 check ran, every check that ran passed
  failed,       // a check ran and failed, or a layer was skipped (the library does not support it)
  not_checked,  // no check ran (run --profile): did what was asked, proves nothing
  error,        // the run stopped on an error (RunResult::error) before its checks ended
};

Verdict verdict(const RunResult& run);
// A check the run was asked for could not run: --graph on a library without
// PB_CAP_GRAPH. Such a run is never passed: verdict not_checked, exit 1.
bool requested_check_not_run(const RunResult& run);
// The suite: error if any run errs, else failed if any failed, else not_checked if
// any run was not checked, else passed (an empty suite is not_checked).
Verdict verdict(const std::vector<RunResult>& runs);

// "passed", "failed", "not_checked", "error" (the JSON enum).
const char* verdict_name(Verdict v);
// "PASS", "FAIL", "NOT CHECKED", "ERROR" (the table).
const char* verdict_label(Verdict v);

// The exit codes of the whole tool, one meaning each, the same for every subcommand.
constexpr int kExitOk = 0;        // every requested check ran and passed (or nothing to check was asked)
constexpr int kExitFailed = 1;    // a check failed (or a requested one could not run), or compare found a regression
constexpr int kExitBadInput = 2;  // bad input, usage or I/O (an unwritable output included)
constexpr int kExitInternal = 3;  // an internal error (an unexpected exception, out of memory)

// The exit code of a finished suite: 3 when a run hit an internal error, 1 when a
// check failed or a requested check could not run, else 0 (a profile run that completed is 0: it did what was asked).
int exit_code(const std::vector<RunResult>& runs);

}  // namespace pb
