// timing_test.cpp: lib/timing's policy on synthetic sample streams (no timed
// test: the clock is a fake): the noise rule converges, the budget runs out,
// noise that settles above the target stops, --repeat forces N, min_samples
// holds, warm-ups are not samples; resolve_timing's precedence; and NVML's
// throttle decoding and its unavailable path (lib/gpu_clocks.h).
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "lib/backend.h"
#include "lib/gpu_clocks.h"
#include "lib/timing.h"

namespace pb {
namespace {

TimingPolicy noise_policy(double target = 0.01, int min_samples = 5, double max_time_s = 1.0, int warmup = 0) {
  TimingPolicy p;
  p.warmup = warmup;
  p.noise = {target, min_samples, max_time_s};
  return p;
}

// Runs the loop on a sample stream: `ms(i)` for "a" and `ms2(i)` for "b" on
// sample i; each run advances the fake clock by `step_s`.
template <class F, class G>
int drive(SampleLoop& loop, double& clock, double step_s, F ms, G ms2, int cap = 100000) {
  int runs = 0;
  while (loop.more() && runs < cap) {
    clock += step_s;
    loop.record({{"a", ms(runs)}, {"b", ms2(runs)}});
    ++runs;
  }
  return runs;
}

TEST(Timing, RelativeStdev) {
  EXPECT_EQ(relative_stdev({}), 0);
  EXPECT_EQ(relative_stdev({1.0}), 0);
  EXPECT_EQ(relative_stdev({2.0, 2.0, 2.0}), 0);
  // mean 2, sample stddev sqrt(((1)^2 + (1)^2) / 1) = sqrt(2)
  EXPECT_NEAR(relative_stdev({1.0, 3.0}), std::sqrt(2.0) / 2.0, 1e-12);
}

TEST(Timing, QuietKernelsStopAtTheTargetAfterMinSamples) {
  double clock = 0;
  SampleLoop loop(noise_policy(0.01, 5), [&] { return clock; });
  const int runs = drive(loop, clock, 0.001, [](int) { return 1.0; }, [](int i) { return 2.0 + 1e-4 * (i % 2); });
  EXPECT_EQ(runs, 5) << "spread is under the target from the start: min_samples decides";
  EXPECT_EQ(loop.stop(), "target");
  const std::vector<KernelTiming> t = loop.summaries(3);
  ASSERT_EQ(t.size(), 2u);
  EXPECT_EQ(t[0].kernel, "a");
  EXPECT_EQ(t[0].layer, 3);
  EXPECT_EQ(t[0].samples, 5);
  EXPECT_EQ(t[0].stop, "target");
  EXPECT_EQ(t[1].stop, "target");
  EXPECT_EQ(t[0].noise_target, 0.01);
  EXPECT_LT(t[1].rel_stdev, 0.01);
}

TEST(Timing, WorstKernelKeepsSamplingUntilItConverges) {
  // "b" is noisy for its first 6 samples (1 or 3 ms), then steady at 2 ms: the
  // layer goes on (about 150 samples) until b's spread over all of them is under 10%.
  double clock = 0;
  SampleLoop loop(noise_policy(0.10, 5), [&] { return clock; });
  const int runs = drive(loop, clock, 0.0001, [](int) { return 1.0; },
                         [](int i) { return i < 6 ? (i % 2 ? 3.0 : 1.0) : 2.0; });
  EXPECT_GT(runs, 100);
  EXPECT_EQ(loop.stop(), "target");
  const std::vector<KernelTiming> t = loop.summaries(0);
  EXPECT_LT(t[1].rel_stdev, 0.10);
  EXPECT_EQ(t[0].samples, runs);
  EXPECT_EQ(t[1].samples, runs);
}

TEST(Timing, BudgetRunsOutOnNoiseThatKeepsChanging) {
  // Noise that grows without settling: the time budget ends it, and the kernel
  // says "budget" (target not met) while the quiet one says "target".
  double clock = 0;
  SampleLoop loop(noise_policy(0.001, 5, 0.045), [&] { return clock; });
  const int runs = drive(loop, clock, 0.01, [](int) { return 1.0; }, [](int i) { return 1.0 + i * i; });
  EXPECT_EQ(loop.stop(), "budget");
  EXPECT_EQ(runs, 5);  // 5 x 10 ms passes the 45 ms budget just as min_samples is met
  const std::vector<KernelTiming> t = loop.summaries(0);
  EXPECT_EQ(t[0].stop, "target");
  EXPECT_EQ(t[1].stop, "budget");
  EXPECT_GT(t[1].rel_stdev, 0.001);
}

TEST(Timing, MinSamplesHoldEvenPastTheBudget) {
  double clock = 0;
  SampleLoop loop(noise_policy(0.001, 8, 0.001), [&] { return clock; });
  const int runs = drive(loop, clock, 1.0, [](int i) { return 1.0 + i; }, [](int) { return 1.0; });
  EXPECT_EQ(runs, 8);
  EXPECT_EQ(loop.stop(), "budget");
}

TEST(Timing, NoiseSettledAboveTheTargetStopsBeforeTheBudget) {
  // Alternating 1 / 1.2 ms: the spread converges to ~9.6%, above a 1% target;
  // once it stops changing the loop ends ("settled"), long before 1000 s.
  double clock = 0;
  SampleLoop loop(noise_policy(0.01, 5, 1000.0), [&] { return clock; });
  const int runs = drive(loop, clock, 0.001, [](int) { return 1.0; }, [](int i) { return i % 2 ? 1.2 : 1.0; });
  EXPECT_EQ(loop.stop(), "settled");
  EXPECT_GE(runs, 64);
  EXPECT_LT(runs, 1000);
  const std::vector<KernelTiming> t = loop.summaries(0);
  EXPECT_EQ(t[0].stop, "target");
  EXPECT_EQ(t[1].stop, "settled");
}

TEST(Timing, FixedCountForcesExactlyNWhateverTheNoise) {
  TimingPolicy p = noise_policy(1e-9, 1000, 0.0);
  p.fixed = 7;
  p.warmup = 2;
  double clock = 0;
  SampleLoop loop(p, [&] { return clock; });
  EXPECT_TRUE(loop.warming());
  const int runs = drive(loop, clock, 10.0, [](int i) { return 1.0 + i; }, [](int) { return 1.0; });
  EXPECT_EQ(runs, 9) << "2 warm-ups + exactly 7 samples";
  EXPECT_EQ(loop.samples(), 7);
  EXPECT_EQ(loop.stop(), "fixed");
  const std::vector<KernelTiming> t = loop.summaries(0);
  EXPECT_EQ(t[0].samples, 7);
  EXPECT_EQ(t[0].min_ms, 3.0) << "the warm-ups (1 and 2 ms) are not samples";
  EXPECT_EQ(t[0].stop, "fixed");
  EXPECT_EQ(t[0].noise_target, 0);
}

TEST(Timing, ResolvePrecedence) {
  const NoiseRule n{0.02, 4, 0.5};
  // cuda, nothing set: the noise rule, the scenario's warm-up and flush.
  TimingPolicy p = resolve_timing(3, std::nullopt, n, true, std::nullopt, std::nullopt, std::nullopt, false, false);
  EXPECT_FALSE(p.fixed);
  EXPECT_EQ(p.warmup, 3);
  EXPECT_TRUE(p.l2_flush);
  EXPECT_EQ(p.noise.min_samples, 4);
  // run.repeat fixes the count; --repeat wins over it; --l2 hot wins over run.l2_flush.
  p = resolve_timing(3, 6, n, true, std::nullopt, std::nullopt, false, false, false);
  EXPECT_EQ(p.fixed, 6);
  EXPECT_EQ(p.fixed_why, "run.repeat");
  EXPECT_FALSE(p.l2_flush);
  p = resolve_timing(3, 6, n, true, 0, 2, std::nullopt, false, false);
  EXPECT_EQ(p.fixed, 2);
  EXPECT_EQ(p.fixed_why, "--repeat");
  EXPECT_EQ(p.warmup, 0);
  // host: one run, no warm-up, unless asked.
  p = resolve_timing(3, 6, n, true, std::nullopt, std::nullopt, std::nullopt, false, true);
  EXPECT_EQ(p.fixed, 1);
  EXPECT_EQ(p.fixed_why, "host");
  EXPECT_EQ(p.warmup, 0);
  p = resolve_timing(3, std::nullopt, n, true, 1, 5, std::nullopt, false, true);
  EXPECT_EQ(p.fixed, 5);
  EXPECT_EQ(p.warmup, 1);
  // --profile: one warm run and one sample.
  p = resolve_timing(3, std::nullopt, n, true, std::nullopt, 9, std::nullopt, true, false);
  EXPECT_EQ(p.fixed, 1);
  EXPECT_EQ(p.warmup, 1);
  EXPECT_EQ(p.fixed_why, "profile");
}

TEST(GpuClocks, DecodesThrottleReasons) {
  EXPECT_TRUE(decode_throttle_reasons(0).empty());
  // Idle and application clocks are not throttling.
  EXPECT_TRUE(decode_throttle_reasons(0x1 | 0x2).empty());
  EXPECT_EQ(decode_throttle_reasons(0x4 | 0x40), (std::vector<std::string>{"sw_power_cap", "hw_thermal_slowdown"}));
  EXPECT_EQ(decode_throttle_reasons(0x8 | 0x20 | 0x80),
            (std::vector<std::string>{"hw_slowdown", "sw_thermal_slowdown", "hw_power_brake_slowdown"}));
  EXPECT_EQ(decode_throttle_reasons(uint64_t(1) << 40), (std::vector<std::string>{"bit40"}));
}

TEST(GpuClocks, UnavailableNvmlSaysWhy) {
  const ClockSnapshot c = read_gpu_clocks("libpb-no-such-nvml.so.1");
  EXPECT_FALSE(c.available);
  EXPECT_NE(c.unavailable_why.find("libpb-no-such-nvml.so.1"), std::string::npos) << c.unavailable_why;
  EXPECT_EQ(clocks_line(c).rfind("nvml: unavailable (", 0), 0u) << clocks_line(c);
}

TEST(GpuClocks, LineNamesThrottling) {
  ClockSnapshot c;
  c.available = true;
  c.sm_mhz = 1500;
  c.sm_max_mhz = 1980;
  c.mem_mhz = c.mem_max_mhz = 3201;
  c.temperature_c = 71;
  c.power_w = 690.4;
  EXPECT_EQ(clocks_line(c), "sm 1500/1980 MHz, mem 3201/3201 MHz, 71 C, 690 W");
  c.throttle = {"sw_power_cap"};
  EXPECT_EQ(clocks_line(c), "sm 1500/1980 MHz, mem 3201/3201 MHz, 71 C, 690 W, throttled: sw_power_cap");
}

}  // namespace
}  // namespace pb
