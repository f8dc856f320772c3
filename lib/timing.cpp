// timing.cpp: the timing policy (timing.h): resolving it, the statistics of a
// kernel's samples, and the stopping rule of a layer's sampling loop.
#include "timing.h"

#include <algorithm>
#include <cmath>

#include "backend.h"

namespace pb {

namespace {
// The noise of a kernel has settled when its last kSettleWindow readings span
// less than kSettleSpan of the current one, after at least kSettleMin samples:
// more samples would not bring it under the target (a kernel noisier than the
// target by nature stops here rather than at the budget).
constexpr int kSettleMin = 64;
constexpr size_t kSettleWindow = 32;
constexpr double kSettleSpan = 0.05;
// A bound on memory whatever the budget: samples per kernel per layer.
constexpr int kMaxSamples = 100000;

double steady_now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}
}  // namespace

TimingPolicy resolve_timing(int scenario_warmup, std::optional<int> scenario_repeat, const NoiseRule& scenario_noise,
                            bool scenario_l2_flush, std::optional<int> warmup, std::optional<int> repeat,
                            std::optional<bool> l2_flush, bool profile, bool host) {
  TimingPolicy p;
  p.noise = scenario_noise;
  p.l2_flush = l2_flush.value_or(scenario_l2_flush);
  p.warmup = std::max(0, warmup.value_or(host ? 0 : scenario_warmup));
  if (profile) {
    p.warmup = 1;
    p.fixed = 1;
    p.fixed_why = "profile";
  } else if (repeat) {
    p.fixed = std::max(1, *repeat);
    p.fixed_why = "--repeat";
  } else if (host) {
    p.fixed = 1;
    p.fixed_why = "host";
  } else if (scenario_repeat) {
    p.fixed = std::max(1, *scenario_repeat);
    p.fixed_why = "run.repeat";
  }
  return p;
}

double relative_stdev(const std::vector<double>& ms) {
  if (ms.size() < 2) return 0;
  double mean = 0;
  for (double x : ms) mean += x;
  mean /= static_cast<double>(ms.size());
  if (!(mean > 0)) return 0;
  double ss = 0;
  for (double x : ms) ss += (x - mean) * (x - mean);
  return std::sqrt(ss / static_cast<double>(ms.size() - 1)) / mean;
}

KernelTiming summarise(int layer, const std::string& kernel, std::vector<double> ms) {
  KernelTiming t;
  t.layer = layer;
  t.kernel = kernel;
  t.samples = static_cast<int>(ms.size());
  if (ms.empty()) return t;
  t.rel_stdev = relative_stdev(ms);
  std::sort(ms.begin(), ms.end());
  auto q = [&](double f) { return ms[static_cast<size_t>(f * (ms.size() - 1) + 0.5)]; };
  t.min_ms = ms.front();
  t.max_ms = ms.back();
  t.median_ms = ms.size() % 2 ? ms[ms.size() / 2] : 0.5 * (ms[ms.size() / 2 - 1] + ms[ms.size() / 2]);
  t.q1_ms = q(0.25);
  t.q3_ms = q(0.75);
  return t;
}

SampleLoop::SampleLoop(const TimingPolicy& policy, Clock now_s)
    : policy_(policy), now_(now_s ? std::move(now_s) : Clock(steady_now_s)) {
  start_s_ = now_();
}

bool SampleLoop::more() const { return stop_.empty(); }

void SampleLoop::record(const std::vector<KernelTime>& times) {
  const bool timed = runs_ >= policy_.warmup;
  ++runs_;
  if (!timed || !stop_.empty()) return;
  ++samples_;
  for (const KernelTime& t : times) {
    auto it = std::find_if(kernels_.begin(), kernels_.end(), [&](const Kernel& k) { return k.name == t.kernel; });
    if (it == kernels_.end()) it = kernels_.insert(kernels_.end(), Kernel{t.kernel, {}, {}, false, false});
    it->ms.push_back(t.ms);
  }
  decide();
}

void SampleLoop::decide() {
  if (policy_.fixed) {
    if (samples_ >= *policy_.fixed) stop_ = "fixed";
    return;
  }
  const NoiseRule& r = policy_.noise;
  bool all_met = true, all_done = true;
  for (Kernel& k : kernels_) {
    const double noise = relative_stdev(k.ms);
    k.noise.push_back(noise);
    k.met = k.ms.size() >= 2 && noise < r.target;
    if (!k.met && !k.settled && samples_ >= kSettleMin && k.noise.size() >= kSettleWindow && noise > 0) {
      const auto [lo, hi] = std::minmax_element(k.noise.end() - kSettleWindow, k.noise.end());
      k.settled = (*hi - *lo) / noise < kSettleSpan;
    }
    all_met = all_met && k.met;
    all_done = all_done && (k.met || k.settled);
  }
  if (samples_ < std::max(1, r.min_samples)) return;
  if (all_met) stop_ = "target";
  else if (all_done) stop_ = "settled";
  else if (now_() - start_s_ >= r.max_time_s || samples_ >= kMaxSamples) stop_ = "budget";
}

std::vector<KernelTiming> SampleLoop::summaries(int layer) const {
  std::vector<KernelTiming> out;
  for (const Kernel& k : kernels_) {
    KernelTiming t = summarise(layer, k.name, k.ms);
    if (policy_.fixed) {
      t.stop = "fixed";
    } else {
      t.noise_target = policy_.noise.target;
      t.stop = k.met ? "target" : k.settled ? "settled" : "budget";
    }
    out.push_back(std::move(t));
  }
  return out;
}

}  // namespace pb
