// check_plan.h: which checks a run of a scenario runs, decided before anything
// runs. A check the scenario lists must apply to its model (else a located input
// error); with no list, the checks that apply run and the others are reported
// "not applicable" without counting against PASS. At least one check runs.
#pragma once
#include <string>
#include <vector>

#include "scenario.h"

namespace pb {

struct PlannedCheck {
  std::string name;
  bool run = true;
  std::string why;  // why it does not run: not listed, not applicable, --profile
};

// "" when `check` applies to the scenario's model, else why not ("no attention layer").
std::string why_not_applicable(const Scenario& s, const std::string& check);

// Throws InputError (every problem, each located at checks[i]) when a listed check
// cannot run on this model, or when no check applies at all.
void validate_checks(const Scenario& s);

// The plan of a run: every check of all_check_names(), in that order. `profile`:
// none runs ("--profile: no checks").
std::vector<PlannedCheck> plan_checks(const Scenario& s, bool profile);

}  // namespace pb
