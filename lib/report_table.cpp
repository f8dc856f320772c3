// report_table.cpp: the report for people. Per run: header, streams with a
// verdict letter per check, check summaries (worst figure, first findings),
// kernel timings; then the overall count. Every line fits kReportWidth
// columns: long text is wrapped, never cut; only header names are shortened.
#include <algorithm>
#include <cctype>
#include <cmath>
#include <limits>
#include <map>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "number_format.h"

#include "report.h"
#include "verdict.h"

namespace pb {

namespace {

constexpr size_t kWidth = kReportWidth;
constexpr size_t kManyStreams = 16;   // above this, only the worst are listed...
constexpr size_t kWorstStreams = 8;   // ...at least this many, and every failing one
constexpr size_t kListedFindings = 5; // per check
constexpr size_t kPerLayerTimings = 4;  // up to this many layers: one line per layer

class Painter {
 public:
  explicit Painter(bool color) : color_(color) {}
  std::string operator()(const std::string& text, const char* code) const {
    return color_ ? fmt::format("\x1b[{}m{}\x1b[0m", code, text) : text;
  }
  std::string pass() const { return (*this)("PASS", "32"); }
  std::string fail() const { return (*this)("FAIL", "1;31"); }
  std::string verdict(Verdict v) const {
    switch (v) {
      case Verdict::passed: return pass();
      case Verdict::failed: return fail();
      case Verdict::not_checked: return (*this)(verdict_label(v), "33");
      case Verdict::error: return (*this)(verdict_label(v), "1;31");
    }
    return fail();
  }

