// check_plan.cpp: applicability of each check to a model, and the run's plan.
#include "check_plan.h"

#include <algorithm>

#include "batch.h"
#include "check_result.h"

namespace pb {

namespace {
bool has_layer(const Scenario& s, LayerKind k) { return std::count(s.layers.begin(), s.layers.end(), k) > 0; }
}  // namespace

std::string why_not_applicable(const Scenario& s, const std::string& check) {
  const bool attn = has_layer(s, LayerKind::attn), gdn = has_layer(s, LayerKind::gdn);
  if ((check == kCheckKvWrite || check == kCheckCausalBound) && !attn)
    return "no attention layer (layers.pattern holds only gdn)";
  if (check == kCheckState && !gdn) return "no gdn layer (layers.pattern holds only attn)";
  if (check == kCheckInvariance && resolve_streams(s).size() < 2)
    return "one stream: alone and reordered it is the same batch";
  return "";
}

void validate_checks(const Scenario& s) {
  std::vector<std::string> problems;
  for (size_t i = 0; i < s.checks.size(); ++i) {
    const std::string why = why_not_applicable(s, s.checks[i]);
    if (!why.empty())
      problems.push_back(s.error("checks[" + std::to_string(i) + "]",
                                 "check '" + s.checks[i] + "' cannot run on this model: " + why +
                                     "; remove it from the list")
                             .what());
  }
  if (problems.empty()) {
    bool any = false;
    for (const PlannedCheck& c : plan_checks(s, false)) any = any || c.run;
    if (!any) problems.push_back(s.error("checks", "no check applies to this model").what());
  }
  if (!problems.empty()) throw InputError(problems);
}

std::vector<PlannedCheck> plan_checks(const Scenario& s, bool profile) {
  std::vector<PlannedCheck> plan;
  for (const std::string& name : all_check_names()) {
    PlannedCheck c;
    c.name = name;
    const bool listed = s.checks.empty() || std::count(s.checks.begin(), s.checks.end(), name);
    const std::string na = why_not_applicable(s, name);
    if (!listed) c.run = false, c.why = "not in the scenario's checks list";
    else if (!na.empty()) c.run = false, c.why = "not applicable: " + na;
    else if (profile) c.run = false, c.why = "--profile: no checks";
    plan.push_back(c);
  }
  return plan;
}

}  // namespace pb
