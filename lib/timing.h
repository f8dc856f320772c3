// timing.h: the one place that decides how a layer is timed (after nvbench):
// warm-up runs, then samples until every kernel's relative spread is under the
// noise target, or its noise has settled above it, or the time budget is spent;
// a fixed count (--repeat N, run.repeat, the host's one run) overrides the rule.
// L2 is flushed before each timed entry in the cold mode. run.cpp only asks
// more() and hands record() each run's times; this file owns the statistics.
#pragma once
#include <chrono>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace pb {

struct KernelTime;  // backend.h: one kernel's elapsed time in one run

// The stopping rule on noise (scenario `run.noise`).
struct NoiseRule {
  double target = 0.005;  // relative standard deviation of the samples (stddev / mean)
  int min_samples = 10;   // never fewer timed samples than this
  double max_time_s = 1.0;  // wall-clock budget per layer, warm-up included
};

// How one scenario's layers are timed, resolved from the scenario, the command
// line and the backend (resolve_timing).
struct TimingPolicy {
  int warmup = 2;
  std::optional<int> fixed;  // exactly this many timed samples; unset: the noise rule
  std::string fixed_why;     // "--repeat", "run.repeat", "host", "profile"
  NoiseRule noise;
  bool l2_flush = true;      // asked for: flush L2 before each timed entry (cold)
};

// `l2_flush`, `warmup`, `repeat`: the command line's overrides (unset: the
// scenario's). On the host backend, unless --repeat/--warmup say otherwise, one
// timed run and no warm-up: the host clock on a shared CPU is no timing signal.
TimingPolicy resolve_timing(int scenario_warmup, std::optional<int> scenario_repeat, const NoiseRule& scenario_noise,
                            bool scenario_l2_flush, std::optional<int> warmup, std::optional<int> repeat,
                            std::optional<bool> l2_flush, bool profile, bool host);

// Timing of one kernel of one layer over its samples (CUDA events on cuda,
// the host clock on host).
struct KernelTiming {
  int layer = 0;
  std::string kernel;
  int samples = 0;
  double median_ms = 0, min_ms = 0, max_ms = 0, q1_ms = 0, q3_ms = 0;
  double rel_stdev = 0;       // stddev / mean of the samples; 0 with fewer than 2
  // Why sampling stopped, for this kernel: "fixed" (a set count), "target" (its
  // spread is under the noise target), "settled" (its spread stopped changing above
  // the target), "budget" (the time budget ran out first).
  std::string stop = "fixed";
  double noise_target = 0;    // the target it was held to; 0 under "fixed"
  double flops = 0;  // counted as docs/DESIGN.md "Counting work"
  double bytes = 0;  // the fewest bytes the kernel must move
  double tflops() const { return median_ms > 0 ? flops / (median_ms * 1e9) : 0; }
  double gbps() const { return median_ms > 0 ? bytes / (median_ms * 1e6) : 0; }
};

// Relative standard deviation (sample stddev over mean); 0 for fewer than two
// samples or a zero mean.
double relative_stdev(const std::vector<double>& ms);
// Median, quartiles, min and max of `ms`; the stop fields are left as given.
KernelTiming summarise(int layer, const std::string& kernel, std::vector<double> ms);

// The sampling loop of one layer. Every run goes through record(); the first
// `warmup` runs are not timed. The clock is injectable for tests (seconds).
class SampleLoop {
 public:
  using Clock = std::function<double()>;
  explicit SampleLoop(const TimingPolicy& policy, Clock now_s = {});
  bool more() const;            // take another run?
  bool warming() const { return runs_ < policy_.warmup; }  // the next run is a warm-up
  void record(const std::vector<KernelTime>& times);
  int samples() const { return samples_; }
  std::string stop() const { return stop_; }  // "" while more()
  // One entry per kernel seen, in first-seen order, with its stop reason.
  std::vector<KernelTiming> summaries(int layer) const;

 private:
  struct Kernel {
    std::string name;
    std::vector<double> ms;
    std::vector<double> noise;  // relative spread after each sample
    bool met = false, settled = false;
  };
  void decide();
  TimingPolicy policy_;
  Clock now_;
  double start_s_ = 0;
  int runs_ = 0, samples_ = 0;
  std::vector<Kernel> kernels_;
  std::string stop_;
};

}  // namespace pb