 private:
  bool color_;
};

std::string num(double v) { return format_figure(v); }
std::string ms(double v) { return format_ms(v); }

// A rate: two decimals, or three significant digits when that would show 0.00.
std::string rate(double v) {
  if (!std::isfinite(v)) return num(v);
  if (v >= 1000) return fmt::format("{:.0f}", v);
  if (v >= 0.01 || v == 0) return fmt::format("{:.2f}", v);
  return fmt::format("{:.2e}", v);
}

std::string shorten(const std::string& s, size_t width) {
  if (s.size() <= width) return s;
  if (width <= 3) return s.substr(0, width);
  return s.substr(0, width - 3) + "...";
}

std::string plural(long long n, const char* one, const char* many) {
  return fmt::format("{} {}", n, n == 1 ? one : many);
}

// "layer 1 stream 2", "layer 1", "stream 2" or "".
std::string where(int layer, int stream) {
  std::string s;
  if (layer >= 0) s = fmt::format("layer {}", layer);
  if (stream >= 0) s += fmt::format("{}stream {}", s.empty() ? "" : " ", stream);
  return s;
}

// Appends `head` (visible width `head_width`, may hold colour codes) and then
// `text`, word-wrapped at kWidth; continuation lines start at column `indent`.
void wrapped(std::string& out, const std::string& head, size_t head_width,
             const std::string& text, size_t indent) {
  std::string line = head;
  size_t col = head_width;
  bool words = false;  // the current line holds a word of `text`
  auto flush = [&] {
    while (!line.empty() && line.back() == ' ') line.pop_back();
    out += line;
    out += '\n';
    line.assign(indent, ' ');
    col = indent;
    words = false;
  };
  const size_t room = kWidth > indent + 8 ? kWidth - indent : 8;
  size_t i = 0;
  while (i < text.size()) {
    if (text[i] == '\n') {
      flush();
      ++i;
      continue;
    }
    if (text[i] == ' ' || text[i] == '\t' || text[i] == '\r') {
      ++i;
      continue;
    }
    size_t j = i;
    while (j < text.size() && text[j] != ' ' && text[j] != '\n' && text[j] != '\t' &&
           text[j] != '\r')
      ++j;
    std::string word = text.substr(i, j - i);
    i = j;
    while (!word.empty()) {
      const size_t need = word.size() + (words ? 1 : 0);
      if (col + need <= kWidth) {
        if (words) line += ' ';
        line += word;
        col += need;
        words = true;
        break;
      }
      if (words || col > indent) {
        flush();
        continue;
      }
      // A word longer than a whole line: break it.
      line += word.substr(0, room);
      word.erase(0, room);
      col += room;
      words = true;
    }
  }
  flush();
}

// Like wrapped(), but breaks only between `items` (joined by `sep`); an item
// wider than a line is word-wrapped on its own.
void wrapped_items(std::string& out, const std::string& head, size_t head_width,
                   const std::vector<std::string>& items, const char* sep, size_t indent) {
  std::string line = head;
  size_t col = head_width;
  bool any = false;  // the current line holds an item
  const size_t sep_w = std::char_traits<char>::length(sep);
  for (const std::string& item : items) {
    if (any && col + sep_w + item.size() > kWidth) {
      while (!line.empty() && line.back() == ' ') line.pop_back();
      out += line + '\n';
      line.assign(indent, ' ');
      col = indent;
      any = false;
    }
    if (!any && col + item.size() > kWidth) {  // too wide even alone
      std::string rest_head = line;
      wrapped(out, rest_head, col, item, indent);
      line.assign(indent, ' ');
      col = indent;
      continue;
    }
    if (any) {
      line += sep;
      col += sep_w;
    }
    line += item;
    col += item.size();
    any = true;
  }
  if (any || col > indent || items.empty()) {
    while (!line.empty() && line.back() == ' ') line.pop_back();
    out += line + '\n';
  }
}

// One letter per check in the stream table.
char check_letter(const std::string& name) {
  static const std::map<std::string, char> letters = {
      {kCheckLayout, 'L'},  {kCheckMetadata, 'M'}, {kCheckScratchGuard, 'G'}, {kCheckBufferGuard, 'B'}, {kCheckNumeric, 'N'},
      {kCheckCausalBound, 'C'}, {kCheckKvWrite, 'K'},  {kCheckState, 'S'},
      {kCheckPositions, 'P'},   {kCheckDeterminism, 'D'}, {kCheckGraph, 'R'}};  // R: graph replay
  auto it = letters.find(name);
  if (it != letters.end()) return it->second;
  return name.empty() ? '?' : static_cast<char>(std::toupper(static_cast<unsigned char>(name[0])));
}

// Larger is worse; NaN counts as the worst.
void take_worst(double& worst, double v) {
  if (std::isnan(worst)) return;
  if (std::isnan(v) || v > worst) worst = v;
}

// How close a figure came to (or how far past) its limit; NaN/Inf/nonfinite are infinite.
double badness(const Figure& f) {
  if (!std::isfinite(f.max_abs) || has_counts(f)) return std::numeric_limits<double>::infinity();
  if (f.limit > 0) return f.max_abs / f.limit;
  return f.max_abs > 0 ? std::numeric_limits<double>::infinity() : 0;
}

bool worse(const Figure& a, const Figure& b) {
  if (a.pass != b.pass) return !a.pass;
  const double ba = badness(a), bb = badness(b);
  if (ba != bb) return ba > bb;
  return (std::isnan(a.max_abs) ? std::numeric_limits<double>::infinity() : a.max_abs) >
         (std::isnan(b.max_abs) ? std::numeric_limits<double>::infinity() : b.max_abs);
}

std::vector<std::string> figure_items(const Figure& f) {
  std::string at = where(f.layer, f.stream);
  if (!f.what.empty()) at += (at.empty() ? "" : " ") + f.what;
  std::vector<std::string> items = {"worst " + at + ":"};
  // A count figure (wrong slots, entries, rows) has no error to show, only its counts.
  if (f.limit == 0 && f.lowp_max_abs == 0 && f.max_abs == 0 && f.rel_l2 == 0) {
    items.push_back(has_counts(f) ? figure_counts(f) : fmt::format("0 wrong of {}", f.elements));
    return items;
  }
  items.push_back("max_abs " + num(f.max_abs));
  if (f.limit > 0 || f.lowp_max_abs > 0)
    items.push_back(fmt::format("(limit {}, lowp {}),", num(f.limit), num(f.lowp_max_abs)));
  else
    items.back() += ",";
  items.push_back("rel_l2 " + num(f.rel_l2));
  if (has_counts(f)) {
    items.back() += ",";
    items.push_back(figure_counts(f));
  }
  return items;
}

// What the stream table needs of one run, gathered once.
struct StreamView {
  std::vector<std::vector<char>> verdict;  // [stream][check]: '.', 'X', '-'
  std::vector<bool> failing;
  std::vector<double> max_abs, rel_l2, badness;  // worst numeric figure per stream
  std::vector<bool> has_numeric, nonfinite;
};

StreamView stream_view(const RunResult& r) {
  const size_t n = r.streams.size();
  StreamView v;
  v.verdict.assign(n, std::vector<char>(r.checks.size(), '.'));
  v.failing.assign(n, false);
  v.max_abs.assign(n, 0);
  v.rel_l2.assign(n, 0);
  v.badness.assign(n, 0);
  v.has_numeric.assign(n, false);
  v.nonfinite.assign(n, false);
  auto mark = [&](int stream, size_t c) {
    if (stream < 0 || static_cast<size_t>(stream) >= n) return;
    v.verdict[stream][c] = 'X';
    v.failing[stream] = true;
  };
  for (size_t c = 0; c < r.checks.size(); ++c) {
    const CheckResult& check = r.checks[c];
    if (!check.ran) {
      for (size_t b = 0; b < n; ++b) v.verdict[b][c] = '-';
      continue;
    }
    for (const Finding& f : check.findings) mark(f.stream, c);
    for (const Figure& f : check.figures) {
      if (!f.pass) mark(f.stream, c);
      if (check.name != kCheckNumeric || f.stream < 0 || static_cast<size_t>(f.stream) >= n)
        continue;
      v.has_numeric[f.stream] = true;
      if (f.nonfinite > 0) v.nonfinite[f.stream] = true;
      take_worst(v.max_abs[f.stream], f.max_abs);
      take_worst(v.rel_l2[f.stream], f.rel_l2);
      take_worst(v.badness[f.stream], badness(f));
    }
  }
  return v;
}

// Every stream when there are few; else every failing one and the worst of the
// rest, at least kWorstStreams, in index order.
std::vector<size_t> shown_streams(const StreamView& v) {
  const size_t n = v.failing.size();
  std::vector<size_t> order(n);
  for (size_t b = 0; b < n; ++b) order[b] = b;
  if (n <= kManyStreams) return order;
  auto key = [&](size_t b) { return std::isnan(v.badness[b]) ? 1e300 : v.badness[b]; };
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    if (v.failing[a] != v.failing[b]) return static_cast<bool>(v.failing[a]);
    return key(a) > key(b);
  });
  size_t keep = 0;
  while (keep < n && (keep < kWorstStreams || v.failing[order[keep]])) ++keep;
  order.resize(keep);
  std::sort(order.begin(), order.end());
  return order;
}

