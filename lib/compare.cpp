// compare.cpp: reads two JSON reports back into RunResults (every problem named
// with the file and the JSON path), matches them and judges the deltas (rules in
// compare.h), then formats the table (<= kReportWidth columns) and the JSON.
#include "compare.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <set>
#include <sstream>
#include <tuple>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "number_format.h"

#include "input_error.h"
#include "report.h"

namespace pb {

namespace {

using nlohmann::json;

const double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr uintmax_t kMaxReportBytes = uintmax_t(1) << 30;  // a report of many runs is megabytes
namespace fs = std::filesystem;

// ---- reading a report back ----

std::string kind_of(const json& v) {
  switch (v.type()) {
    case json::value_t::null: return "null";
    case json::value_t::boolean: return "a boolean";
    case json::value_t::number_integer:
    case json::value_t::number_unsigned: return "an integer";
    case json::value_t::number_float: return "a number";
    case json::value_t::string: return "a string";
    case json::value_t::array: return "an array";
    case json::value_t::object: return "an object";
    default: return "something else";
  }
}

// Field access that names the file and the JSON path of whatever is wrong.
class DocReader {
 public:
  explicit DocReader(const std::string& path) : path_(path) {}

  [[noreturn]] void fail(const std::string& where, const std::string& what) const {
    throw InputError(fmt::format("{}: {}: {}", path_, where, what));
  }
  const json& field(const json& obj, const std::string& where, const char* key) const {
    if (!obj.is_object()) fail(where, "expected an object, found " + kind_of(obj));
    const auto it = obj.find(key);
    if (it == obj.end()) fail(where + "." + key, "required field missing");
    return *it;
  }
  const json& array(const json& obj, const std::string& where, const char* key) const {
    const json& v = field(obj, where, key);
    if (!v.is_array()) fail(where + "." + key, "expected an array, found " + kind_of(v));
    return v;
  }
  std::string str(const json& obj, const std::string& where, const char* key) const {
    const json& v = field(obj, where, key);
    if (!v.is_string()) fail(where + "." + key, "expected a string, found " + kind_of(v));
    return v.get<std::string>();
  }
  bool boolean(const json& obj, const std::string& where, const char* key) const {
    const json& v = field(obj, where, key);
    if (!v.is_boolean()) fail(where + "." + key, "expected true or false, found " + kind_of(v));
    return v.get<bool>();
  }
  long long integer(const json& obj, const std::string& where, const char* key) const {
    const json& v = field(obj, where, key);
    if (v.is_number_unsigned() && v.get<uint64_t>() > uint64_t(std::numeric_limits<long long>::max()))
      fail(where + "." + key, "integer out of range");
    if (!v.is_number_integer()) fail(where + "." + key, "expected an integer, found " + kind_of(v));
    return v.get<long long>();
  }
  uint64_t u64(const json& obj, const std::string& where, const char* key) const {
    const json& v = field(obj, where, key);
    if (v.is_number_unsigned()) return v.get<uint64_t>();
    if (v.is_number_integer() && v.get<long long>() >= 0) return uint64_t(v.get<long long>());
    fail(where + "." + key, "expected a non-negative integer, found " + kind_of(v));
  }
  // A figure: a number, or null (a non-finite figure), read as NaN.
  double real(const json& obj, const std::string& where, const char* key) const {
    const json& v = field(obj, where, key);
    if (v.is_null()) return kNaN;
    if (!v.is_number()) fail(where + "." + key, "expected a number or null, found " + kind_of(v));
    return v.get<double>();
  }

