// prefill_bench.cpp: the command line. Parses arguments (CLI11) and calls lib/;
// no logic lives here. Exit codes: 0 every check passed, 1 a check failed,
// 2 bad input (nothing has run: every scenario is validated first).
#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <unistd.h>

#include <cstdio>
#include <iostream>

#include "lib/build_info.h"
#include "lib/faults.h"
#include "lib/report.h"
#include "lib/run.h"
#include "lib/scenario.h"
#include "lib/stage_report.h"

namespace {

constexpr int kExitFail = 1;
constexpr int kExitBadInput = 2;

std::vector<pb::Scenario> load_all(const std::vector<std::string>& files) {
  std::vector<pb::Scenario> out;
  for (const std::string& f : files) {
    out.push_back(pb::load_scenario(f));
    pb::validate_resources(out.back());
  }
  return out;
}

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

  std::vector<std::string> files;
  std::vector<std::string> inject;
  auto* validate = app.add_subcommand("validate", "check scenario files; print each one's problem with file:line:col");
  validate->add_option("files", files, "scenario YAML files")->required();

  std::string stage_file;
  auto* stage = app.add_subcommand("stage", "print the staged metadata layout of a scenario's batch");
  stage->add_option("file", stage_file, "scenario YAML file")->required();
  stage->add_option("--inject", inject, "stage with a fault switched on (see `faults`)");

  pb::RunOptions opt;
  std::string json_path;
  bool no_color = false;
  auto* run = app.add_subcommand("run", "run scenarios on a backend, check them against the reference, report");
  run->add_option("files", files, "scenario YAML files")->required();
  run->add_option("--backend", opt.backend, "auto (cuda when a device is present), cuda or host")
      ->capture_default_str();
  run->add_option("--json", json_path, "write the JSON report here");
  run->add_option("--inject", inject, "switch on a deliberate bug (repeatable; see `faults`)");
  run->add_option("--ref-sample", opt.ref_sample, "check K sampled rows per stream and head (0 = full)");
  run->add_option("--warmup", opt.warmup, "warm-up runs per layer (default: the scenario's)");
  run->add_option("--repeat", opt.repeat, "timed runs per layer (default: the scenario's; host: 2)");
  run->add_flag("--profile", opt.profile, "one warm iteration per layer, no checks (a clean timeline)");
  run->add_flag("--no-color", no_color, "no colour in the table");

  auto* faults = app.add_subcommand("faults", "list the faults --inject knows and the check each must trip");

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
          pb::validate_resources(s);
          fmt::print("{}: ok ({})\n", f, s.name);
        } catch (const pb::InputError& e) {
          fmt::print(stderr, "{}\n", e.what());
          ++bad;
        }
      }
      return bad ? kExitBadInput : 0;
    }
    if (*stage) {
      const pb::Scenario s = load_all({stage_file}).front();
      fmt::print("{}", pb::describe_staging(s, parse_faults(inject)));
      return 0;
    }
    if (*run) {
      opt.inject = parse_faults(inject);
      opt.progress = true;
      const std::vector<pb::Scenario> scenarios = load_all(files);
      std::vector<pb::RunResult> results;
      for (const pb::Scenario& s : scenarios) results.push_back(pb::run_scenario(s, opt));
      fmt::print("{}", pb::format_table(results, !no_color && isatty(1)));
      if (!json_path.empty()) pb::write_json(json_path, pb::report_json(results));
      for (const pb::RunResult& r : results)
        if (!r.passed()) return kExitFail;
      return 0;
    }
  } catch (const pb::InputError& e) {
    fmt::print(stderr, "error: {}\n", e.what());
    return kExitBadInput;
  } catch (const std::exception& e) {
    fmt::print(stderr, "error: {}\n", e.what());
    return kExitFail;
  }
  return 0;
}