// The kernel library the layers ran on, and every layer it did not run.
void kernel_library(std::string& out, const RunResult& r, const Painter& paint) {
  const KernelLibraryInfo& k = r.library;
  if (k.name.empty()) return;
  const bool builtin = k.path == "built-in";
  wrapped(out, "  kernels: ", 11,
          fmt::format("{} {} ({}, {}): {}", k.name, k.version, k.path, k.device,
                      k.describe.empty() ? "-" : k.describe), 4);
  std::vector<std::string> items;
  items.push_back("entries " + (k.entries.empty() ? std::string("layer only") : [&] {
    std::string e;
    for (const std::string& n : k.entries) e += (e.empty() ? "" : ",") + n;
    return e;
  }()));
  items.push_back(k.schedule ? "determinism rerun in another work order" : "schedule not honoured: same-order rerun");
  if (!builtin) items.push_back("sha256 " + k.sha256);
  wrapped_items(out, "      ", 6, items, "  ", 6);
  for (const SkippedLayer& sl : r.skipped_layers)
    wrapped(out, "  " + paint("SKIPPED", "1;33") + " ", 10,
            fmt::format("layer {} ({}) skipped by {}: {} (not checked: the run does not pass)", sl.layer,
                        sl.layer < static_cast<int>(r.layer_kinds.size()) ? r.layer_kinds[sl.layer] : "?",
                        k.name, sl.why), 4);
}

