// sweep.h: `prefill-bench sweep`: every scenario file of a directory at every
// point of a grid (the cartesian product of a few validated axes). A point's
// scenario is the loaded Scenario edited (derive_scenario), written as YAML so it
// can be rerun by hand, and loaded back from that file, so what runs is exactly
// what the file says. Then each point runs here (one JSON report per point and a
// CSV summary), or --ctest writes a CTest project instead: one test per point
// with RESOURCE_GROUPS "gpus:1" and a resource spec listing the GPUs, so
// `ctest --resource-spec-file` spreads the points over the devices.
#pragma once
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "run.h"
#include "scenario.h"

namespace pb {

// The axes a grid may hold: head_dim, num_q_heads, num_kv_heads, block_size
// (positive integers), scale (a positive number multiplying every stream's
// token count) and line (a line of the scenario's streams.from_jsonl file, or
// `all`: every line, see sweep_points).
const std::vector<std::string>& sweep_axis_names();

struct SweepAxis {
  std::string name;
  std::vector<std::string> values;  // canonical spelling ("128", "0.5")
};

// "head_dim=64,128" per entry. Throws InputError for an unknown axis (naming the
// known ones), an axis given twice, an empty list, a value that is not a
// positive integer (scale: a positive number) or a value listed twice.
std::vector<SweepAxis> parse_grid(const std::vector<std::string>& specs);

struct SweepPoint {
  std::vector<std::pair<std::string, std::string>> values;  // axis -> value, in grid order
  std::string label() const;  // "head_dim=128,block_size=32"
};
// The cartesian product, the first axis varying slowest.
std::vector<SweepPoint> grid_points(const std::vector<SweepAxis>& axes);
// `points` for one scenario: line=all becomes one point per batch line of the
// scenario's from_jsonl file (line=1, line=2, ...); the rest are unchanged.
std::vector<SweepPoint> sweep_points(const Scenario& base, const std::vector<SweepPoint>& points);

// `base` at `point`: the fields edited, the name suffixed "@" + label, path and
// marks cleared. head_dim carries rotary_dim and the MRoPE sections along at
// the same fraction; block_size and scale drop explicit block lists and an
// explicit kv_cache.num_blocks (sized for the original shape), scale also
// scratch.capacity_bytes, and scale resolves generators into explicit streams
// (the same draws) before multiplying their tokens (rounded, at least 1).
// What was dropped is appended to `notes`. Throws InputError when the point
// cannot be expressed (e.g. a rotary fraction that is not an integer); whether
// the result is a valid scenario is load_scenario's to say.
Scenario derive_scenario(const Scenario& base, const SweepPoint& point,
                         std::vector<std::string>* notes = nullptr);

// The YAML of a scenario, readable by load_scenario (same fields, same batch):
// `comment` lines first (as "# ..."), then only the fields the Scenario holds,
// optional ones when they differ from their defaults.
std::string scenario_yaml(const Scenario& s, const std::vector<std::string>& comment = {});

struct SweepOptions {
  std::vector<std::string> inputs;  // directories (their *.yaml / *.yml) or scenario files
  std::vector<std::string> grid;    // "axis=v1,v2,..." entries
  std::string out_dir;
  RunOptions run;                   // for each point (and the CTest commands)
  bool ctest = false;               // write a CTest project instead of running
  int gpus = -1;                    // --ctest: GPUs in the spec; -1: count with `nvidia-smi -L`
  std::string tool;                 // --ctest: absolute path of prefill-bench
  ResourceLimits limits;            // every point's resource estimate is held to these
};

struct SweepPointResult {
  std::string scenario;  // the base scenario's name
  std::string source;    // the base scenario's file
  std::string point;     // the label
  std::string name;      // the derived scenario's name
  std::string yaml;      // file name in out_dir
  std::string json;      // file name in out_dir (its report)
  std::string skipped;   // why the point does not run (the derived file is invalid); empty: it runs
  bool ran = false, passed = false;
};

struct SweepResult {
  std::vector<SweepPointResult> points;
  std::string out_dir;
  std::string manifest;       // out_dir/sweep.json: the points (read by summarize_sweep)
  std::string csv;            // out_dir/summary.csv (after a run, or summarize_sweep)
  std::string ctest_file;     // out_dir/CTestTestfile.cmake (--ctest)
  std::string resource_spec;  // out_dir/resource-spec.json (--ctest)
  int gpus = 0;               // --ctest: GPUs listed in the spec
  bool all_passed() const;    // every point that runs ran and passed
};

// Loads and validates every input first (InputError: nothing has run or been
// written), derives and writes every point (a point whose file does not load is
// skipped with the reason; InputError when every point is), then runs them or
// writes the CTest project. `say` gets one line per point.
SweepResult run_sweep(const SweepOptions& options,
                      const std::function<void(const std::string&)>& say = {});

// Writes out_dir/summary.csv from out_dir/sweep.json and the point reports:
// scenario, point, backend, passed (true / false / skipped), worst numeric
// max_abs, attention median ms (summed over attention layers), attention
// TFLOP/s, note. A missing report is "false" with a note. Throws InputError
// when the manifest is missing or malformed.
SweepResult summarize_sweep(const std::string& out_dir);

// GPUs that `nvidia-smi -L` lists; 0 when it is absent or lists none.
int count_gpus();

}  // namespace pb
