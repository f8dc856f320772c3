// report_junit.cpp: JUnit XML (report_junit.h). Counts on <testsuites> and each
// <testsuite> equal their children: tests = checks, failures = checks that ran
// and failed, skipped = checks that did not run, errors = runs that stopped on an
// internal error (one <error> testcase "run" each; bad input never reaches a report);
// a run the kernel library stopped (KernelFailure) is a <failure> testcase "run".
#include "report_junit.h"

#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <stdexcept>

#include <fmt/format.h>

#include "build_info.h"

namespace pb {

namespace {

constexpr const char* kReplacement = "\xEF\xBF\xBD";  // U+FFFD
constexpr size_t kMessageChars = 300;                 // the failure message attribute

// Length of the valid UTF-8 sequence at s[i] that XML 1.0 allows, or 0.
size_t xml_char_length(const std::string& s, size_t i) {
  const auto byte = [&](size_t k) { return static_cast<unsigned char>(s[k]); };
  const unsigned char c = byte(i);
  if (c < 0x80) return (c >= 0x20 || c == '\t' || c == '\n' || c == '\r') ? 1 : 0;
  size_t n;
  uint32_t cp;
  if ((c & 0xE0) == 0xC0) n = 2, cp = c & 0x1F;
  else if ((c & 0xF0) == 0xE0) n = 3, cp = c & 0x0F;
  else if ((c & 0xF8) == 0xF0) n = 4, cp = c & 0x07;
  else return 0;
  if (i + n > s.size()) return 0;
  for (size_t k = 1; k < n; ++k) {
    if ((byte(i + k) & 0xC0) != 0x80) return 0;
    cp = (cp << 6) | (byte(i + k) & 0x3F);
  }
  const uint32_t min_cp[] = {0, 0, 0x80, 0x800, 0x10000};
  if (cp < min_cp[n]) return 0;                       // overlong
  if (cp >= 0xD800 && cp <= 0xDFFF) return 0;         // surrogate
  if (cp == 0xFFFE || cp == 0xFFFF || cp > 0x10FFFF) return 0;  // not XML characters
  return n;
}

// At most `max` characters (code points), "..." when cut.
std::string shorten(const std::string& s, size_t max) {
  size_t chars = 0, i = 0;
  while (i < s.size()) {
    if (chars == max) return s.substr(0, i) + "...";
    const size_t n = xml_char_length(s, i);
    i += n ? n : 1;
    ++chars;
  }
  return s;
}

std::string attr(const std::string& v) { return xml_escape(v, true); }
std::string text(const std::string& v) { return xml_escape(v, false); }

std::string seconds(double s) { return fmt::format("{:.3f}", std::isfinite(s) && s > 0 ? s : 0.0); }

std::string where(int layer, int stream) {
  std::string s;
  if (layer >= 0) s = fmt::format("layer {}", layer);
  if (stream >= 0) s += fmt::format("{}stream {}", s.empty() ? "" : " ", stream);
  return s;
}

std::string finding_line(const Finding& f) {
  const std::string w = where(f.layer, f.stream);
  return w.empty() ? f.message : w + ": " + f.message;
}

std::string now_utc() {
  const std::time_t t = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%S", &tm);
  return buf;
}

std::string this_host() {
  char buf[256] = {};
  if (gethostname(buf, sizeof buf - 1) != 0 || !buf[0]) return "localhost";
  return buf;
}

std::string fault_list(const FaultSet& faults) {
  std::string s;
  for (const FaultInfo& f : all_faults())
    if (faults.has(f.fault)) s += (s.empty() ? "" : ",") + std::string(f.name);
  return s;
}

void property(std::string& out, const std::string& name, const std::string& value) {
  out += fmt::format("      <property name=\"{}\" value=\"{}\"/>\n", attr(name), attr(value));
}

void testcase(std::string& out, const RunResult& r, const CheckResult& c) {
  out += fmt::format("    <testcase classname=\"{}\" name=\"{}\" time=\"0.000\"",
                     attr("prefill-bench." + r.scenario_name), attr(c.name));
  if (!c.ran) {
    out += fmt::format(">\n      <skipped message=\"{}\"/>\n    </testcase>\n",
                       attr(c.not_run_why.empty() ? "not run" : c.not_run_why));
    return;
  }
  if (c.passed) {
    out += "/>\n";
    return;
  }
  const long long count = std::max<long long>(c.finding_count, c.findings.size());
  std::string message = fmt::format("{} failed: {} {}", c.name, count, count == 1 ? "finding" : "findings");
  if (!c.findings.empty()) message += "; first: " + finding_line(c.findings.front());
  std::string body;
  for (const Finding& f : c.findings) body += finding_line(f) + "\n";
  if (count > static_cast<long long>(c.findings.size()))
    body += fmt::format("(+{} more findings)\n", count - static_cast<long long>(c.findings.size()));
  for (const Figure& f : c.figures) {
    if (f.pass) continue;
    // Error figures (numeric, state) carry a limit; count figures (poisoned rows, wrong slots) do not.
    const std::string counts = has_counts(f) ? figure_counts(f) : fmt::format("0 wrong of {}", f.elements);
    if (f.limit > 0 || f.max_abs != 0)
      body += fmt::format("figure {} {}: max_abs {:.3g}, limit {:.3g}, rel_l2 {:.3g}, {}\n",
                          where(f.layer, f.stream), f.what, f.max_abs, f.limit, f.rel_l2, counts);
    else
      body += fmt::format("figure {} {}: {}\n", where(f.layer, f.stream), f.what, counts);
  }
  out += fmt::format(">\n      <failure message=\"{}\" type=\"{}\">{}</failure>\n    </testcase>\n",
                     attr(shorten(message, kMessageChars)), attr(c.name), text(body));
}

}  // namespace

std::string xml_escape(const std::string& s, bool attribute) {
  std::string out;
  out.reserve(s.size());
  size_t i = 0;
  while (i < s.size()) {
    const size_t n = xml_char_length(s, i);
    if (n == 0) {
      out += kReplacement;
      ++i;
      continue;
    }
    if (n > 1) {
      out.append(s, i, n);
      i += n;
      continue;
    }
    const char c = s[i++];
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += attribute ? "&quot;" : "\""; break;
      case '\'': out += attribute ? "&apos;" : "'"; break;
      // Attribute values are normalised by parsers: keep these as references.
      case '\t': out += attribute ? "&#9;" : "\t"; break;
      case '\n': out += attribute ? "&#10;" : "\n"; break;
      case '\r': out += "&#13;"; break;
      default: out += c;
    }
  }
  return out;
}