void header(std::string& out, const RunResult& r, const Painter& paint) {
  // Layer kinds as counts in order of first appearance: "2 attn, 2 gdn".
  std::vector<std::pair<std::string, int>> kinds;
  for (const std::string& k : r.layer_kinds) {
    auto it = std::find_if(kinds.begin(), kinds.end(), [&](const auto& p) { return p.first == k; });
    if (it == kinds.end())
      kinds.push_back({k, 1});
    else
      ++it->second;
  }
  std::string kind_text;
  for (const auto& [k, count] : kinds)
    kind_text += fmt::format("{}{} {}", kind_text.empty() ? "" : ", ", count, k);
  const std::string rest = fmt::format(
      "  seed {}  {}  {}  {}{}", r.seed, plural(r.streams.size(), "stream", "streams"),
      plural(r.total_tokens, "token", "tokens"),
      plural(r.layer_kinds.size(), "layer", "layers"),
      kind_text.empty() ? "" : " (" + kind_text + ")");
  // "PASS  name  backend on device" + rest. The name has priority: the device is
  // shortened, or left to the line below when even a short one does not fit.
  constexpr size_t kMinDevice = 12;
  const std::string device_name = r.device.name.empty() ? "?" : r.device.name;
  const Verdict v = verdict(r);
  const size_t fixed = std::string(verdict_label(v)).size() + 2 + 2 + r.backend.size() + rest.size();
  const size_t room = fixed + 16 < kWidth ? kWidth - fixed : 16;  // name + " on " + device
  size_t name_w = r.scenario_name.size();
  std::string device;
  if (name_w + 4 + device_name.size() <= room)
    device = device_name;
  else if (name_w + 4 + kMinDevice <= room)
    device = shorten(device_name, room - name_w - 4);
  else
    name_w = std::min(name_w, room);
  const bool device_cut = device != device_name;
  out += fmt::format("{}  {}  {}{}{}\n", paint.verdict(v),
                     paint(shorten(r.scenario_name, name_w), "1"), r.backend,
                     device.empty() ? "" : " on " + device, rest);

  const DeviceInfo& d = r.device;
  std::vector<std::string> info;
  if (r.scenario_name.size() > name_w) info.push_back("scenario " + r.scenario_name);
  if (device_cut) info.push_back("device " + d.name);
  for (std::string item : {
      fmt::format("file {}", r.scenario_path.empty() ? "-" : r.scenario_path),
      fmt::format("inputs_checksum {:016x}", r.inputs_checksum),
      fmt::format("chunk_len {}", r.chunk_len),
      fmt::format("max_blocks_per_seq {}", r.max_blocks_per_seq),
      fmt::format("staged_bytes {}", r.staged_bytes),
      fmt::format("ref_sample {}", r.ref_sample == 0 ? std::string("full")
                                                     : std::to_string(r.ref_sample))})
    info.push_back(std::move(item));
  if (!d.driver.empty()) info.push_back("driver " + d.driver);
  if (!d.runtime.empty()) info.push_back("runtime " + d.runtime);
  if (d.sm_count > 0) info.push_back(fmt::format("{} SMs", d.sm_count));
  if (d.peak_tflops > 0) info.push_back(fmt::format("peak {:.0f} TFLOP/s", d.peak_tflops));
  if (d.peak_gbps > 0) info.push_back(fmt::format("peak {:.0f} GB/s", d.peak_gbps));
  info.push_back(fmt::format("wall {:.2f} s", r.wall_s));
  std::string faults;
  for (const FaultInfo& f : all_faults())
    if (r.faults.has(f.fault)) faults += fmt::format("{}{}", faults.empty() ? "" : ", ", f.name);
  if (!faults.empty()) info.push_back("injected: " + faults);
  wrapped_items(out, "      ", 6, info, "  ", 6);
  kernel_library(out, r, paint);
  if (!r.error.empty())
    wrapped(out, r.kernel_failed ? "      kernel library failed: " : "      error: ", r.kernel_failed ? 29 : 13,
            r.error, 8);
  if (v == Verdict::not_checked)
    wrapped(out, "      ", 6,
            requested_check_not_run(r)
                ? "not checked: --graph asked for the graph check and it could not run (below), so the run is not passed"
                : "not checked: no check ran (--profile runs none), so nothing was proven",
            8);
}

