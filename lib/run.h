// run.h: one scenario end to end: generate, stage, upload, run every layer on
// a backend, compute the reference, run the checks, time the kernels.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "backend.h"
#include "check_result.h"
#include "faults.h"
#include "scenario.h"

namespace pb {

struct RunOptions {
  std::string backend = "auto";  // "auto" (cuda when a device is present), "cuda", "host"
  FaultSet inject;               // added to the scenario's own faults
  int ref_sample = -1;           // -1: the scenario's
  int warmup = -1, repeat = -1;  // -1: the scenario's (the host backend caps repeat at 2)
  bool progress = false;         // progress lines on stderr
  bool profile = false;          // one warm iteration, no checks (a clean timeline)
};

// Timing of one kernel of one layer over the repeats (CUDA events on cuda,
// the host clock on host).
struct KernelTiming {
  int layer = 0;
  std::string kernel;
  int samples = 0;
  double median_ms = 0, min_ms = 0, max_ms = 0, q1_ms = 0, q3_ms = 0;
  double flops = 0;  // counted as docs/DESIGN.md "Counting work"
  double bytes = 0;  // the fewest bytes the kernel must move
  double tflops() const { return median_ms > 0 ? flops / (median_ms * 1e9) : 0; }
  double gbps() const { return median_ms > 0 ? bytes / (median_ms * 1e6) : 0; }
};

struct StreamSummary {
  int chunk_start = 0, count = 0, kv_len = 0, blocks = 0;
  bool has_image = false;
};

struct RunResult {
  std::string scenario_path, scenario_name;
  uint64_t seed = 0;
  std::string backend;
  DeviceInfo device;
  FaultSet faults;                 // what was injected
  std::vector<StreamSummary> streams;
  std::vector<std::string> layer_kinds;  // "attn" / "gdn" per layer
  int total_tokens = 0, chunk_len = 0, max_blocks_per_seq = 0;
  uint64_t staged_bytes = 0;
  uint64_t inputs_checksum = 0;
  int ref_sample = 0;              // 0: full reference
  std::vector<CheckResult> checks;
  std::vector<KernelTiming> timings;
  double wall_s = 0;
  bool passed() const;
  const CheckResult* check(const std::string& name) const;
};

// Everything about the scenario that needs the resolved streams (KV cache and
// scratch sizes, explicit block tables, images); throws a located InputError.
// `validate` and `run` call it for every file before anything runs.
void validate_resources(const Scenario& scenario);

// Throws InputError for bad input (unknown backend, resources); a check failing
// is a result, not an exception.
RunResult run_scenario(const Scenario& scenario, const RunOptions& options);

}  // namespace pb