 private:
  const std::string& path_;
};

std::string at(const std::string& where, size_t i) { return fmt::format("{}[{}]", where, i); }

CheckResult read_check(const DocReader& rd, const json& c, const std::string& w) {
  CheckResult out;
  out.name = rd.str(c, w, "name");
  out.ran = rd.boolean(c, w, "ran");
  out.not_run_why = rd.str(c, w, "not_run_why");
  out.passed = rd.boolean(c, w, "passed");
  out.finding_count = rd.integer(c, w, "finding_count");
  const json& findings = rd.array(c, w, "findings");
  for (size_t i = 0; i < findings.size(); ++i) {
    const std::string fw = at(w + ".findings", i);
    Finding f;
    f.layer = int(rd.integer(findings[i], fw, "layer"));
    f.stream = int(rd.integer(findings[i], fw, "stream"));
    f.message = rd.str(findings[i], fw, "message");
    out.findings.push_back(f);
  }
  const json& figures = rd.array(c, w, "figures");
  for (size_t i = 0; i < figures.size(); ++i) {
    const std::string fw = at(w + ".figures", i);
    const json& j = figures[i];
    Figure f;
    f.layer = int(rd.integer(j, fw, "layer"));
    f.stream = int(rd.integer(j, fw, "stream"));
    f.what = rd.str(j, fw, "what");
    f.max_abs = rd.real(j, fw, "max_abs");
    f.rel_l2 = rd.real(j, fw, "rel_l2");
    f.lowp_max_abs = rd.real(j, fw, "lowp_max_abs");
    f.limit = rd.real(j, fw, "limit");
    f.nonfinite = rd.integer(j, fw, "nonfinite");
    f.mismatched = rd.integer(j, fw, "mismatched");
    f.never_written = rd.integer(j, fw, "never_written");
    f.read_poison = rd.integer(j, fw, "read_poison");
    f.elements = rd.integer(j, fw, "elements");
    f.pass = rd.boolean(j, fw, "pass");
    out.figures.push_back(f);
  }
  return out;
}

KernelTiming read_timing(const DocReader& rd, const json& t, const std::string& w) {
  KernelTiming out;
  out.layer = int(rd.integer(t, w, "layer"));
  out.kernel = rd.str(t, w, "kernel");
  out.samples = int(rd.integer(t, w, "samples"));
  out.median_ms = rd.real(t, w, "median_ms");
  out.min_ms = rd.real(t, w, "min_ms");
  out.max_ms = rd.real(t, w, "max_ms");
  out.q1_ms = rd.real(t, w, "q1_ms");
  out.q3_ms = rd.real(t, w, "q3_ms");
  out.flops = rd.real(t, w, "flops");
  out.bytes = rd.real(t, w, "bytes");
  if (t.contains("stop")) {  // reports before lib/timing have no stopping rule
    out.rel_stdev = rd.real(t, w, "rel_stdev");
    out.stop = rd.str(t, w, "stop");
    out.noise_target = rd.real(t, w, "noise_target");
  }
  return out;
}

// One NVML snapshot of a report's clocks (absent in reports before lib/timing).
ClockSnapshot read_clocks(const DocReader& rd, const json& c, const std::string& w) {
  ClockSnapshot out;
  out.available = rd.boolean(c, w, "available");
  if (!out.available) {
    out.unavailable_why = rd.str(c, w, "why");
    return out;
  }
  out.sm_mhz = unsigned(rd.integer(c, w, "sm_mhz"));
  out.sm_max_mhz = unsigned(rd.integer(c, w, "sm_max_mhz"));
  out.mem_mhz = unsigned(rd.integer(c, w, "mem_mhz"));
  out.mem_max_mhz = unsigned(rd.integer(c, w, "mem_max_mhz"));
  out.temperature_c = unsigned(rd.integer(c, w, "temperature_c"));
  for (const json& t : rd.array(c, w, "throttle")) {
    if (!t.is_string()) rd.fail(w + ".throttle", "expected reason names (strings), found " + kind_of(t));
    out.throttle.push_back(t.get<std::string>());
  }
  return out;
}

RunResult read_run(const DocReader& rd, const json& r, const std::string& w) {
  RunResult out;
  const json& sc = rd.field(r, w, "scenario");
  const std::string sw = w + ".scenario";
  out.scenario_path = rd.str(sc, sw, "path");
  out.scenario_name = rd.str(sc, sw, "name");
  out.seed = rd.u64(sc, sw, "seed");
  {
    const std::string hex = rd.str(sc, sw, "inputs_checksum");
    char* end = nullptr;
    out.inputs_checksum = std::strtoull(hex.c_str(), &end, 16);
    if (hex.empty() || *end != '\0') rd.fail(sw + ".inputs_checksum", "expected 16 hex digits, found '" + hex + "'");
  }
  for (const json& k : rd.array(sc, sw, "layers")) {
    if (!k.is_string()) rd.fail(sw + ".layers", "expected layer kinds (strings), found " + kind_of(k));
    out.layer_kinds.push_back(k.get<std::string>());
  }
  out.total_tokens = int(rd.integer(sc, sw, "total_tokens"));
  out.chunk_len = int(rd.integer(sc, sw, "chunk_len"));
  out.max_blocks_per_seq = int(rd.integer(sc, sw, "max_blocks_per_seq"));
  out.staged_bytes = rd.u64(sc, sw, "staged_bytes");

  out.backend = rd.str(r, w, "backend");
  const json& d = rd.field(r, w, "device");
  const std::string dw = w + ".device";
  out.device.name = rd.str(d, dw, "name");
  out.device.driver = rd.str(d, dw, "driver");
  out.device.runtime = rd.str(d, dw, "runtime");
  out.device.sm_count = int(rd.integer(d, dw, "sm_count"));
  out.device.peak_tflops = rd.real(d, dw, "peak_tflops");
  out.device.peak_gbps = rd.real(d, dw, "peak_gbps");
  if (r.contains("kernels") && r.at("kernels").is_object()) {  // reports before the kernel ABI have none
    const json& k = r.at("kernels");
    const std::string kw = w + ".kernels";
    out.library.name = rd.str(k, kw, "name");
    out.library.version = rd.str(k, kw, "version");
    out.library.path = rd.str(k, kw, "path");
    out.library.sha256 = rd.str(k, kw, "sha256");
    out.library.describe = rd.str(k, kw, "describe");
  }
  const json& faults = rd.array(r, w, "faults_injected");
  for (size_t i = 0; i < faults.size(); ++i) {
    if (!faults[i].is_string()) rd.fail(at(w + ".faults_injected", i), "expected a fault name, found " + kind_of(faults[i]));
    try {
      out.faults.add(parse_fault(faults[i].get<std::string>()));
    } catch (const InputError& e) {
      rd.fail(at(w + ".faults_injected", i), e.what());
    }
  }
  out.ref_sample = int(rd.integer(r, w, "ref_sample"));
  const json& streams = rd.array(r, w, "streams");
  for (size_t i = 0; i < streams.size(); ++i) {
    const std::string stw = at(w + ".streams", i);
    StreamSummary s;
    s.chunk_start = int(rd.integer(streams[i], stw, "chunk_start"));
    s.count = int(rd.integer(streams[i], stw, "count"));
    s.kv_len = int(rd.integer(streams[i], stw, "kv_len"));
    s.blocks = int(rd.integer(streams[i], stw, "blocks"));
    s.has_image = rd.boolean(streams[i], stw, "has_image");
    out.streams.push_back(s);
  }
  const json& checks = rd.array(r, w, "checks");
  for (size_t i = 0; i < checks.size(); ++i) out.checks.push_back(read_check(rd, checks[i], at(w + ".checks", i)));
  const json& timings = rd.array(r, w, "timings");
  for (size_t i = 0; i < timings.size(); ++i) out.timings.push_back(read_timing(rd, timings[i], at(w + ".timings", i)));
  out.l2.clear();  // "" = not recorded (a report before lib/timing)
  if (r.contains("l2")) {
    out.l2 = rd.str(r, w, "l2");
    if (out.l2 != "cold" && out.l2 != "hot") rd.fail(w + ".l2", "expected \"cold\" or \"hot\", found '" + out.l2 + "'");
  }
  if (r.contains("clocks")) {
    const json& c = rd.field(r, w, "clocks");
    out.clocks_before = read_clocks(rd, rd.field(c, w + ".clocks", "before"), w + ".clocks.before");
    out.clocks_after = read_clocks(rd, rd.field(c, w + ".clocks", "after"), w + ".clocks.after");
  }
  out.wall_s = rd.real(r, w, "wall_s");
  out.error = rd.str(r, w, "error");
  out.kernel_failed = r.contains("error_source") && rd.str(r, w, "error_source") == "kernel_library";
  return out;
}

// The schema_version of a document, before anything else is read.
int schema_version_of(const json& doc, const std::string& path) {
  const DocReader rd(path);
  if (!doc.is_object()) rd.fail("$", "expected a prefill-bench report (a JSON object), found " + kind_of(doc));
  if (!doc.contains("schema_version"))
    rd.fail("$.schema_version", "required field missing (not a prefill-bench report?)");
  return int(rd.integer(doc, "$", "schema_version"));
}

json read_json_file(const std::string& path) {
  // stat first: a FIFO would block and /dev/zero never ends.
  std::error_code ec;
  const fs::file_status st = fs::status(path, ec);
  if (!ec && fs::exists(st) && !fs::is_regular_file(st))
    throw InputError(path + ": not a regular file; a report is a JSON file");
  if (!ec && fs::is_regular_file(st) && fs::file_size(path, ec) > kMaxReportBytes && !ec)
    throw InputError(fmt::format("{}: larger than {} bytes; not a prefill-bench report", path, kMaxReportBytes));
  std::ifstream in(path, std::ios::binary);
  if (!in) throw InputError(path + ": cannot open the report (missing or unreadable)");
  std::ostringstream text;
  text << in.rdbuf();
  if (in.bad()) throw InputError(path + ": cannot read the report");
  try {
    return json::parse(text.str());
  } catch (const json::parse_error& e) {
    // "[json.exception.parse_error.101] parse error at line 3, column 5: ..." -> from "parse error".
    std::string what = e.what();
    const size_t cut = what.find("] ");
    if (cut != std::string::npos) what = what.substr(cut + 2);
    throw InputError(fmt::format("{}: malformed JSON: {}", path, what));
  }
}

// ---- judging ----

bool numeric_or_state(const std::string& check) { return check == kCheckNumeric || check == kCheckState; }

bool finite_figure(const Figure& f) { return std::isfinite(f.max_abs) && f.nonfinite == 0; }

// Larger is worse; NaN (non-finite) is the worst.
void take_worst(double& worst, double v) {
  if (std::isnan(worst)) return;
  if (std::isnan(v) || v > worst) worst = v;
}

double worst_of(const CheckResult& c) {
  double worst = 0;
  for (const Figure& f : c.figures) take_worst(worst, finite_figure(f) ? f.max_abs : kNaN);
  return worst;
}

// NEW's figure grew past the factor (or became non-finite) against BASE's.
bool grew(const Figure& base, const Figure& next, const CompareOptions& o) {
  if (!finite_figure(next)) return finite_figure(base) || next.nonfinite > base.nonfinite;
  if (!finite_figure(base)) return false;
  return next.max_abs > o.error_floor && next.max_abs > o.error_factor * base.max_abs;
}

std::string num(double v) { return format_figure(v); }
std::string ms(double v) { return format_ms(v); }

// "x1.00", "x12.3", "x1234"; "" when not defined.
std::string ratio_text(double base, double next) {
  if (std::isnan(base) || std::isnan(next)) return "";
  if (base == 0) return next == 0 ? "x1.00" : "";
  const double r = next / base;
  if (r < 10) return fmt::format("x{:.2f}", r);
  if (r < 1000) return fmt::format("x{:.1f}", r);
  return fmt::format("x{:.0f}", r);
}

std::string percent(double delta) {
  if (std::isnan(delta)) return "";
  if (std::isinf(delta)) return delta > 0 ? "+inf%" : "-inf%";
  if (std::fabs(delta) >= 10) return fmt::format("{:+.0f}%", delta * 100);
  return fmt::format("{:+.1f}%", delta * 100);
}

std::string where_text(int layer, int stream) {
  std::string s;
  if (layer >= 0) s = fmt::format("layer {}", layer);
  if (stream >= 0) s += fmt::format("{}stream {}", s.empty() ? "" : " ", stream);
  return s;
}

std::string figure_text(const FigureDelta& g) {
  std::string s = where_text(g.layer, g.stream);
  s += (s.empty() ? "" : " ") + g.what + ": max_abs " + num(g.base_max_abs) + " -> " + num(g.new_max_abs);
  const std::string r = ratio_text(g.base_max_abs, g.new_max_abs);
  if (!r.empty()) s += " (" + r + ")";
  if (g.new_nonfinite > g.base_nonfinite)
    s += fmt::format(", non-finite {} -> {}", g.base_nonfinite, g.new_nonfinite);
  return s;
}

std::string scenario_label(const std::string& name, const std::string& backend) {
  return fmt::format("{} [{}]", name, backend);
}

std::string kernel_label(const KernelDelta& k) { return fmt::format("L{} {}", k.layer, k.kernel); }

std::string spread_text(const KernelTiming& t) { return ms(t.min_ms) + ".." + ms(t.max_ms); }

CheckDelta compare_check(const CheckResult* b, const CheckResult* n, const CompareOptions& o) {
  CheckDelta d;
  d.name = b ? b->name : n->name;
  d.in_base = b != nullptr;
  d.in_new = n != nullptr;
  if (b) d.base_ran = b->ran, d.base_passed = b->passed, d.base_why = b->not_run_why;
  if (n) d.new_ran = n->ran, d.new_passed = n->passed, d.new_why = n->not_run_why;
  if (!b || !n) {
    d.verdict = b ? "only in BASE" : "only in NEW";
    return d;
  }
  if (numeric_or_state(d.name) && (!b->figures.empty() || !n->figures.empty())) {
    d.has_figures = true;
    d.base_worst = worst_of(*b);
    d.new_worst = worst_of(*n);
    std::map<std::tuple<int, int, std::string>, const Figure*> base_figs;
    for (const Figure& f : b->figures) base_figs[{f.layer, f.stream, f.what}] = &f;
    if (b->ran && n->ran)
      for (const Figure& f : n->figures) {
        const auto it = base_figs.find({f.layer, f.stream, f.what});
        if (it == base_figs.end() || !grew(*it->second, f, o)) continue;
        const Figure& bf = *it->second;
        d.grown.push_back({f.layer, f.stream, f.what, finite_figure(bf) ? bf.max_abs : kNaN,
                           finite_figure(f) ? f.max_abs : kNaN, bf.nonfinite, f.nonfinite});
      }
  }
  const bool pass_to_fail = d.base_ran && d.base_passed && d.new_ran && !d.new_passed;
  if (d.new_ran && !d.new_passed) {
    for (size_t i = 0; i < n->findings.size() && i < 3; ++i) {
      const Finding& f = n->findings[i];
      const std::string w = where_text(f.layer, f.stream);
      d.new_findings.push_back(w.empty() ? f.message : w + ": " + f.message);
    }
    d.new_finding_count = std::max<long long>(n->finding_count, n->findings.size());
  }
  d.regressed = pass_to_fail || !d.grown.empty();
  if (!d.base_ran && !d.new_ran) {
    d.verdict = "not run";
  } else if (!d.new_ran) {
    d.verdict = "not run in NEW";
  } else if (!d.base_ran) {
    d.verdict = d.new_passed ? "runs only in NEW" : "FAIL, runs only in NEW";
  } else if (pass_to_fail) {
    d.verdict = "REGRESSED (PASS -> FAIL)";
  } else if (!d.grown.empty()) {
    double worst_ratio = 0;
    bool nonfinite = false;
    for (const FigureDelta& g : d.grown) {
      if (std::isnan(g.new_max_abs)) nonfinite = true;
      else if (g.base_max_abs > 0) worst_ratio = std::max(worst_ratio, g.new_max_abs / g.base_max_abs);
    }
    d.verdict = nonfinite ? "REGRESSED (non-finite)"
              : worst_ratio > 0 ? "REGRESSED (error " + ratio_text(1, worst_ratio) + ")"
                                : "REGRESSED (error from 0)";
  } else if (!d.base_passed && d.new_passed) {
    d.verdict = "fixed (FAIL -> PASS)";
  } else if (!d.base_passed) {
    d.verdict = "still failing";
  } else {
    d.verdict = "same";
  }
  return d;
}

std::vector<std::string> differences(const RunResult& b, const RunResult& n) {
  std::vector<std::string> notes;
  if (b.seed != n.seed || b.inputs_checksum != n.inputs_checksum)
    notes.push_back(fmt::format("inputs differ (seed {} vs {}, checksum {:016x} vs {:016x}): the "
                                "accuracy deltas compare different data", b.seed, n.seed,
                                b.inputs_checksum, n.inputs_checksum));
  if (b.device.name != n.device.name)
    notes.push_back(fmt::format("devices differ ('{}' vs '{}'): the time deltas compare different "
                                "machines", b.device.name, n.device.name));
  if (b.faults.bits != n.faults.bits) notes.push_back("the injected faults differ");
  const KernelLibraryInfo &kb = b.library, &kn = n.library;
  if (kb.name != kn.name || kb.version != kn.version || kb.sha256 != kn.sha256)
    notes.push_back(fmt::format("kernel libraries differ ({} {} {} vs {} {} {}): the deltas compare different kernels",
                                kb.name.empty() ? "-" : kb.name, kb.version, kb.sha256.empty() ? kb.path : kb.sha256.substr(0, 12),
                                kn.name.empty() ? "-" : kn.name, kn.version, kn.sha256.empty() ? kn.path : kn.sha256.substr(0, 12)));
  else if (kb.describe != kn.describe)
    notes.push_back(fmt::format("kernel variants differ ('{}' vs '{}')", kb.describe, kn.describe));
  if (b.ref_sample != n.ref_sample)
    notes.push_back(fmt::format("reference sampling differs ({} vs {} rows; 0 = full)", b.ref_sample,
                                n.ref_sample));
  // Clocks (NVML): a different SM clock ceiling or a start more than 5% apart, and
  // throttling seen on either side, make the time deltas suspect.
  const ClockSnapshot &cb = b.clocks_before, &cn = n.clocks_before;
  if (cb.available && cn.available &&
      (cb.sm_max_mhz != cn.sm_max_mhz || cb.mem_max_mhz != cn.mem_max_mhz ||
       std::fabs(double(cb.sm_mhz) - double(cn.sm_mhz)) > 0.05 * std::max(cb.sm_mhz, cn.sm_mhz)))
    notes.push_back(fmt::format("clocks differ (BASE {}, NEW {}): the time deltas compare different clocks",
                                clocks_line(cb), clocks_line(cn)));
  for (const auto& [side, r] : {std::pair<const char*, const RunResult*>{"BASE", &b}, {"NEW", &n}}) {
    std::vector<std::string> seen = r->clocks_before.throttle;
    for (const std::string& t : r->clocks_after.throttle)
      if (std::find(seen.begin(), seen.end(), t) == seen.end()) seen.push_back(t);
    if (!seen.empty())
      notes.push_back(fmt::format("{} was throttled around its timed runs ({}): its times may be slow",
                                  side, fmt::join(seen, ", ")));
  }
  return notes;
}

void compare_run(const RunResult* b, const RunResult* n, const CompareOptions& o, ScenarioDelta& d,
                 CompareResult& res) {
  const std::string label = scenario_label(d.name, d.backend);
  if (b) d.base_passed = b->passed();
  if (n) d.new_passed = n->passed();
  if (!b || !n) return;
  if (!n->error.empty()) {
    d.vanished_regression = true;
    res.regressions.push_back(fmt::format("{}: NEW stopped on an error: {}", label, n->error));
  }
  d.notes = differences(*b, *n);

  std::vector<std::string> names;
  for (const CheckResult& c : b->checks) names.push_back(c.name);
  for (const CheckResult& c : n->checks)
    if (!b->check(c.name)) names.push_back(c.name);
  for (const std::string& name : names) {
    CheckDelta c = compare_check(b->check(name), n->check(name), o);
    if (c.in_base && c.base_ran && !(c.in_new && c.new_ran)) {
      // A check that stopped running proves less than before: a regression, not a warning.
      c.regressed = true;
      c.verdict = c.in_new ? "REGRESSED (not run in NEW)" : "REGRESSED (missing from NEW)";
      res.regressions.push_back(fmt::format("{}: check {} ran in BASE but not in NEW ({})", label, name,
                                            !c.in_new ? "missing from the report"
                                            : c.new_why.empty() ? "no reason given" : c.new_why));
    }
    if (c.regressed) {
      if (c.base_passed && c.new_ran && !c.new_passed) {
        std::string line = fmt::format("{}: check {}: PASS -> FAIL", label, name);
        if (!c.new_findings.empty()) line += " (" + c.new_findings.front() + ")";
        res.regressions.push_back(line);
      }
      for (const FigureDelta& g : c.grown)
        res.regressions.push_back(fmt::format("{}: check {}: {}", label, name, figure_text(g)));
    }
    d.checks.push_back(std::move(c));
  }

  auto kind_of_layer = [&](int layer) -> std::string {
    for (const RunResult* r : {b, n})
      if (layer >= 0 && layer < int(r->layer_kinds.size())) return r->layer_kinds[layer];
    return "";
  };
  std::map<std::pair<int, std::string>, const KernelTiming*> new_t;
  for (const KernelTiming& t : n->timings) new_t[{t.layer, t.kernel}] = &t;
  std::set<std::pair<int, std::string>> seen;
  for (const KernelTiming& t : b->timings) {
    KernelDelta k;
    k.layer = t.layer;
    k.kernel = t.kernel;
    k.layer_kind = kind_of_layer(t.layer);
    k.in_base = true;
    k.base = t;
    seen.insert({t.layer, t.kernel});
    const auto it = new_t.find({t.layer, t.kernel});
    if (it == new_t.end()) {
      k.verdict = TimeVerdict::only_base;
      k.delta = kNaN;
    } else {
      k.in_new = true;
      k.next = *it->second;
      k.verdict = judge_time(k.base, k.next, o, &k.delta);
      k.gated = o.gate_host_time || (b->backend != "host" && n->backend != "host");
      if (k.verdict == TimeVerdict::slow && !k.gated)
        d.notes.push_back(fmt::format("{}: SLOW {}: host timing, not gated (--gate-host-time gates it)",
                                      kernel_label(k), percent(k.delta)));
      if (k.verdict == TimeVerdict::slow && k.gated)
        res.regressions.push_back(fmt::format(
            "{}: {}: SLOW {} (median {} -> {} ms; spreads {} and {} ms apart)", label,
            kernel_label(k), percent(k.delta), ms(k.base.median_ms), ms(k.next.median_ms),
            spread_text(k.base), spread_text(k.next)));
    }
    d.kernels.push_back(k);
  }
  for (const KernelTiming& t : n->timings) {
    if (seen.count({t.layer, t.kernel})) continue;
    KernelDelta k;
    k.layer = t.layer;
    k.kernel = t.kernel;
    k.layer_kind = kind_of_layer(t.layer);
    k.in_new = true;
    k.next = t;
    k.verdict = TimeVerdict::only_new;
    k.delta = kNaN;
    d.kernels.push_back(k);
  }
}

// ---- the table ----

constexpr size_t kWidth = kReportWidth;

std::string paint(bool color, const std::string& text, const char* code) {
  return color ? fmt::format("\x1b[{}m{}\x1b[0m", code, text) : text;
}

const char* verdict_colour(const std::string& v) {
  if (v.rfind("REGRESSED", 0) == 0 || v == "SLOW" || v.find("FAIL") == 0) return "1;31";
  if (v.rfind("fixed", 0) == 0 || v == "FAST") return "32";
  if (v.rfind("ambiguous", 0) == 0 || v.rfind("only in", 0) == 0 || v.rfind("not run", 0) == 0 ||
      v == "still failing" || v.rfind("insufficient", 0) == 0)
    return "33";
  return nullptr;
}

std::string paint_verdict(bool color, const std::string& v) {
  const char* code = verdict_colour(v);
  return code ? paint(color, v, code) : v;
}

// `text` word-wrapped after `head` at kWidth; continuation lines indented by `indent`.
void wrap(std::string& out, const std::string& head, const std::string& text, size_t indent) {
  std::string line = head;
  bool words = false;
  std::istringstream in(text);
  for (std::string word; in >> word;) {
    while (line.size() + (words ? 1 : 0) + word.size() > kWidth) {
      if (words) {
        out += line + "\n";
        line.assign(indent, ' ');
        words = false;
        continue;
      }
      const size_t room = kWidth > line.size() ? kWidth - line.size() : 0;
      if (room < 8) {  // no room at all after the head: start a fresh line
        out += line + "\n";
        line.assign(indent, ' ');
        continue;
      }
      out += line + word.substr(0, room) + "\n";  // a word wider than a line
      word.erase(0, room);
      line.assign(indent, ' ');
    }
    if (words) line += ' ';
    line += word;
    words = true;
  }
  while (!line.empty() && line.back() == ' ') line.pop_back();
  out += line + "\n";
}

// A row of fixed columns and a verdict last; when it would pass kWidth the verdict
// goes on its own line below.
void row(std::string& out, const std::string& columns, const std::string& verdict, bool color) {
  std::string cols = columns;
  if (cols.size() + verdict.size() <= kWidth) {
    std::string line = cols + paint_verdict(color, verdict);
    while (!line.empty() && line.back() == ' ') line.pop_back();
    out += line + "\n";
    return;
  }
  while (!cols.empty() && cols.back() == ' ') cols.pop_back();
  out += cols.substr(0, kWidth) + "\n";
  out += std::string(6, ' ') + paint_verdict(color, verdict) + "\n";
}

std::string check_state(bool present, bool ran, bool passed) {
  if (!present) return "-";
  if (!ran) return "not run";
  return passed ? "PASS" : "FAIL";
}

void format_scenario(std::string& out, const ScenarioDelta& s, bool color) {
  const std::string label = scenario_label(s.name, s.backend);
  if (!s.in_base || !s.in_new) {
    const std::string what = s.in_base ? "only in BASE (vanished from NEW: REGRESSED)"
                                       : "only in NEW";
    wrap(out, "", label + ": " + paint(color, what, "33"), 4);
    out += "\n";
    return;
  }
  wrap(out, "",
       fmt::format("{}: BASE {}, NEW {}{}", label, s.base_passed ? "PASS" : "FAIL", s.new_passed ? "PASS" : "FAIL",
                   s.regressed() ? ": " + paint(color, "REGRESSED", "1;31") : ""),
       4);
  for (const std::string& n : s.notes) wrap(out, "  note: ", n, 8);

  out += fmt::format("  {:<14}{:<9}{:<9}{:<31}{}\n", "check", "BASE", "NEW", "worst max_abs BASE -> NEW",
                     "verdict");
  for (const CheckDelta& c : s.checks) {
    std::string worst;
    if (c.has_figures) {
      worst = num(c.base_worst) + " -> " + num(c.new_worst);
      const std::string r = ratio_text(c.base_worst, c.new_worst);
      if (!r.empty()) worst += "  " + r;
    }
    row(out,
        fmt::format("  {:<14}{:<9}{:<9}{:<31}", c.name, check_state(c.in_base, c.base_ran, c.base_passed),
                    check_state(c.in_new, c.new_ran, c.new_passed), worst),
        c.verdict, color);
    if (c.in_base && c.in_new && c.base_ran != c.new_ran) {
      const std::string why = c.new_ran ? c.base_why : c.new_why;
      if (!why.empty()) wrap(out, fmt::format("      not run in {}: ", c.new_ran ? "BASE" : "NEW"), why, 8);
    }
    constexpr size_t kListed = 5;
    for (size_t i = 0; i < c.grown.size() && i < kListed; ++i) wrap(out, "      ", figure_text(c.grown[i]), 8);
    if (c.grown.size() > kListed) out += fmt::format("      (+{} more figures grew)\n", c.grown.size() - kListed);
    if (c.regressed && c.base_passed && !c.new_passed) {
      for (const std::string& f : c.new_findings) wrap(out, "      NEW: ", f, 11);
      if (c.new_finding_count > static_cast<long long>(c.new_findings.size()))
        out += fmt::format("      (+{} more findings)\n", c.new_finding_count - c.new_findings.size());
    }
  }

  if (!s.kernels.empty()) {
    // The sample counts go in the header when every kernel of a side has the same.
    auto samples = [&](bool base) -> std::string {
      std::set<int> n;
      for (const KernelDelta& k : s.kernels)
        if (base ? k.in_base : k.in_new) n.insert(base ? k.base.samples : k.next.samples);
      return n.size() == 1 ? fmt::format("n={}", *n.begin()) : "n varies";
    };
    out += fmt::format("  {:<14}{:>7} {:<15} {:>7} {:<15} {:>7}  {}\n", "kernel", "BASE ms",
                       "min..max " + samples(true), "NEW ms", "min..max " + samples(false), "delta",
                       "verdict");
    for (const KernelDelta& k : s.kernels) {
      std::string verdict = time_verdict_text(k.verdict);
      if (k.verdict == TimeVerdict::slow && !k.gated) verdict += " (host, not gated)";
      if (k.verdict == TimeVerdict::insufficient)
        verdict += fmt::format(" ({}/{})", k.base.samples, k.next.samples);
      row(out,
          fmt::format("  {:<14}{:>7} {:<15} {:>7} {:<15} {:>7}  ", kernel_label(k),
                      k.in_base ? ms(k.base.median_ms) : "-", k.in_base ? spread_text(k.base) : "",
                      k.in_new ? ms(k.next.median_ms) : "-", k.in_new ? spread_text(k.next) : "",
                      percent(k.delta)),
          verdict, color);
    }
  }
  out += "\n";
}

json real(double v) { return std::isfinite(v) ? json(v) : json(nullptr); }

const char* time_verdict_code(TimeVerdict v) {
  switch (v) {
    case TimeVerdict::same: return "same";
    case TimeVerdict::slow: return "slow";
    case TimeVerdict::fast: return "fast";
    case TimeVerdict::ambiguous: return "ambiguous";
    case TimeVerdict::insufficient: return "insufficient_samples";
    case TimeVerdict::only_base: return "only_base";
    case TimeVerdict::only_new: return "only_new";
  }
  return "same";
}

json timing_side(bool present, const KernelTiming& t) {
  if (!present) return nullptr;
  return {{"samples", t.samples}, {"median_ms", real(t.median_ms)}, {"min_ms", real(t.min_ms)},
          {"q1_ms", real(t.q1_ms)}, {"q3_ms", real(t.q3_ms)},       {"max_ms", real(t.max_ms)},
          {"tflops", real(t.tflops())}};
}

}  // namespace

const char* time_verdict_text(TimeVerdict v) {
  switch (v) {
    case TimeVerdict::same: return "same";
    case TimeVerdict::slow: return "SLOW";
    case TimeVerdict::fast: return "FAST";
    case TimeVerdict::ambiguous: return "ambiguous (spreads overlap)";
    case TimeVerdict::insufficient: return "insufficient samples";
    case TimeVerdict::only_base: return "only in BASE";
    case TimeVerdict::only_new: return "only in NEW";
  }
  return "same";
}

TimeVerdict judge_time(const KernelTiming& b, const KernelTiming& n, const CompareOptions& o,
                       double* delta) {
  double d = kNaN;
  if (std::isfinite(b.median_ms) && std::isfinite(n.median_ms)) {
    if (b.median_ms > 0) d = (n.median_ms - b.median_ms) / b.median_ms;
    else if (n.median_ms == b.median_ms) d = 0;
    else d = std::numeric_limits<double>::infinity();
  }
  if (delta) *delta = d;
  if (b.samples < o.min_samples || n.samples < o.min_samples || std::isnan(d))
    return TimeVerdict::insufficient;
  if (std::fabs(d) <= o.time_threshold || std::fabs(n.median_ms - b.median_ms) <= o.time_floor_ms)
    return TimeVerdict::same;
  // nvbench's rule: a change counts only when the spreads do not overlap. The
  // spread is the whole observed range: with min..q3, back-to-back runs of the same
  // build whose clocks drifted a little flagged SLOW; min..max does not.
  const bool overlap = b.min_ms <= n.max_ms && n.min_ms <= b.max_ms;
  if (overlap || std::isnan(b.min_ms) || std::isnan(n.min_ms) || std::isnan(b.max_ms) || std::isnan(n.max_ms))
    return TimeVerdict::ambiguous;
  return d > 0 ? TimeVerdict::slow : TimeVerdict::fast;
}

bool ScenarioDelta::regressed() const {
  if (vanished_regression) return true;
  for (const CheckDelta& c : checks)
    if (c.regressed) return true;
  for (const KernelDelta& k : kernels)
    if (k.verdict == TimeVerdict::slow && k.gated) return true;
  return false;
}

void validate_compare_options(const CompareOptions& o) {
  auto positive = [](double v, const char* flag) {
    if (!std::isfinite(v) || !(v > 0))
      throw InputError(fmt::format("{}: expected a finite positive number, found {}", flag, v));
  };
  positive(o.error_factor, "--error-factor");
  if (o.error_factor < 1)
    throw InputError(fmt::format("--error-factor: expected a factor >= 1 (an error may not shrink to pass), found {}",
                                 o.error_factor));
  positive(o.error_floor, "--error-floor");
  positive(o.time_threshold, "--time-threshold");
  positive(o.time_floor_ms, "--time-floor");
}

LoadedReport parse_report(const json& doc, const std::string& path) {
  LoadedReport out;
  out.path = path;
  out.schema_version = schema_version_of(doc, path);
  const DocReader rd(path);
  if (out.schema_version != kReportSchemaVersion)
    rd.fail("$.schema_version", fmt::format("schema_version {}, but this prefill-bench reads schema_version "
                                            "{} (compare reports written by the same schema version)",
                                            out.schema_version, kReportSchemaVersion));
  const json& tool = rd.field(doc, "$", "tool");
  out.tool_version = rd.str(tool, "$.tool", "version");
  out.git_revision = rd.str(tool, "$.tool", "git_revision");
  const json& runs = rd.array(doc, "$", "runs");
  for (size_t i = 0; i < runs.size(); ++i) out.runs.push_back(read_run(rd, runs[i], at("$.runs", i)));
  return out;
}

LoadedReport load_report(const std::string& path) { return parse_report(read_json_file(path), path); }

CompareResult compare_files(const std::string& base_path, const std::string& new_path,
                            const CompareOptions& options) {
  validate_compare_options(options);
  const json base_doc = read_json_file(base_path);
  const int base_v = schema_version_of(base_doc, base_path);
  const json new_doc = read_json_file(new_path);
  const int new_v = schema_version_of(new_doc, new_path);
  if (base_v != new_v)
    throw InputError(fmt::format("{} has schema_version {}, {} has schema_version {}: reports of "
                                 "different schema versions are not compared", base_path, base_v,
                                 new_path, new_v));
  return compare_reports(parse_report(base_doc, base_path), parse_report(new_doc, new_path), options);
}

CompareResult compare_reports(const LoadedReport& base, const LoadedReport& next,
                              const CompareOptions& options) {
  validate_compare_options(options);
  // Vacuous comparisons prove nothing: refused, naming the report.
  for (const LoadedReport* r : {&base, &next})
    if (r->runs.empty())
      throw InputError(fmt::format("{}: $.runs: the report holds no run; an empty report proves nothing",
                                   r->path));
  bool new_checked = false;
  for (const RunResult& r : next.runs)
    for (const CheckResult& c : r.checks) new_checked = new_checked || c.ran;
  if (!new_checked)
    throw InputError(fmt::format("{}: no check ran in any of its {} runs (a --profile report?); compare judges "
                                 "checked runs", next.path, next.runs.size()));
  {
    std::set<std::pair<std::string, std::string>> keys;
    for (const RunResult& r : base.runs) keys.insert({r.scenario_name, r.backend});
    bool common = false;
    for (const RunResult& r : next.runs) common = common || keys.count({r.scenario_name, r.backend});
    if (!common)
      throw InputError(fmt::format("{} and {} have no scenario in common (matched by name and backend): nothing "
                                   "to compare", base.path, next.path));
  }
  // A cold-L2 time and a hot one measure different things: refused, not judged.
  for (const RunResult& b : base.runs)
    for (const RunResult& n : next.runs)
      if (b.scenario_name == n.scenario_name && b.backend == n.backend && !b.l2.empty() && !n.l2.empty() &&
          b.l2 != n.l2)
        throw InputError(fmt::format("{} timed {} on {} with {} L2, {} with {} L2: cold and hot times are not "
                                     "compared (run both with the same --l2 or run.l2_flush)", base.path,
                                     b.scenario_name, b.backend, b.l2, next.path, n.l2));
  CompareResult res;
  res.base_path = base.path;
  res.new_path = next.path;
  res.base_tool = fmt::format("{} (git {})", base.tool_version, base.git_revision);
  res.new_tool = fmt::format("{} (git {})", next.tool_version, next.git_revision);
  res.options = options;

  // (name, backend) -> NEW's runs of that key, in order; the k-th BASE run of a
  // key pairs with the k-th NEW run.
  std::map<std::pair<std::string, std::string>, std::vector<size_t>> new_of;
  for (size_t i = 0; i < next.runs.size(); ++i)
    new_of[{next.runs[i].scenario_name, next.runs[i].backend}].push_back(i);
  std::map<std::pair<std::string, std::string>, size_t> taken;
  std::vector<bool> used(next.runs.size(), false);
  for (const RunResult& b : base.runs) {
    const std::pair<std::string, std::string> key{b.scenario_name, b.backend};
    ScenarioDelta d;
    d.name = b.scenario_name;
    d.backend = b.backend;
    d.in_base = true;
    const std::vector<size_t>& cands = new_of[key];
    const size_t k = taken[key]++;
    const RunResult* n = nullptr;
    if (k < cands.size()) {
      n = &next.runs[cands[k]];
      used[cands[k]] = true;
      d.in_new = true;
    } else {
      d.vanished_regression = true;
      res.regressions.push_back(fmt::format("scenario {} only in BASE: it vanished from NEW",
                                            scenario_label(d.name, d.backend)));
    }
    compare_run(&b, n, options, d, res);
    res.scenarios.push_back(std::move(d));
  }
  for (size_t i = 0; i < next.runs.size(); ++i) {
    if (used[i]) continue;
    ScenarioDelta d;
    d.name = next.runs[i].scenario_name;
    d.backend = next.runs[i].backend;
    d.in_new = true;
    compare_run(nullptr, &next.runs[i], options, d, res);
    res.scenarios.push_back(std::move(d));
  }
  return res;
}

std::string format_compare(const CompareResult& r, bool color) {
  std::string out;
  const CompareOptions& o = r.options;
  size_t base_runs = 0, new_runs = 0, matched = 0, only_base = 0, only_new = 0, regressed = 0;
  for (const ScenarioDelta& s : r.scenarios) {
    base_runs += s.in_base;
    new_runs += s.in_new;
    matched += s.in_base && s.in_new;
    only_base += s.in_base && !s.in_new;
    only_new += s.in_new && !s.in_base;
    regressed += s.regressed();
  }
  out += "prefill-bench compare\n";
  wrap(out, "  BASE  ", fmt::format("{}: prefill-bench {}, {} {}", r.base_path, r.base_tool, base_runs,
                                    base_runs == 1 ? "run" : "runs"), 8);
  wrap(out, "  NEW   ", fmt::format("{}: prefill-bench {}, {} {}", r.new_path, r.new_tool, new_runs,
                                    new_runs == 1 ? "run" : "runs"), 8);
  wrap(out, "  gate  ",
       fmt::format("a check PASS -> FAIL or no longer run; a scenario gone; a numeric/state max_abs "
                   "grown past x{} (and above {}); a median grown past {:+.0f}% and {} ms with spreads "
                   "(min..max) apart{}; fewer than {} samples are not judged",
                   o.error_factor, o.error_floor, o.time_threshold * 100, o.time_floor_ms,
                   o.gate_host_time ? " (host timing gated too)" : " (host timing reported, not gated)",
                   o.min_samples),
       8);
  out += "\n";
  for (const ScenarioDelta& s : r.scenarios) format_scenario(out, s, color);

  if (!r.regressions.empty()) {
    out += paint(color, fmt::format("{} {}:", r.regressions.size(),
                                    r.regressions.size() == 1 ? "regression" : "regressions"), "1;31") + "\n";
    for (const std::string& line : r.regressions) wrap(out, "  ", line, 4);
  }
  if (!r.warnings.empty()) {
    out += paint(color, fmt::format("{} {}:", r.warnings.size(), r.warnings.size() == 1 ? "warning" : "warnings"),
                 "33") + "\n";
    for (const std::string& line : r.warnings) wrap(out, "  ", line, 4);
  }
  const std::string counts = fmt::format("{} matched, {} only in BASE, {} only in NEW", matched,
                                         only_base, only_new);
  if (r.regressed())
    out += paint(color, fmt::format("REGRESSED: {} {} in {} of {} scenarios ({})", r.regressions.size(),
                                    r.regressions.size() == 1 ? "regression" : "regressions", regressed,
                                    matched, counts), "1;31") + "\n";
  else
    out += fmt::format("no regression ({})\n", counts);
  return out;
}

json compare_json(const CompareResult& r) {
  json scenarios = json::array();
  for (const ScenarioDelta& s : r.scenarios) {
    json checks = json::array();
    for (const CheckDelta& c : s.checks) {
      json grown = json::array();
      for (const FigureDelta& g : c.grown)
        grown.push_back({{"layer", g.layer}, {"stream", g.stream}, {"what", g.what},
                         {"base_max_abs", real(g.base_max_abs)}, {"new_max_abs", real(g.new_max_abs)},
                         {"base_nonfinite", g.base_nonfinite}, {"new_nonfinite", g.new_nonfinite}});
      auto side = [&](bool present, bool ran, bool passed, const std::string& why, double worst) -> json {
        if (!present) return nullptr;
        return {{"ran", ran}, {"passed", passed}, {"not_run_why", why},
                {"worst_max_abs", c.has_figures ? real(worst) : json(nullptr)}};
      };
      checks.push_back({{"name", c.name},
                        {"base", side(c.in_base, c.base_ran, c.base_passed, c.base_why, c.base_worst)},
                        {"new", side(c.in_new, c.new_ran, c.new_passed, c.new_why, c.new_worst)},
                        {"grown", grown},
                        {"new_findings", c.new_findings},
                        {"regressed", c.regressed},
                        {"verdict", c.verdict}});
    }
    json kernels = json::array();
    for (const KernelDelta& k : s.kernels)
      kernels.push_back({{"layer", k.layer},
                         {"layer_kind", k.layer_kind},
                         {"kernel", k.kernel},
                         {"base", timing_side(k.in_base, k.base)},
                         {"new", timing_side(k.in_new, k.next)},
                         {"delta", real(k.delta)},
                         {"verdict", time_verdict_code(k.verdict)},
                         {"gated", k.gated},
                         {"verdict_text", time_verdict_text(k.verdict)}});
    scenarios.push_back({{"name", s.name},
                         {"backend", s.backend},
                         {"in_base", s.in_base},
                         {"in_new", s.in_new},
                         {"base_passed", s.in_base ? json(s.base_passed) : json(nullptr)},
                         {"new_passed", s.in_new ? json(s.new_passed) : json(nullptr)},
                         {"regressed", s.regressed()},
                         {"notes", s.notes},
                         {"checks", checks},
                         {"kernels", kernels}});
  }
  return {{"compare_schema_version", kCompareSchemaVersion},
          {"base", {{"path", r.base_path}, {"tool", r.base_tool}}},
          {"new", {{"path", r.new_path}, {"tool", r.new_tool}}},
          {"options",
           {{"error_factor", r.options.error_factor},
            {"error_floor", r.options.error_floor},
            {"time_threshold", r.options.time_threshold},
            {"time_floor_ms", r.options.time_floor_ms},
            {"gate_host_time", r.options.gate_host_time},
            {"min_samples", r.options.min_samples}}},
          {"scenarios", scenarios},
          {"regressions", r.regressions},
          {"warnings", r.warnings},
          {"passed", !r.regressed()}};
}

}  // namespace pb
