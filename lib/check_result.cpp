// check_result.cpp: check names and the finding recorder (findings are capped
// per check so a broken kernel cannot flood the report; the count is kept).
#include "check_result.h"

namespace pb {

namespace {
constexpr size_t kMaxFindings = 32;
}

const std::vector<std::string>& all_check_names() {
  static const std::vector<std::string> names = {
      kCheckLayout, kCheckScratchGuard, kCheckNumeric, kCheckCausalBound,
      kCheckKvWrite, kCheckState, kCheckPositions, kCheckDeterminism};
  return names;
}

void CheckResult::fail(int layer, int stream, std::string message) {
  passed = false;
  ++finding_count;
  if (findings.size() < kMaxFindings) findings.push_back({layer, stream, std::move(message)});
}

}  // namespace pb
