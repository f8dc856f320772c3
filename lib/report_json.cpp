// report_json.cpp: the machine report (schema lib/report_schema.json, version
// kReportSchemaVersion). Field names are the RunResult's; every double goes
// through real() so NaN/Inf become null instead of invalid JSON.
#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <stdexcept>

#include <fmt/format.h>

#include "build_info.h"
#include "report.h"
#include "verdict.h"

namespace pb {

namespace {

using nlohmann::json;

json real(double v) { return std::isfinite(v) ? json(v) : json(nullptr); }

json device_json(const DeviceInfo& d) {
  return {{"name", d.name},
          {"driver", d.driver},
          {"runtime", d.runtime},
          {"sm_count", d.sm_count},
          {"peak_tflops", real(d.peak_tflops)},
          {"peak_gbps", real(d.peak_gbps)}};
}

json fault_names(const FaultSet& faults) {
  json names = json::array();
  for (const FaultInfo& f : all_faults())
    if (faults.has(f.fault)) names.push_back(f.name);
  return names;
}

json scenario_json(const RunResult& r) {
  return {{"path", r.scenario_path},
          {"name", r.scenario_name},
          {"seed", r.seed},
          {"inputs_checksum", fmt::format("{:016x}", r.inputs_checksum)},
          {"layers", r.layer_kinds},
          {"total_tokens", r.total_tokens},
          {"chunk_len", r.chunk_len},
          {"max_blocks_per_seq", r.max_blocks_per_seq},
          {"staged_bytes", r.staged_bytes}};
}

json streams_json(const std::vector<StreamSummary>& streams) {
  json out = json::array();
  for (size_t b = 0; b < streams.size(); ++b) {
    const StreamSummary& s = streams[b];
    out.push_back({{"index", b},
                   {"chunk_start", s.chunk_start},
                   {"count", s.count},
                   {"kv_len", s.kv_len},
                   {"blocks", s.blocks},
                   {"has_image", s.has_image}});
  }
  return out;
}

json check_json(const CheckResult& c) {
  json findings = json::array();
  for (const Finding& f : c.findings)
    findings.push_back({{"layer", f.layer}, {"stream", f.stream}, {"message", f.message}});
  json figures = json::array();
  for (const Figure& f : c.figures)
    figures.push_back({{"layer", f.layer},
                       {"stream", f.stream},
                       {"what", f.what},
                       {"max_abs", real(f.max_abs)},
                       {"rel_l2", real(f.rel_l2)},
                       {"lowp_max_abs", real(f.lowp_max_abs)},
                       {"limit", real(f.limit)},
                       {"nonfinite", f.nonfinite},
                       {"mismatched", f.mismatched},
                       {"never_written", f.never_written},
                       {"read_poison", f.read_poison},
                       {"elements", f.elements},
                       {"pass", f.pass}});
  for (size_t i = 0; i < c.figures.size(); ++i)
    if (!c.figures[i].precision.empty()) figures[i]["precision"] = c.figures[i].precision;
  return {{"name", c.name},
          {"ran", c.ran},
          {"not_run_why", c.not_run_why},
          {"passed", c.passed},
          // The recorder caps `findings`; the count is never below what is listed.
          {"finding_count", std::max<long long>(c.finding_count, c.findings.size())},
          {"findings", findings},
          {"figures", figures}};
}

json timing_json(const KernelTiming& t) {
  return {{"layer", t.layer},
          {"kernel", t.kernel},
          {"samples", t.samples},
          {"median_ms", real(t.median_ms)},
          {"min_ms", real(t.min_ms)},
          {"max_ms", real(t.max_ms)},
          {"q1_ms", real(t.q1_ms)},
          {"q3_ms", real(t.q3_ms)},
          {"rel_stdev", real(t.rel_stdev)},
          {"stop", t.stop},
          {"noise_target", real(t.noise_target)},
          {"flops", real(t.flops)},
          {"bytes", real(t.bytes)},
          {"tflops", real(t.tflops())},
          {"gbps", real(t.gbps())}};
}

json policy_json(const TimingPolicy& p) {
  json j = {{"warmup", p.warmup},
            {"rule", p.fixed ? "fixed" : "noise"},
            {"l2_flush", p.l2_flush},
            {"noise", {{"target", real(p.noise.target)},
                       {"min_samples", p.noise.min_samples},
                       {"max_time_s", real(p.noise.max_time_s)}}}};
  j["fixed_samples"] = p.fixed ? json(*p.fixed) : json(nullptr);
  j["fixed_why"] = p.fixed ? json(p.fixed_why) : json(nullptr);
  return j;
}

json clocks_json(const ClockSnapshot& c) {
  if (!c.available) return {{"available", false}, {"why", c.unavailable_why}};
  return {{"available", true},
          {"sm_mhz", c.sm_mhz},
          {"sm_max_mhz", c.sm_max_mhz},
          {"mem_mhz", c.mem_mhz},
          {"mem_max_mhz", c.mem_max_mhz},
          {"temperature_c", c.temperature_c},
          {"power_w", real(c.power_w)},
          {"throttle_bits", c.throttle_bits},
          {"throttle", c.throttle}};
}

json kernels_json(const KernelLibraryInfo& k) {
  return {{"name", k.name},
          {"version", k.version},
          {"path", k.path},
          {"sha256", k.sha256},
          {"device", k.device},
          {"abi_version", k.abi_version},
          {"entries", k.entries},
          {"schedule", k.schedule},
          {"describe", k.describe}};
}

json skipped_json(const std::vector<SkippedLayer>& skipped) {
  json out = json::array();
  for (const SkippedLayer& s : skipped) out.push_back({{"layer", s.layer}, {"why", s.why}});
  return out;
}

json run_json(const RunResult& r) {
  json checks = json::array();
  for (const CheckResult& c : r.checks) checks.push_back(check_json(c));
  json timings = json::array();
  for (const KernelTiming& t : r.timings) timings.push_back(timing_json(t));
  json run = {{"scenario", scenario_json(r)},
          {"backend", r.backend},
          {"device", device_json(r.device)},

          {"faults_injected", fault_names(r.faults)},
          {"ref_sample", r.ref_sample},
          {"streams", streams_json(r.streams)},
          {"checks", checks},
          {"timings", timings},
          {"l2", r.l2},
          {"l2_flush_bytes", r.l2_flush_bytes},
          {"timing_policy", policy_json(r.timing)},
          {"clocks", {{"before", clocks_json(r.clocks_before)}, {"after", clocks_json(r.clocks_after)}}},
          {"wall_s", real(r.wall_s)},
          {"error", r.error},
          {"error_source", r.error.empty() ? "" : r.kernel_failed ? "kernel_library" : "harness"},
          {"verdict", verdict_name(verdict(r))},
          {"passed", r.passed()}};
  if (!r.library.name.empty()) {  // a run made through a kernel library (every run of the tool)
    run["kernels"] = kernels_json(r.library);
    run["skipped_layers"] = skipped_json(r.skipped_layers);
    run["output_checksums"] = r.output_checksums;
  }
  if (r.graph.requested) {  // --graph (docs/DESIGN.md "Graph mode")
    const BucketDiff& d = r.graph.diff;
    run["graph"] = {{"captured", r.graph.captured},
                    {"replay_clock", r.graph.clock},
                    {"batch2_streams", streams_json(r.graph.batch2)},
                    {"batch2_inputs_checksum", fmt::format("{:016x}", r.graph.batch2_inputs_checksum)},
                    {"batch2_differs",
                     {{"counts", d.counts},
                      {"chunk_starts", d.chunk_starts},
                      {"kv_lens", d.kv_lens},
                      {"block_tables", d.block_tables},
                      {"inputs", d.inputs},
                      {"note", d.note}}}};
  }
  if (!r.invariance_batches.empty())
    run["invariance"] = {{"streams", r.invariance_streams}, {"batches", r.invariance_batches}};
  return run;
}

}  // namespace

json report_json(const std::vector<RunResult>& runs) {
  json out_runs = json::array();
  for (const RunResult& r : runs) out_runs.push_back(run_json(r));
  const Verdict v = verdict(runs);
  return {{"schema_version", kReportSchemaVersion},
          {"tool",
           {{"name", "prefill-bench"},
            {"version", tool_version()},
            {"git_revision", git_revision()},
            {"build_flags", build_flags()}}},
          {"runs", out_runs},
          {"verdict", verdict_name(v)},
          {"passed", v == Verdict::passed}};
}

void write_json(const std::string& path, const nlohmann::json& report) {
  // Invalid UTF-8 in a message (a device name, a path) is replaced, not thrown on.
  const std::string text = report.dump(2, ' ', false, json::error_handler_t::replace) + "\n";
  // A missing parent directory is made (--json reports/run.json in a fresh tree).
  const std::filesystem::path parent = std::filesystem::path(path).parent_path();
  std::error_code ec;
  if (!parent.empty() && !std::filesystem::is_directory(parent, ec)) {
    std::filesystem::create_directories(parent, ec);
    if (ec) {
      throw std::runtime_error(fmt::format("cannot write JSON report {}: cannot create {}: {}",
                                           path, parent.string(), ec.message()));
    }
  }
  std::ofstream file(path, std::ios::binary | std::ios::trunc);
  if (!file) {
    throw std::runtime_error(
        fmt::format("cannot write JSON report {}: {}", path, std::strerror(errno)));
  }
  file << text;
  file.close();
  if (!file) throw std::runtime_error(fmt::format("writing JSON report {} failed", path));
}

}  // namespace pb
