// check_result.h: what a check reports. Every check yields one CheckResult per
// run; its figures are per stream and layer, its findings say what tripped:
// the stream(s), the layer, what was expected and what was found.
#pragma once
#include <string>
#include <vector>

namespace pb {

// Check names, as in docs/DESIGN.md, the report and --checks.
constexpr const char* kCheckLayout = "layout";
constexpr const char* kCheckMetadata = "metadata";
constexpr const char* kCheckScratchGuard = "scratch_guard";
constexpr const char* kCheckBufferGuard = "buffer_guard";
constexpr const char* kCheckNumeric = "numeric";
constexpr const char* kCheckCausalBound = "causal_bound";
constexpr const char* kCheckKvWrite = "kv_write";
constexpr const char* kCheckState = "state";
constexpr const char* kCheckPositions = "positions";
constexpr const char* kCheckDeterminism = "determinism";
// --graph only (not in all_check_names): the bucket's second batch, restaged into
// the same scratch and replayed through the same captured layers, passes every check.
constexpr const char* kCheckGraph = "graph";
constexpr const char* kCheckInvariance = "invariance";
const std::vector<std::string>& all_check_names();

struct Finding {
  int layer = -1;   // -1: not layer specific (e.g. layout before any layer)
  int stream = -1;  // -1: not stream specific
  std::string message;  // "stream 3 (kv_len 130): expected ..., found ..."
};

// One figure of one stream in one layer (numeric/state checks).
struct Figure {
  int layer = -1;
  int stream = -1;
  std::string what;          // "out", "h_state", "conv_state", "k_cache", ...
  double max_abs = 0;        // max |backend - ref_hp|
  double rel_l2 = 0;         // ||backend - ref_hp|| / ||ref_hp||
  double lowp_max_abs = 0;   // max |ref_lp - ref_hp|: the same-precision drift
  double limit = 0;          // the tolerance max_abs must stay under
  // Counts, each out of `elements` (values, rows, slots or entries: `what` says which).
  long long nonfinite = 0;      // NaN/Inf where the reference is finite
  long long mismatched = 0;     // compared and wrong (finite but wrong values, wrong entries)
  long long never_written = 0;  // output rows still holding the output poison bits
  long long read_poison = 0;    // output rows NaN where the reference is finite (poisoned KV or an overflow; not the output poison)
  long long elements = 0;       // what was compared
  std::string precision;        // numeric figures: the arithmetic the lp reference (and so the limit) models
  bool pass = true;
};

// The figure's non-zero counts, each named, over what they count: "764 mismatched
// of 768", "12 never written, 12 nonfinite of 1536"; "" when every count is 0.
std::string figure_counts(const Figure& f);
// Any count of the figure is non-zero.
bool has_counts(const Figure& f);

struct CheckResult {
  std::string name;
  bool ran = true;             // false: switched off or not applicable
  std::string not_run_why;
  bool passed = true;
  std::vector<Finding> findings;  // failures (capped; total in finding_count)
  long long finding_count = 0;
  std::vector<Figure> figures;

  void fail(int layer, int stream, std::string message);  // records a finding, passed = false
};

}  // namespace pb
