// compare.h: `prefill-bench compare BASE NEW` (docs/DESIGN.md "Reports"), nvbench's
// compare for our reports. Two JSON reports of the same schema_version are
// matched scenario by scenario (name + backend), check by check and kernel by
// kernel (layer + kernel). A regression, and only a regression, fails the gate:
//  - a check that ran and passed in BASE fails in NEW;
//  - a numeric/state figure whose max_abs grew past error_factor x BASE while the
//    NEW error is above error_floor (zero vs tiny is not a regression), or that
//    became non-finite;
//  - a scenario of BASE missing from NEW, a check that ran in BASE and not in NEW,
//    a NEW run that stopped on an error;
//  - a kernel whose median grew past time_threshold and by more than time_floor_ms
//    while the spreads (the full
//    observed range min..max of each side) do not overlap, on a timed backend:
//    host timings (a shared CPU's clock) are reported, not gated, unless
//    gate_host_time. Overlapping spreads are "ambiguous (spreads overlap)", fewer
//    than min_samples "insufficient samples".
// Vacuous comparisons are refused (InputError, exit 2): an empty report, a NEW
// report in which no check ran, two reports with no scenario in common, and
// options that are not finite and positive. Scenarios only in NEW are listed.
#pragma once
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "run.h"

namespace pb {

// The layout of compare_json(); bumped on any change.
constexpr int kCompareSchemaVersion = 2;  // 2: options.gate_host_time, kernels[].gated

// A report read back from its JSON: its runs as RunResults (null figures are NaN).
struct LoadedReport {
  std::string path;  // named in every message
  int schema_version = 0;
  std::string tool_version, git_revision;
  std::vector<RunResult> runs;
};

// Throws InputError naming `path`: a file that cannot be read, malformed JSON,
// a schema_version other than kReportSchemaVersion, a field that is missing or
// of the wrong type ("NEW.json: $.runs[0].timings[2].median_ms: expected a
// number or null, found a string").
LoadedReport load_report(const std::string& path);
LoadedReport parse_report(const nlohmann::json& doc, const std::string& path);

struct CompareOptions {
  double error_factor = 2.0;     // max_abs may grow up to this factor...
  double error_floor = 1e-6;     // ...and any amount while it stays at or under this
  double time_threshold = 0.10;  // median growth that counts (0.10 = 10%)...
  double time_floor_ms = 0.010;  // ...and is larger than this: a few-microsecond kernel
                                 // moves by launch and clock jitter (H200, back to back:
                                 // 6.3 -> 8.8 us with spreads apart)
  int min_samples = 3;           // fewer timed samples: "insufficient samples"
  bool gate_host_time = false;   // host-backend SLOW fails the gate only when asked
};

// Throws InputError naming the flag when an option is not finite, not positive,
// or (error_factor) under 1.
void validate_compare_options(const CompareOptions& options);

enum class TimeVerdict { same, slow, fast, ambiguous, insufficient, only_base, only_new };
// "same", "SLOW", "FAST", "ambiguous (spreads overlap)", "insufficient samples",
// "only in BASE", "only in NEW".
const char* time_verdict_text(TimeVerdict v);

// Judges one kernel's timing, BASE against NEW. `delta` (may be null) receives
// (new median - base median) / base median (NaN when it is not defined).
// Spreads are each side's full range, min..max: two runs of the same build
// overlap unless every NEW sample is slower than every BASE sample.
TimeVerdict judge_time(const KernelTiming& base, const KernelTiming& next,
                       const CompareOptions& options, double* delta = nullptr);

// One figure (layer, stream, what) of a numeric/state check whose error grew.
struct FigureDelta {
  int layer = -1, stream = -1;
  std::string what;
  double base_max_abs = 0, new_max_abs = 0;  // NaN: non-finite
  long long base_nonfinite = 0, new_nonfinite = 0;
};

struct CheckDelta {
  std::string name;
  bool in_base = false, in_new = false;
  bool base_ran = false, new_ran = false, base_passed = false, new_passed = false;
  std::string base_why, new_why;  // why a check did not run
  // Worst max_abs over the check's figures (NaN when one is non-finite; figures
  // of numeric/state only); has_figures false when neither has any.
  bool has_figures = false;
  double base_worst = 0, new_worst = 0;
  std::vector<FigureDelta> grown;          // figures past the error factor
  std::vector<std::string> new_findings;   // NEW's first findings, when it fails
  long long new_finding_count = 0;
  bool regressed = false;                  // PASS -> FAIL, or an error grew
  std::string verdict;                     // "same", "REGRESSED (PASS -> FAIL)", ...
};

struct KernelDelta {
  int layer = 0;
  std::string kernel;
  std::string layer_kind;  // "attn" / "gdn" / "" when unknown
  bool in_base = false, in_new = false;
  KernelTiming base, next;
  double delta = 0;  // relative median change; NaN when not defined
  TimeVerdict verdict = TimeVerdict::same;
  bool gated = true;  // false: host timing, reported only (CompareOptions::gate_host_time)
};

struct ScenarioDelta {
  std::string name, backend;
  bool in_base = false, in_new = false;
  bool base_passed = false, new_passed = false;
  std::vector<CheckDelta> checks;
  std::vector<KernelDelta> kernels;
  std::vector<std::string> notes;  // inputs, device, faults or sampling differ
  bool vanished_regression = false;  // in BASE, missing from NEW (or NEW stopped on an error)
  bool regressed() const;
};

struct CompareResult {
  std::string base_path, new_path;
  std::string base_tool, new_tool;  // "0.1.0 (git abc1234)"
  CompareOptions options;
  std::vector<ScenarioDelta> scenarios;  // BASE's order, then those only in NEW
  std::vector<std::string> regressions;  // one line each: what failed the gate
  std::vector<std::string> warnings;     // a scenario that vanished, ...
  bool regressed() const { return !regressions.empty(); }
};

// Scenarios are matched by (name, backend); a name+backend that repeats within
// a report is matched by its order of appearance.
CompareResult compare_reports(const LoadedReport& base, const LoadedReport& next,
                              const CompareOptions& options);
// load_report() both (BASE first, so a bad BASE is named first), then
// compare_reports(). Reports of different schema versions are refused, naming both.
CompareResult compare_files(const std::string& base_path, const std::string& new_path,
                            const CompareOptions& options);

// The table for people: every line at most kReportWidth columns; colour only
// when `color`. Ends with the verdict line ("no regression" / "N regressions").
std::string format_compare(const CompareResult& result, bool color);
// The same for machines: compare_schema_version, options, per scenario the
// check and kernel deltas, regressions, warnings, passed.
nlohmann::json compare_json(const CompareResult& result);

}  // namespace pb
