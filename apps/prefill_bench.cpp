// prefill_bench.cpp: the command line. Parses arguments (CLI11) and calls lib/;
// no logic lives here. Exit codes (lib/verdict.h), the same for every subcommand:
// 0 all passed, 1 a check failed or a regression, 2 bad input, usage or I/O
// (found before anything runs), 3 an internal error.
#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <new>
#include <optional>

#include "lib/build_info.h"
#include "lib/compare.h"
#include "lib/export.h"
#include "lib/faults.h"
#include "lib/output_path.h"
#include "lib/report.h"
#include "lib/report_junit.h"
#include "lib/run.h"
#include "lib/run_suite.h"
#include "lib/scenario.h"
#include "lib/stage_report.h"
#include "lib/sweep.h"
#include "lib/verdict.h"

namespace {

constexpr int kExitFail = pb::kExitFailed;
constexpr int kExitBadInput = pb::kExitBadInput;

// Command-line bounds: a run of 10000 repeats per layer is already hours on host.
constexpr int kMaxRepeat = 10000;
constexpr int kMaxWarmup = 10000;
constexpr int kMaxRefSample = 1 << 20;  // rows per stream and head: more than any stream holds

constexpr const char* kExitCodesHelp =
    "Exit codes (every subcommand): 0 all requested checks ran and passed (a --profile run that\n"
    "completed: 0, its verdict is 'not checked'); 1 a check failed, compare found a regression, or\n"
    "the kernel library under test failed (an entry's error status, a broken contract);\n"
    "2 bad input, usage or I/O (found before anything runs); 3 internal error.";

// Every problem of an input error, one per line.
void print_problems(const pb::InputError& e) {
  for (const std::string& p : e.problems()) fmt::print(stderr, "error: {}\n", p);
}

std::vector<pb::Scenario> load_all(const std::vector<std::string>& files, const pb::ResourceLimits& limits) {
  std::vector<pb::Scenario> out;
  for (const std::string& f : files) {
    out.push_back(pb::load_scenario(f));
    pb::validate_resources(out.back(), limits);
  }
  return out;
}

// The resource ceilings (lib/resource_estimate.h), given in GB and GFLOP.
struct LimitFlags {
  std::optional<double> memory_gb, ref_gflop;
  void add(CLI::App* app) {
    app->add_option("--max-memory", memory_gb,
                    "memory ceiling in GB for the up-front estimate (default: host MemAvailable; device 16 GB)")
        ->check(CLI::Range(1e-6, 1e9));
    app->add_option("--max-ref-gflop", ref_gflop, "reference work ceiling in GFLOP (default 1000)")
        ->check(CLI::Range(1e-6, 1e12));
  }
  pb::ResourceLimits limits(const std::string& backend, std::optional<int> ref_sample) const {
    // CLI::Range lets NaN through (every comparison with it is false): refused here.
    for (const auto& [flag, v] : {std::pair{"--max-memory", memory_gb}, std::pair{"--max-ref-gflop", ref_gflop}})
      if (v && !(std::isfinite(*v) && *v > 0))
        throw pb::InputError(fmt::format("{}: expected a finite positive number, found {}", flag, *v));
    pb::ResourceLimits l;
    if (memory_gb) l.max_memory_bytes = *memory_gb * 1e9;
    if (ref_gflop) l.max_ref_flops = *ref_gflop * 1e9;
    l.backend = backend;
    l.ref_sample = ref_sample;
    if (backend != "host")
      if (const double free = pb::cuda_device_free_bytes(); free > 0) l.device_free_bytes = free;
    return l;
  }
};

pb::FaultSet parse_faults(const std::vector<std::string>& names) {
  pb::FaultSet set;
  for (const std::string& n : names) set.add(pb::parse_fault(n));
  return set;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"prefill-bench: correctness and profiling harness for kernel-batched LLM prefill"};
  app.set_version_flag("--version", fmt::format("prefill-bench {} (git {})", pb::tool_version(), pb::git_revision()));
  app.require_subcommand(1);
  app.footer(kExitCodesHelp);

  std::vector<std::string> files;
  std::vector<std::string> inject;
  LimitFlags limit_flags;
  auto* validate = app.add_subcommand("validate", "check scenario files; print every problem with file:line:col, and each good file's resource estimate");
  validate->add_option("files", files, "scenario YAML files")->required();
  limit_flags.add(validate);

