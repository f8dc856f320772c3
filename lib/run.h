// run.h: one scenario end to end: generate, stage, upload, run every layer on
// a backend, compute the reference, run the checks, time the kernels.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "backend.h"
#include "check_result.h"
#include "faults.h"
#include "gpu_clocks.h"
#include "graph_bucket.h"
#include "resource_estimate.h"
#include "scenario.h"
#include "timing.h"

namespace pb {

struct RunOptions {
  std::string backend = "auto";  // "auto" (cuda when a device is present), "cuda", "host"
  std::string kernels;           // --kernels PATH: a kernel library; "" = ours (built-in)
  std::string impl;              // --impl kernel=variant[,kernel=variant]: set_option for each
  FaultSet inject;               // added to the scenario's own faults
  std::optional<int> ref_sample;         // unset: the scenario's
  std::optional<int> warmup, repeat;     // unset: the scenario's (lib/timing.h; --repeat N: exactly N)
  std::optional<bool> l2_flush;          // --l2 cold|hot; unset: the scenario's run.l2_flush
  bool progress = false;         // progress lines on stderr
  bool profile = false;          // one warm iteration, no checks (a clean timeline)
  bool graph = false;            // --graph: capture each layer, check the replays and a second batch of the bucket
};

struct StreamSummary {
  int chunk_start = 0, count = 0, kv_len = 0, blocks = 0;
  bool has_image = false;
};

// --graph (docs/DESIGN.md "Graph mode"): what was captured and the bucket's second batch.
struct GraphRun {
  bool requested = false;  // --graph was given
  bool captured = false;   // the library declares PB_CAP_GRAPH: the layers were captured and replayed
  std::string clock;       // what timed the replays: "cuda events" or "host clock"
  std::vector<StreamSummary> batch2;  // the second batch's streams
  uint64_t batch2_inputs_checksum = 0;
  BucketDiff diff;         // what differs from batch 1
};

// A layer the kernel library does not run (supports() said no), with its reason.
struct SkippedLayer {
  int layer = 0;
  std::string why;
};

struct RunResult {
  std::string scenario_path, scenario_name;
  uint64_t seed = 0;
  std::string backend;
  DeviceInfo device;
  KernelLibraryInfo library;       // the kernel library the layers ran on
  std::vector<SkippedLayer> skipped_layers;  // not run: the checks could not see them (never PASS)
  std::vector<std::string> output_checksums;  // per layer: FNV-1a of the first run's outputs, "" when skipped
  FaultSet faults;                 // what was injected
  std::vector<StreamSummary> streams;
  std::vector<std::string> layer_kinds;  // "attn" / "gdn" per layer
  int total_tokens = 0, chunk_len = 0, max_blocks_per_seq = 0;
  uint64_t staged_bytes = 0;
  uint64_t inputs_checksum = 0;
  int ref_sample = 0;              // 0: full reference
  int invariance_streams = 0;      // invariance.streams (when the check ran)
  std::vector<std::string> invariance_batches;  // the sub-batches it ran: "reversed", "stream 3 alone"
  std::vector<CheckResult> checks;
  std::vector<KernelTiming> timings;  // under --graph also "graph_replay" per layer: the captured entries replayed
  // How the kernels were timed (lib/timing.h): the policy, the L2 mode actually
  // used ("cold" only where the memory flushes L2; the host backend is "hot"), and
  // GPU 0's clocks before and after the timed runs (not read on host).
  TimingPolicy timing;
  std::string l2 = "hot";
  uint64_t l2_flush_bytes = 0;
  ClockSnapshot clocks_before, clocks_after;
  GraphRun graph;
  double wall_s = 0;
  // Set when the run stopped on an error before its checks ended: the verdict is
  // then "failed" when the kernel library failed (KernelFailure: an entry returned
  // an error, or it broke the contract), else "error" (an internal error, out of
  // memory; verdict.h).
  std::string error;
  bool kernel_failed = false;
  bool passed() const;  // verdict(*this) == Verdict::passed
  const CheckResult* check(const std::string& name) const;
};

// Everything about the scenario that needs the resolved streams (KV cache and
// scratch sizes, explicit block tables, images, the resource estimate against
// `limits`); throws a located InputError. Every subcommand calls it for every
// file before anything runs. With `library`, the workspace it asks for is part of
// the estimate (library_workspace). Returns the estimate (validate and stage show it).
ResourceEstimate validate_resources(const Scenario& scenario, const ResourceLimits& limits = {},
                                    const KernelLibrary* library = nullptr);

// The backend the options ask for, with --impl and the kernel-internal faults
// applied to its library (InputError when the library or an option is refused).
std::unique_ptr<Backend> make_configured_backend(const RunOptions& options, FaultSet faults);

// --impl's "kernel=variant[,kernel=variant]" as (key, value) pairs; throws
// InputError on a malformed list.
std::vector<std::pair<std::string, std::string>> parse_impl(const std::string& impl);

// Opens the kernel library the options name on the device it asks for, applies
// --impl, and closes it again: every refusal (a library that cannot load, a CUDA
// library without a device, an unknown kernel or variant) as an InputError
// before anything runs. Then each scenario's resource estimate, with the library's
// own workspace added (asked of it through workspace_bytes with the batch's
// counts), is held to `limits` (a located InputError).
void validate_kernels(const RunOptions& options, const std::vector<Scenario>& scenarios = {},
                      const ResourceLimits& limits = {});

// The kernel library's workspace for each layer kind of the scenario, asked of
// the library with the batch's counts and host copies (no device arrays exist
// yet; workspace_bytes plans from these, docs/KERNEL-ABI.md), as estimate lines.
std::vector<EstimateItem> library_workspace(const Scenario& s, const std::vector<StreamSpec>& streams,
                                           const KernelLibrary& lib);

// Throws InputError for bad input (unknown backend, resources, a refused kernel
// library or option, a kernel fault the library does not have); a check failing
// is a result, not an exception.
RunResult run_scenario(const Scenario& scenario, const RunOptions& options);

}  // namespace pb
