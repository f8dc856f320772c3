// checks_test.cpp: the checks no injected fault reaches directly: determinism
// (a race is not something we can inject on purpose in a kernel, so the check
// itself is shown to fail on a moving result and pass on a repeated one) and
// the numeric rule's edges (NaN always fails; the limit tracks the
// same-precision reference's own error).
#include <gtest/gtest.h>

#include <cmath>

#include "lib/checks.h"
#include "lib/diff_stats.h"

namespace pb {
namespace {

LayerOutputs outputs(float x) {
  LayerOutputs o;
  o.out = {to_bf16(1.0f), to_bf16(x)};
  o.h_state = {{0.5f, x}};
  return o;
}

TEST(Determinism, PassesOnIdenticalRuns) {
  CheckResult r;
  check_determinism(3, outputs(2.0f), outputs(2.0f), r);
  EXPECT_TRUE(r.passed);
}

TEST(Determinism, FailsOnAMovingResultAndNamesIt) {
  CheckResult r;
  check_determinism(3, outputs(2.0f), outputs(2.015625f), r);
  ASSERT_FALSE(r.passed);
  EXPECT_EQ(r.findings[0].layer, 3);
  EXPECT_NE(r.findings[0].message.find("out: 1 element(s) differ"), std::string::npos);
  EXPECT_NE(r.findings[1].message.find("stream 0 h_state"), std::string::npos);
}

TEST(NumericRule, LimitIsFactorTimesLowPrecisionDriftPlusAtol) {
  DiffStats d;
  d.add(1.01, 1.0, 1.004);  // backend off by 0.01, same-precision reference by 0.004
  const Figure f = d.figure(0, 0, "out", Tolerance{2.0, 1e-5});
  EXPECT_NEAR(f.limit, 0.00801, 1e-12);
  EXPECT_FALSE(f.pass);
  const Figure g = d.figure(0, 0, "out", Tolerance{3.0, 1e-5});
  EXPECT_TRUE(g.pass);
}

TEST(NumericRule, NanAlwaysFails) {
  DiffStats d;
  d.add(std::nan(""), 1.0, 1.0);
  d.add(1.0, 1.0, 1.0);
  const Figure f = d.figure(0, 0, "out", Tolerance{1e9, 1e9});
  EXPECT_EQ(f.nonfinite, 1);
  EXPECT_FALSE(f.pass);
}

}  // namespace
}  // namespace pb