  std::string stage_file;
  auto* stage = app.add_subcommand("stage", "print the staged metadata layout of a scenario's batch");
  stage->add_option("file", stage_file, "scenario YAML file")->required();
  stage->add_option("--inject", inject, "stage with a fault switched on (see `faults`)");
  limit_flags.add(stage);

  std::string export_file, export_out;
  auto* exp = app.add_subcommand("export", "write a scenario's batch (shape, per-stream chunk_start/count/kv_len, seed) as JSON for scripts/peer_torch.py");
  exp->add_option("file", export_file, "scenario YAML file")->required();
  exp->add_option("--out,-o", export_out, "the JSON file to write")->required();
  limit_flags.add(exp);

  pb::RunOptions opt;
  std::string json_path, junit_path;
  bool no_color = false;
  auto* run = app.add_subcommand("run", "run scenarios on a backend, check them against the reference, report");
  run->add_option("files", files, "scenario YAML files")->required();
  run->add_option("--backend", opt.backend, "auto (cuda when a device is present), cuda or host")
      ->capture_default_str()->check(CLI::IsMember({"auto", "cuda", "host"}));
  run->add_option("--kernels", opt.kernels, "run the layers on this kernel library (a .so exporting pb_kernel_table_get; docs/KERNEL-ABI.md)");
  run->add_option("--impl", opt.impl, "kernel variants, KERNEL=VARIANT[,KERNEL=VARIANT] (e.g. attention=fp32,gdn=token)");
  run->add_option("--json", json_path, "write the JSON report here");
  run->add_option("--junit", junit_path, "write a JUnit XML report here (one testsuite per scenario, one testcase per check)");
  run->add_option("--inject", inject, "switch on a deliberate bug (repeatable; see `faults`)");
  run->add_option("--ref-sample", opt.ref_sample, "check K sampled rows per stream and head (0 = full)")
      ->check(CLI::Range(0, kMaxRefSample));
  run->add_option("--warmup", opt.warmup, "warm-up runs per layer (default: the scenario's)")
      ->check(CLI::Range(0, kMaxWarmup));
  run->add_option("--repeat", opt.repeat, "exactly N timed runs per layer (default: the scenario's run.repeat, else the noise rule; host: 1)")
      ->check(CLI::Range(1, kMaxRepeat));
  run->add_option_function<std::string>("--l2", [&](const std::string& v) { opt.l2_flush = v == "cold"; },
                                        "cold: flush L2 before each timed kernel; hot: do not (default: the scenario's run.l2_flush, cold)")
      ->check(CLI::IsMember({"cold", "hot"}));
  run->add_flag("--profile", opt.profile, "one warm iteration per layer, no checks (a clean timeline); verdict: not checked, exit 0");
  run->add_flag("--graph", opt.graph, "capture each layer once, check its replay, then replay it on a second batch of the same bucket "
                "restaged into the same scratch (check 'graph'; docs/DESIGN.md 'Graph mode')")->excludes("--profile");
  run->add_flag("--no-color", no_color, "no colour in the table");
  limit_flags.add(run);

  auto* faults = app.add_subcommand("faults", "list the faults --inject knows and the check each must trip");

  std::string base_path, new_path, compare_json_path;
  pb::CompareOptions cmp;
  auto* compare = app.add_subcommand("compare", "gate NEW.json against BASE.json: exit 1 on a regression in accuracy or time");
  compare->add_option("base", base_path, "the baseline JSON report")->required();
  compare->add_option("new", new_path, "the JSON report to judge")->required();
  // Not finite or not positive is refused (exit 2) by pb::validate_compare_options, NaN included.
  compare->add_option("--error-factor", cmp.error_factor, "a numeric/state max_abs may grow up to this factor (>= 1)")
      ->capture_default_str();
  compare->add_option("--error-floor", cmp.error_floor, "errors at or under this never count as grown (> 0)")
      ->capture_default_str();
  compare->add_option("--time-threshold", cmp.time_threshold,
                      "median growth that counts as SLOW when the spreads (min..max) do not overlap (0.10 = 10%)")
      ->capture_default_str();
  compare->add_option("--time-floor", cmp.time_floor_ms,
                      "a median change at or under this many ms is never SLOW or FAST (launch and clock jitter)")
      ->capture_default_str();
  compare->add_flag("--gate-host-time", cmp.gate_host_time,
                    "let SLOW on the host backend fail the gate (default: host timing is reported, not gated)");
  compare->add_option("--json", compare_json_path, "write the comparison as JSON here");
  compare->add_flag("--no-color", no_color, "no colour in the table");