void streams(std::string& out, const RunResult& r, const StreamView& v, const Painter& paint) {
  if (r.streams.empty()) return;
  std::string letters;
  for (const CheckResult& c : r.checks) letters += fmt::format(" {}", check_letter(c.name));
  out += fmt::format("  {:>6} {:>6} {:>6} {:>7} {:>6} {:>3} {:>10} {:>10} {}\n", "stream",
                     "start", "count", "kv_len", "blocks", "img", "max_abs", "rel_l2", letters);
  const std::vector<size_t> shown = shown_streams(v);
  for (size_t b : shown) {
    const StreamSummary& s = r.streams[b];
    std::string cells;
    for (char c : v.verdict[b]) {
      const std::string cell(1, c);
      cells += " " + (c == 'X' ? paint(cell, "1;31") : c == '-' ? paint(cell, "2") : cell);
    }
    // max_abs is over the finite values; NaN/Inf outputs say so instead.
    const std::string abs = !v.has_numeric[b] ? "-" : v.nonfinite[b] ? "nonfinite" : num(v.max_abs[b]);
    const std::string rel = v.has_numeric[b] ? num(v.rel_l2[b]) : "-";
    out += fmt::format("  {:>6} {:>6} {:>6} {:>7} {:>6} {:>3} {:>10} {:>10} {}\n", b,
                       s.chunk_start, s.count, s.kv_len, s.blocks, s.has_image ? "yes" : "",
                       abs, rel, cells);
  }
  if (shown.size() < r.streams.size())
    out += fmt::format("  ... {} all passing\n",
                       plural(r.streams.size() - shown.size(), "more stream", "more streams"));
}

void checks(std::string& out, const RunResult& r, const Painter& paint) {
  constexpr size_t kNameW = 14, kVerdictW = 9;
  constexpr size_t kDetail = 2 + kNameW + kVerdictW;
  for (const CheckResult& c : r.checks) {
    const std::string name = fmt::format("  {:<{}}", shorten(c.name, kNameW - 1), kNameW);
    if (!c.ran) {
      const std::string head = name + paint(fmt::format("{:<{}}", "not run", kVerdictW), "33");
      wrapped(out, head, kDetail, c.not_run_why.empty() ? "(no reason given)" : c.not_run_why,
              kDetail);
      continue;
    }
    const std::string head =
        name + (c.passed ? paint.pass() : paint.fail()) + std::string(kVerdictW - 4, ' ');
    std::vector<std::string> detail;
    const long long count = std::max<long long>(c.finding_count, c.findings.size());
    if (count > 0)
      detail.push_back(plural(count, "finding", "findings") + (c.figures.empty() ? "" : ";"));
    if (!c.figures.empty()) {
      const Figure& w = *std::min_element(c.figures.begin(), c.figures.end(), worse);
      for (std::string& item : figure_items(w)) detail.push_back(std::move(item));
    }
    wrapped_items(out, head, kDetail, detail, " ", kDetail);
    const size_t listed = std::min(c.findings.size(), kListedFindings);
    for (size_t i = 0; i < listed; ++i) {
      const Finding& f = c.findings[i];
      const std::string at = where(f.layer, f.stream);
      wrapped(out, "      ", 6, at.empty() ? f.message : at + ": " + f.message, 8);
    }
    if (count > static_cast<long long>(listed))
      out += fmt::format("      (+{} more)\n", count - static_cast<long long>(listed));
  }
}

// One row of the timing table: a layer (or a kind of layer) and a kernel.
struct TimingRow {
  std::string label, kernel;
  long long samples = 0;
  double median_ms = 0, min_ms = 0, max_ms = 0;
  double flops = 0, bytes = 0, time_ms = 0;  // summed work and summed medians
};

std::string layer_kind(const RunResult& r, int layer) {
  return layer >= 0 && static_cast<size_t>(layer) < r.layer_kinds.size() ? r.layer_kinds[layer]
                                                                          : "?";
}