std::string junit_xml(const std::vector<RunResult>& runs, const JunitOptions& options) {
  const std::string timestamp = options.timestamp.empty() ? now_utc() : options.timestamp;
  const std::string hostname = options.hostname.empty() ? this_host() : options.hostname;
  long long tests = 0, failures = 0, skipped = 0, errors = 0;
  double time = 0;
  std::string suites;
  for (size_t i = 0; i < runs.size(); ++i) {
    const RunResult& r = runs[i];
    long long t = 0, f = 0, s = 0;
    // The run stopped on an error: one testcase "run", a <failure> when the kernel
    // library failed, an <error> when the harness did.
    const bool stopped = !r.error.empty();
    const long long e = stopped && !r.kernel_failed ? 1 : 0;
    const long long kf = stopped && r.kernel_failed ? 1 : 0;
    for (const CheckResult& c : r.checks) {
      ++t;
      if (!c.ran) ++s;
      else if (!c.passed) ++f;
    }
    t += static_cast<long long>(r.skipped_layers.size());  // each a failed testcase: never checked
    f += static_cast<long long>(r.skipped_layers.size());
    t += e + kf;
    f += kf;
    tests += t, failures += f, skipped += s, errors += e;
    if (std::isfinite(r.wall_s) && r.wall_s > 0) time += r.wall_s;
    suites += fmt::format(
        "  <testsuite name=\"{}\" id=\"{}\" package=\"prefill-bench\" tests=\"{}\" failures=\"{}\" "
        "errors=\"{}\" skipped=\"{}\" time=\"{}\" timestamp=\"{}\" hostname=\"{}\">\n",
        attr(r.scenario_name + " [" + r.backend + "]"), i, t, f, e, s, seconds(r.wall_s), attr(timestamp),
        attr(hostname));
    suites += "    <properties>\n";
    property(suites, "scenario.path", r.scenario_path);
    property(suites, "scenario.seed", std::to_string(r.seed));
    property(suites, "inputs_checksum", fmt::format("{:016x}", r.inputs_checksum));
    property(suites, "backend", r.backend);
    property(suites, "device", r.device.name);
    if (!r.device.driver.empty()) property(suites, "driver", r.device.driver);
    property(suites, "faults_injected", fault_list(r.faults));
    property(suites, "ref_sample", std::to_string(r.ref_sample));
    property(suites, "tool.git_revision", git_revision());
    property(suites, "kernels.name", r.library.name);
    property(suites, "kernels.version", r.library.version);
    property(suites, "kernels.path", r.library.path);
    if (!r.library.sha256.empty()) property(suites, "kernels.sha256", r.library.sha256);
    property(suites, "kernels.device", r.library.device);
    property(suites, "kernels.describe", r.library.describe);
    property(suites, "kernels.schedule", r.library.schedule ? "true" : "false");
    suites += "    </properties>\n";
    for (const CheckResult& c : r.checks) testcase(suites, r, c);
    if (stopped) {
      const char* tag = r.kernel_failed ? "failure" : "error";
      suites += fmt::format(
          "    <testcase classname=\"{}\" name=\"run\" time=\"0.000\">\n"
          "      <{} message=\"{}\" type=\"{}\">{}</{}>\n    </testcase>\n",
          attr("prefill-bench." + r.scenario_name), tag, attr(shorten(r.error, kMessageChars)),
          r.kernel_failed ? "kernel_library" : "error", text(r.error), tag);
    }
    for (const SkippedLayer& sl : r.skipped_layers) {
      const std::string msg = fmt::format("layer {} skipped by {}: {}", sl.layer, r.library.name, sl.why);
      suites += fmt::format("    <testcase classname=\"{}\" name=\"layer{}.kernels\" time=\"0.000\">\n"
                            "      <failure message=\"{}\" type=\"unsupported\">{}</failure>\n    </testcase>\n",
                            attr("prefill-bench." + r.scenario_name), sl.layer, attr(msg), text(msg));
    }
    suites += "  </testsuite>\n";
  }
  return fmt::format(
             "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
             "<testsuites name=\"prefill-bench\" tests=\"{}\" failures=\"{}\" errors=\"{}\" "
             "skipped=\"{}\" time=\"{}\">\n",
             tests, failures, errors, skipped, seconds(time)) +
         suites + "</testsuites>\n";
}

void write_junit(const std::string& path, const std::vector<RunResult>& runs, const JunitOptions& options) {
  const std::string xml = junit_xml(runs, options);
  const std::filesystem::path parent = std::filesystem::path(path).parent_path();
  std::error_code ec;
  if (!parent.empty() && !std::filesystem::is_directory(parent, ec)) {
    std::filesystem::create_directories(parent, ec);
    if (ec)
      throw std::runtime_error(fmt::format("cannot write JUnit report {}: cannot create {}: {}", path,
                                           parent.string(), ec.message()));
  }
  std::ofstream file(path, std::ios::binary | std::ios::trunc);
  if (!file) throw std::runtime_error(fmt::format("cannot write JUnit report {}: {}", path, std::strerror(errno)));
  file << xml;
  file.close();
  if (!file) throw std::runtime_error(fmt::format("writing JUnit report {} failed", path));
}

}  // namespace pb
