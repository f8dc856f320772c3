// fault_matrix_test.cpp: every fault on every shipped scenario, on the host
// backend and (where a GPU is present) the CUDA backend. Each case asserts the
// fault's named check fired with a finding that names a layer or stream, not
// only that the run failed. Where a fault cannot show on a scenario, the case
// is skipped with the reason (fault_exposure), never passed.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>

#include "lib/check_plan.h"
#include "lib/fault_exposure.h"
#include "lib/run.h"
#include "test_util.h"

namespace pb {
namespace {

struct Case {
  Fault fault;
  std::string scenario;  // path
  std::string backend;
};

// Readable in ctest's listing instead of gtest's byte dump.
void PrintTo(const Case& c, std::ostream* os) {
  *os << c.backend << " " << fault_info(c.fault).name << " " << std::filesystem::path(c.scenario).stem().string();
}

std::vector<std::string> shipped_scenarios() {
  std::vector<std::string> out;
  for (const auto& e : std::filesystem::directory_iterator(pb::test::source_dir() + "/scenarios"))
    if (e.path().extension() == ".yaml") out.push_back(e.path().string());
  std::sort(out.begin(), out.end());
  return out;
}

std::vector<Case> all_cases() {
  std::vector<Case> out;
  for (const char* backend : {"host", "cuda"})
    for (const FaultInfo& f : all_faults())
      for (const std::string& s : shipped_scenarios()) out.push_back({f.fault, s, backend});
  return out;
}

std::string case_name(const ::testing::TestParamInfo<Case>& info) {
  std::string n = std::string(info.param.backend) + "_" + fault_info(info.param.fault).name + "_" +
                  std::filesystem::path(info.param.scenario).stem().string();
  for (char& c : n)
    if (!isalnum(static_cast<unsigned char>(c))) c = '_';
  return n;
}

class FaultMatrix : public ::testing::TestWithParam<Case> {};

TEST_P(FaultMatrix, NamedCheckTrips) {
  const Case& c = GetParam();
  if (c.backend == "cuda") {
    std::string why;
    if (!cuda_device_available(&why)) GTEST_SKIP() << "skipped: no CUDA device (" << why << ")";
  }
  Scenario s = load_scenario(c.scenario);
  const FaultInfo& info = fault_info(c.fault);
  // invariance runs the layers again on sub-batches; only its own fault needs it,
  // so the other cases list every other check that applies (the matrix's cost,
  // multiplied under the sanitizers, stays what it was).
  if (std::string(info.must_trip) != kCheckInvariance && s.checks.empty())
    for (const PlannedCheck& p : plan_checks(s, false))
      if (p.run && p.name != kCheckInvariance) s.checks.push_back(p.name);
  const Exposure e = fault_exposure(c.fault, s, generate_batch(s));
  if (!e.can_show) GTEST_SKIP() << info.name << " cannot show on " << s.name << ": " << e.why_not;
  RunOptions opt;
  opt.backend = c.backend;
  opt.inject.add(c.fault);
  opt.repeat = 2;
  // A sampled attention reference: every fault's check (causal_bound, kv_write, state,
  // positions, layout, scratch_guard, metadata) reads all rows, the whole cache or the
  // state, so sampling only thins numeric's figures and keeps the matrix fast (and
  // affordable under the sanitizers, scripts/sanitize.sh).
  opt.ref_sample = 8;
  // A fault baked into the launch shows only on a graph replay of another batch.
  opt.graph = fault_needs_graph(c.fault);
  if (opt.graph) opt.repeat = 1;  // one eager run, one replay of each batch: affordable under the sanitizers
  RunResult r;
  try {
    r = run_scenario(s, opt);
  } catch (const InputError& e) {
    // A fault inside our kernels that this library does not have.
    if (fault_in_kernels(c.fault) && std::string(e.what()).find("does not apply to library") != std::string::npos)
      GTEST_SKIP() << e.what();
    throw;
  }
  EXPECT_FALSE(r.passed());
  const CheckResult* check = r.check(info.must_trip);
  ASSERT_NE(check, nullptr);
  ASSERT_TRUE(check->ran) << check->not_run_why;
  ASSERT_FALSE(check->passed) << info.name << " did not trip " << info.must_trip << " on " << s.name;
  ASSERT_FALSE(check->findings.empty());
  const Finding& f = check->findings.front();
  EXPECT_TRUE(f.layer >= 0 || f.stream >= 0 || c.fault == Fault::staged_bytes_undercount)
      << "finding names neither layer nor stream: " << f.message;
  EXPECT_FALSE(f.message.empty());
  if (c.fault == Fault::staged_bytes_undercount) {
    const CheckResult* guard = r.check(kCheckScratchGuard);
    ASSERT_TRUE(guard && guard->ran);
    EXPECT_FALSE(guard->passed) << "the undercount must also show in the scratch guard";
  }
}

INSTANTIATE_TEST_SUITE_P(Shipped, FaultMatrix, ::testing::ValuesIn(all_cases()), case_name);

}  // namespace
}  // namespace pb