  pb::SweepOptions sw;
  std::string summarize_dir;
  auto* sweep = app.add_subcommand("sweep", "run every scenario of DIR at every point of a grid (or write a CTest project)");
  sweep->add_option("inputs", sw.inputs, "scenario directories (their *.yaml) or files");
  sweep->add_option("--grid", sw.grid, "AXIS=V1,V2,... (repeatable; axes: head_dim, num_q_heads, num_kv_heads, block_size, scale)")
      ->allow_extra_args(false);  // one AXIS=... per --grid: a scenario after it stays a scenario
  sweep->add_option("--out", sw.out_dir, "where the point scenarios, reports and summary.csv go");
  sweep->add_flag("--ctest", sw.ctest, "write a CTest project (one test per point, RESOURCE_GROUPS gpus:1) instead of running");
  sweep->add_option("--gpus", sw.gpus, "--ctest: GPUs in the resource spec (default: count from nvidia-smi -L)")
      ->check(CLI::Range(0, 4096));
  sweep->add_option("--backend", sw.run.backend, "auto (cuda when a device is present), cuda or host")
      ->capture_default_str()->check(CLI::IsMember({"auto", "cuda", "host"}));
  sweep->add_option("--kernels", sw.run.kernels, "run every point on this kernel library (docs/KERNEL-ABI.md)");
  sweep->add_option("--impl", sw.run.impl, "kernel variants, KERNEL=VARIANT[,KERNEL=VARIANT]");
  sweep->add_option("--inject", inject, "switch on a deliberate bug in every point (repeatable)")->allow_extra_args(false);
  sweep->add_option("--ref-sample", sw.run.ref_sample, "check K sampled rows per stream and head (0 = full)")
      ->check(CLI::Range(0, kMaxRefSample));
  sweep->add_option("--warmup", sw.run.warmup, "warm-up runs per layer (default: the scenario's)")
      ->check(CLI::Range(0, kMaxWarmup));
  sweep->add_option("--repeat", sw.run.repeat, "exactly N timed runs per layer (default: the scenario's run.repeat, else the noise rule; host: 1)")
      ->check(CLI::Range(1, kMaxRepeat));
  sweep->add_option_function<std::string>("--l2", [&](const std::string& v) { sw.run.l2_flush = v == "cold"; },
                                          "cold or hot L2 for every point (default: the scenario's)")
      ->check(CLI::IsMember({"cold", "hot"}));
  sweep->add_flag("--graph", sw.run.graph, "every point in graph mode (as run --graph)");
  limit_flags.add(sweep);
  sweep->add_option("--summarize", summarize_dir, "only write DIR/summary.csv from a finished sweep in DIR (the CTest project's last test)");

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    const int code = app.exit(e);
    return code == 0 ? 0 : kExitBadInput;
  }

  try {
    if (*faults) {
      for (const pb::FaultInfo& f : pb::all_faults())
        fmt::print("{:<26} trips {:<14} {}\n", f.name, f.must_trip, f.description);
      return 0;
    }
    if (*validate) {
      int bad = 0;
      for (const std::string& f : files) {
        try {
          pb::Scenario s = pb::load_scenario(f);
          const pb::ResourceEstimate e = pb::validate_resources(s, limit_flags.limits("auto", std::nullopt));
          fmt::print("{}: ok ({}): estimated {}\n", f, s.name, e.summary());
        } catch (const pb::InputError& e) {
          print_problems(e);
          ++bad;
        }
      }
      return bad ? kExitBadInput : 0;
    }
    if (*exp) {
      pb::check_output_file(export_out, "--out");
      pb::export_batch(load_all({export_file}, limit_flags.limits("auto", std::nullopt)).front(), export_out);
      return 0;
    }
    if (*stage) {
      const pb::Scenario s = load_all({stage_file}, limit_flags.limits("auto", std::nullopt)).front();
      fmt::print("{}", pb::describe_staging(s, parse_faults(inject)));
      fmt::print("resource estimate: {}\n", pb::validate_resources(s, limit_flags.limits("auto", std::nullopt)).summary());
      return 0;
    }
    if (*run) {
      if (!json_path.empty()) pb::check_output_file(json_path, "--json");
      if (!junit_path.empty()) pb::check_output_file(junit_path, "--junit");
      opt.inject = parse_faults(inject);
      opt.progress = true;
      pb::ResourceLimits limits = limit_flags.limits(opt.backend, opt.ref_sample);
      limits.reference = !opt.profile;  // --profile computes no reference
      limits.graph = opt.graph;
      const std::vector<pb::Scenario> scenarios = load_all(files, limits);
      pb::validate_kernels(opt, scenarios, limits);
      const pb::SuiteResult suite = pb::run_suite(scenarios, opt);
      const std::vector<pb::RunResult>& results = suite.runs;
      const int stop_code = suite.stop_code;
      fmt::print("{}", pb::format_table(results, !no_color && isatty(1)));
      try {
        if (!json_path.empty()) pb::write_json(json_path, pb::report_json(results));
        if (!junit_path.empty()) pb::write_junit(junit_path, results);
      } catch (const std::runtime_error& e) {  // I/O after the run: the probe passed, the disk did not
        fmt::print(stderr, "error: {}\n", e.what());
        return stop_code ? stop_code : kExitBadInput;
      }
      return stop_code ? stop_code : pb::exit_code(results);
    }
    if (*compare) {
      pb::validate_compare_options(cmp);
      if (!compare_json_path.empty()) pb::check_output_file(compare_json_path, "--json");
      const pb::CompareResult r = pb::compare_files(base_path, new_path, cmp);
      fmt::print("{}", pb::format_compare(r, !no_color && isatty(1)));
      if (!compare_json_path.empty()) pb::write_json(compare_json_path, pb::compare_json(r));
      return r.regressed() ? kExitFail : 0;
    }
    if (*sweep) {
      if (!summarize_dir.empty()) {
        const pb::SweepResult r = pb::summarize_sweep(summarize_dir);
        fmt::print("{}\n", r.csv);
        return 0;
      }
      if (!sw.out_dir.empty()) pb::check_output_dir(sw.out_dir, "--out");
      sw.run.inject = parse_faults(inject);
      sw.run.progress = true;
      sw.limits = limit_flags.limits(sw.run.backend, sw.run.ref_sample);
      sw.limits.graph = sw.run.graph;
      std::error_code ec;
      sw.tool = std::filesystem::read_symlink("/proc/self/exe", ec).string();
      if (ec) sw.tool = std::filesystem::absolute(argv[0]).string();
      const pb::SweepResult r = pb::run_sweep(sw, [](const std::string& line) { fmt::print("{}\n", line); });
      size_t skipped = 0, failed = 0, runs = 0;
      for (const pb::SweepPointResult& p : r.points) {
        skipped += !p.skipped.empty();
        runs += p.skipped.empty();
        failed += p.ran && !p.passed;
      }
      if (sw.ctest) {
        fmt::print("{} tests ({} points skipped) in {}\nresource spec ({} GPUs): {}\n"
                   "run: ctest --test-dir {} --resource-spec-file {} -j {}\n",
                   runs, skipped, r.ctest_file, r.gpus, r.resource_spec, r.out_dir, r.resource_spec,
                   r.gpus > 0 ? r.gpus : 1);
        return 0;
      }
      fmt::print("{} {}: {} passed, {} failed, {} skipped; summary {}\n", r.points.size(),
                 r.points.size() == 1 ? "point" : "points",
                 runs - failed, failed, skipped, r.csv);
      return r.all_passed() ? 0 : kExitFail;
    }
  } catch (const pb::InputError& e) {
    print_problems(e);
    return kExitBadInput;
  } catch (const pb::KernelFailure& e) {  // the library under test, asked before any run
    fmt::print(stderr, "kernel library failed: {}\n", e.what());
    return kExitFail;
  } catch (const std::bad_alloc&) {
    fmt::print(stderr, "internal error: out of memory (std::bad_alloc)\n");
    return pb::kExitInternal;
  } catch (const std::exception& e) {
    fmt::print(stderr, "internal error: {}\n", e.what());
    return pb::kExitInternal;
  } catch (...) {
    fmt::print(stderr, "internal error: an unknown exception\n");
    return pb::kExitInternal;
  }
  return 0;
}
