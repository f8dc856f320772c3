// verdict.cpp: the verdict rules of verdict.h in one place.
#include "verdict.h"

#include "run.h"

namespace pb {

Verdict verdict(const RunResult& r) {
  if (!r.error.empty()) return r.kernel_failed ? Verdict::failed : Verdict::error;
  // A layer the kernel library does not support was skipped: the checks the
  // scenario asked for could not see it, so the run is never passed.
  if (!r.skipped_layers.empty()) return Verdict::failed;
  bool any_ran = false;
  for (const CheckResult& c : r.checks) {
    if (!c.ran) continue;
    any_ran = true;
    if (!c.passed) return Verdict::failed;
  }
  if (requested_check_not_run(r)) return Verdict::not_checked;
  return any_ran ? Verdict::passed : Verdict::not_checked;
}

bool requested_check_not_run(const RunResult& r) {
  if (!r.graph.requested || !r.error.empty()) return false;
  const CheckResult* g = r.check(kCheckGraph);
  return !g || !g->ran;
}

Verdict verdict(const std::vector<RunResult>& runs) {
  bool failed = false, not_checked = runs.empty();
  for (const RunResult& r : runs) {
    const Verdict v = verdict(r);
    if (v == Verdict::error) return Verdict::error;
    failed = failed || v == Verdict::failed;
    not_checked = not_checked || v == Verdict::not_checked;
  }
  if (failed) return Verdict::failed;
  return not_checked ? Verdict::not_checked : Verdict::passed;
}

const char* verdict_name(Verdict v) {
  switch (v) {
    case Verdict::passed: return "passed";
    case Verdict::failed: return "failed";
    case Verdict::not_checked: return "not_checked";
    case Verdict::error: return "error";
  }
  return "error";
}

const char* verdict_label(Verdict v) {
  switch (v) {
    case Verdict::passed: return "PASS";
    case Verdict::failed: return "FAIL";
    case Verdict::not_checked: return "NOT CHECKED";
    case Verdict::error: return "ERROR";
  }
  return "ERROR";
}

int exit_code(const std::vector<RunResult>& runs) {
  bool failed = false;
  for (const RunResult& r : runs) {
    const Verdict v = verdict(r);
    if (v == Verdict::error) return kExitInternal;
    failed = failed || v == Verdict::failed || requested_check_not_run(r);
  }
  return failed ? kExitFailed : kExitOk;
}

}  // namespace pb