std::vector<TimingRow> timing_rows(const RunResult& r, bool per_layer) {
  std::vector<TimingRow> rows;
  if (per_layer) {
    for (const KernelTiming& t : r.timings)
      rows.push_back({fmt::format("{} {}", t.layer, layer_kind(r, t.layer)), t.kernel, t.samples,
                      t.median_ms, t.min_ms, t.max_ms, t.flops, t.bytes, t.median_ms});
    return rows;
  }
  // Identical kernels of layers of one kind: median of the layer medians, min
  // and max over all samples, throughput from summed work over summed medians.
  std::vector<std::pair<std::string, std::string>> keys;
  std::vector<std::vector<const KernelTiming*>> groups;
  for (const KernelTiming& t : r.timings) {
    const std::pair<std::string, std::string> key{layer_kind(r, t.layer), t.kernel};
    auto it = std::find(keys.begin(), keys.end(), key);
    if (it == keys.end()) {
      keys.push_back(key);
      groups.emplace_back();
      it = keys.end() - 1;
    }
    groups[it - keys.begin()].push_back(&t);
  }
  for (size_t g = 0; g < keys.size(); ++g) {
    TimingRow row;
    std::vector<int> layers;
    std::vector<double> medians;
    row.min_ms = std::numeric_limits<double>::infinity();
    row.max_ms = -std::numeric_limits<double>::infinity();
    for (const KernelTiming* t : groups[g]) {
      if (std::find(layers.begin(), layers.end(), t->layer) == layers.end())
        layers.push_back(t->layer);
      medians.push_back(t->median_ms);
      row.samples += t->samples;
      row.min_ms = std::min(row.min_ms, t->min_ms);
      row.max_ms = std::max(row.max_ms, t->max_ms);
      row.flops += t->flops;
      row.bytes += t->bytes;
      row.time_ms += t->median_ms;
    }
    std::sort(medians.begin(), medians.end());
    const size_t m = medians.size();
    row.median_ms = m % 2 ? medians[m / 2] : (medians[m / 2 - 1] + medians[m / 2]) / 2;
    row.label = fmt::format("{} x{}", keys[g].first, layers.size());
    row.kernel = keys[g].second;
    rows.push_back(row);
  }
  return rows;
}

std::string join_names(const std::vector<std::string>& names) {
  std::string s;
  for (const std::string& n : names) s += (s.empty() ? "" : ", ") + n;
  return s;
}

// "timing: L2 cold, noise rule (target 0.5%): worst spread 1.2% (L1 gdn), stop: 3 target, 1 budget"
std::string timing_line(const RunResult& r) {
  const TimingPolicy& p = r.timing;
  std::string s = fmt::format("timing: L2 {}", r.l2);
  if (p.l2_flush && r.l2 == "hot") s += " (no flush on this backend)";
  if (p.fixed) s += fmt::format(", fixed {} sample{} ({})", *p.fixed, *p.fixed == 1 ? "" : "s", p.fixed_why);
  else s += fmt::format(", noise rule (target {:.2g}%, min {} samples, {:.3g} s a layer)", 100 * p.noise.target,
                        p.noise.min_samples, p.noise.max_time_s);
  const KernelTiming* worst = nullptr;
  std::map<std::string, int> stops;
  for (const KernelTiming& t : r.timings) {
    if (!worst || t.rel_stdev > worst->rel_stdev) worst = &t;
    ++stops[t.stop];
  }
  if (worst && worst->samples > 1)
    s += fmt::format("; worst spread {:.2f}% (L{} {})", 100 * worst->rel_stdev, worst->layer, worst->kernel);
  if (!p.fixed && !stops.empty()) {
    std::vector<std::string> parts;
    for (const auto& [why, n] : stops) parts.push_back(fmt::format("{} {}", n, why));
    s += "; stop: " + join_names(parts);
  }
  return s;
}

