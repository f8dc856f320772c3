// check_result.cpp: check names and the finding recorder (findings are capped
// per check so a broken kernel cannot flood the report; the count is kept).
#include "check_result.h"

#include <fmt/format.h>

namespace pb {

namespace {
constexpr size_t kMaxFindings = 32;
}

const std::vector<std::string>& all_check_names() {
  static const std::vector<std::string> names = {
      kCheckLayout, kCheckScratchGuard, kCheckNumeric, kCheckCausalBound,
      kCheckKvWrite, kCheckState, kCheckPositions, kCheckDeterminism, kCheckMetadata, kCheckInvariance, kCheckBufferGuard};
  return names;
}

bool has_counts(const Figure& f) {
  return f.nonfinite || f.mismatched || f.never_written || f.read_poison;
}

std::string figure_counts(const Figure& f) {
  std::string s;
  const struct { long long n; const char* what; } counts[] = {
      {f.mismatched, "mismatched"}, {f.never_written, "never written"},
      {f.read_poison, "read poison"}, {f.nonfinite, "nonfinite"}};
  for (const auto& c : counts)
    if (c.n) s += fmt::format("{}{} {}", s.empty() ? "" : ", ", c.n, c.what);
  return s.empty() ? s : fmt::format("{} of {}", s, f.elements);
}

void CheckResult::fail(int layer, int stream, std::string message) {
  passed = false;
  ++finding_count;
  if (findings.size() < kMaxFindings) findings.push_back({layer, stream, std::move(message)});
}

}  // namespace pb
