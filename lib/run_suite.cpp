// run_suite.cpp: the suite loop of run_suite.h.
#include "run_suite.h"

#include <fmt/format.h>

#include <cstdio>
#include <new>

#include "verdict.h"

namespace pb {

namespace {

RunResult error_entry(const Scenario& s, const RunOptions& opt, const std::string& why) {
  RunResult r;
  r.scenario_path = s.path;
  r.scenario_name = s.name;
  r.seed = s.seed;
  r.backend = opt.backend;
  r.error = why;
  return r;
}

}  // namespace

SuiteResult run_suite(const std::vector<Scenario>& scenarios, const RunOptions& opt) {
  SuiteResult out;
  for (const Scenario& s : scenarios) {
    try {
      out.runs.push_back(run_scenario(s, opt));
    } catch (const InputError& e) {
      if (out.runs.empty()) throw;  // nothing ran yet (e.g. --backend cuda without a device)
      out.runs.push_back(error_entry(s, opt, e.what()));
      out.stop_code = kExitBadInput;
    } catch (const KernelFailure& e) {
      // The library under test failed: this run fails. The suite stops, since a
      // device library's failure can leave its CUDA context unusable.
      out.runs.push_back(error_entry(s, opt, e.what()));
      out.runs.back().kernel_failed = true;
      out.stop_code = kExitFailed;
    } catch (const std::bad_alloc&) {
      out.runs.push_back(error_entry(s, opt, "out of memory (std::bad_alloc)"));
      out.stop_code = kExitInternal;
    } catch (const std::exception& e) {
      out.runs.push_back(error_entry(s, opt, e.what()));
      out.stop_code = kExitInternal;
    }
    if (out.stop_code) {
      fmt::print(stderr, "{}: {}: {}\n",
                 out.stop_code == kExitInternal ? "internal error"
                 : out.runs.back().kernel_failed ? "kernel library failed (the suite stops here)"
                                                 : "error",
                 s.path, out.runs.back().error);
      break;
    }
  }
  return out;
}

}  // namespace pb