void timings(std::string& out, const RunResult& r) {
  if (r.timings.empty()) {
    out += "  timings: none\n";
    return;
  }
  std::vector<int> layers;
  for (const KernelTiming& t : r.timings)
    if (std::find(layers.begin(), layers.end(), t.layer) == layers.end()) layers.push_back(t.layer);
  const bool per_layer = layers.size() <= kPerLayerTimings;
  const DeviceInfo& d = r.device;
  const bool peaks = d.peak_tflops > 0 || d.peak_gbps > 0;
  auto pct = [](double v, double peak) {
    return peak > 0 && std::isfinite(v) ? fmt::format("{:.1f}%", 100 * v / peak) : "-";
  };
  std::string head = fmt::format("  {:<10} {:<11} {:>7} {:>9} {:>9} {:>9} {:>9}", "layer",
                                 "kernel", "samples", "median_ms", "min_ms", "max_ms", "TFLOP/s");
  if (peaks) head += fmt::format(" {:>6}", "%peak");
  head += fmt::format(" {:>9}", "GB/s");
  if (peaks) head += fmt::format(" {:>6}", "%peak");
  out += head + "\n";
  bool gdn_note = false;
  for (const TimingRow& row : timing_rows(r, per_layer)) {
    const double tflops = row.time_ms > 0 ? row.flops / (row.time_ms * 1e9) : 0;
    const double gbps = row.time_ms > 0 ? row.bytes / (row.time_ms * 1e6) : 0;
    const bool gdn = row.kernel == "gdn";
    gdn_note = gdn_note || (gdn && row.flops > 0);
    // "-" where no work of the kind was counted (rope has no FLOPs worth the name).
    const bool has_flops = row.flops > 0, has_bytes = row.bytes > 0;
    std::string line = fmt::format(
        "  {:<10} {:<11} {:>7} {:>9} {:>9} {:>9} {:>8}{}", shorten(row.label, 10),
        shorten(row.kernel == "graph_replay" ? "graph" : row.kernel, 11), row.samples, ms(row.median_ms), ms(row.min_ms), ms(row.max_ms),
        has_flops ? rate(tflops) : "-", gdn && has_flops ? "*" : " ");
    if (peaks) line += fmt::format(" {:>6}", has_flops ? pct(tflops, d.peak_tflops) : "-");
    line += fmt::format(" {:>9}", has_bytes ? rate(gbps) : "-");
    if (peaks) line += fmt::format(" {:>6}", has_bytes ? pct(gbps, d.peak_gbps) : "-");
    out += line + "\n";
  }
  if (!per_layer)
    wrapped(out, "  ", 2,
            fmt::format("({} layers, identical kernels of one layer kind aggregated: median of "
                        "the layer medians, min and max over all samples, throughput from the "
                        "summed work over the summed medians)",
                        layers.size()),
            3);
  if (gdn_note)
    wrapped(out, "  ", 2,
            "* gdn FLOPs are the common 4*T*H*d^2 (docs/DESIGN.md \"Counting work\"), which leaves "
            "out the intra-chunk terms",
            4);
  wrapped(out, "  ", 2, timing_line(r), 4);
  // Throttling seen by NVML before or after the timed runs: the times may be slow.
  std::vector<std::string> throttled = r.clocks_before.throttle;
  for (const std::string& t : r.clocks_after.throttle)
    if (std::find(throttled.begin(), throttled.end(), t) == throttled.end()) throttled.push_back(t);
  if (!throttled.empty())
    wrapped(out, "  ", 2,
            fmt::format("THROTTLED around the timed runs: {}; before: {}; after: {}", join_names(throttled),
                        clocks_line(r.clocks_before), clocks_line(r.clocks_after)),
            4);
}

}  // namespace

std::string format_table(const std::vector<RunResult>& runs, bool color) {
  const Painter paint(color);
  std::string out;
  // The stream table's check letters, over every check any run reports.
  std::vector<std::string> names;
  for (const RunResult& r : runs)
    for (const CheckResult& c : r.checks)
      if (std::find(names.begin(), names.end(), c.name) == names.end()) names.push_back(c.name);
  if (!names.empty()) {
    std::vector<std::string> legend;
    for (const std::string& n : names) legend.push_back(fmt::format("{} {},", check_letter(n), n));
    legend.push_back("per stream: . pass, X fail, - not run");
    wrapped_items(out, "checks: ", 8, legend, " ", 8);
  }
  int passed = 0, not_checked = 0, errors = 0;
  for (const RunResult& r : runs) {
    out += '\n';
    header(out, r, paint);
    streams(out, r, stream_view(r), paint);
    checks(out, r, paint);
    timings(out, r);
    const Verdict v = verdict(r);
    passed += v == Verdict::passed;
    not_checked += v == Verdict::not_checked;
    errors += v == Verdict::error;
  }
  const int failed = static_cast<int>(runs.size()) - passed - not_checked - errors;
  const std::string failed_text = fmt::format("{} failed", failed);
  std::string more;
  if (not_checked) more += fmt::format(", {} not checked", not_checked);
  if (errors) more += ", " + paint(fmt::format("{} stopped on an error", errors), "1;31");
  out += fmt::format("\n{}, {} passed, {}{}\n",
                     plural(runs.size(), "scenario", "scenarios"), passed,
                     failed > 0 ? paint(failed_text, "1;31") : failed_text, more);
  return out;
}

}  // namespace pb
