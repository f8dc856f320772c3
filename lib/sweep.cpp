// sweep.cpp: grid parsing, derived scenarios and their YAML, the sweep run, the
// CTest project and the CSV summary. Invariants: a point's YAML loads back into
// the scenario that runs (the run uses the reloaded file), and everything is
// validated before the first point runs.
#include "sweep.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "batch.h"
#include "batch_jsonl.h"
#include "compare.h"
#include "input_error.h"
#include "report.h"
#include "utf8.h"

namespace fs = std::filesystem;

namespace pb {

namespace {

using nlohmann::json;

constexpr int kManifestVersion = 1;
constexpr const char* kManifest = "sweep.json";
constexpr const char* kSummary = "summary.csv";
constexpr const char* kCtestFile = "CTestTestfile.cmake";
constexpr const char* kResourceSpec = "resource-spec.json";
constexpr const char* kPointsFixture = "sweep.points";
constexpr int64_t kMaxScaledTokens = int64_t(1) << 20;  // a stream's tokens, as the scenario reader allows

bool is_scale(const std::string& axis) { return axis == "scale"; }
bool is_line(const std::string& axis) { return axis == "line"; }

std::string join(const std::vector<std::string>& v, const char* sep) {
  std::string s;
  for (const std::string& x : v) s += (s.empty() ? "" : sep) + x;
  return s;
}

// The canonical spelling of an axis value, or "" when it is not valid for the axis.
std::string canonical_value(const std::string& axis, const std::string& text) {
  if (text.empty() || std::isspace(static_cast<unsigned char>(text[0]))) return "";
  char* end = nullptr;
  if (is_line(axis) && text == "all") return text;
  if (is_scale(axis)) {
    const double v = std::strtod(text.c_str(), &end);
    if (*end != '\0' || !std::isfinite(v) || !(v > 0)) return "";
    return fmt::format("{}", v);
  }
  errno = 0;
  const long long v = std::strtoll(text.c_str(), &end, 10);
  if (*end != '\0' || errno == ERANGE || v < 1 || v > (1 << 20)) return "";
  return std::to_string(v);
}

int int_value(const std::string& v) { return std::stoi(v); }

// ---- YAML ----

std::string yaml_string(const std::string& s) {
  std::string out = "\"";
  for (const char ch : s) {
    const unsigned char c = static_cast<unsigned char>(ch);
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\t': out += "\\t"; break;
      case '\r': out += "\\r"; break;
      default:
        if (c < 0x20 || c == 0x7f) out += fmt::format("\\x{:02x}", c);
        else out += ch;
    }
  }
  return out + "\"";
}

// The shortest text that reads back as the same double.
std::string yaml_number(double v) { return fmt::format("{}", v); }

template <typename T>
std::string flow_list(const std::vector<T>& v) {
  std::vector<std::string> items;
  for (const T& x : v) items.push_back(fmt::format("{}", x));
  return "[" + join(items, ", ") + "]";
}

std::string stream_yaml(const StreamSpec& st) {
  std::vector<std::string> f;
  if (st.chunk_start) f.push_back(fmt::format("chunk_start: {}", st.chunk_start));
  f.push_back(fmt::format("tokens: {}", st.tokens));
  if (!st.images.empty()) {
    std::vector<std::string> imgs;
    for (const ImageSegment& im : st.images)
      imgs.push_back(fmt::format("{{start: {}, grid: [{}, {}, {}]}}", im.start, im.grid_t, im.grid_h, im.grid_w));
    f.push_back("images: [" + join(imgs, ", ") + "]");
  }
  if (!st.blocks.empty()) f.push_back("blocks: " + flow_list(st.blocks));
  return "{" + join(f, ", ") + "}";
}

std::string generator_yaml(const StreamGenerator& g) {
  std::vector<std::string> f;
  switch (g.dist) {
    case StreamDist::fixed:
      f = {"dist: fixed", fmt::format("count: {}", g.count), fmt::format("tokens: {}", g.tokens)};
      break;
    case StreamDist::uniform:
      f = {"dist: uniform", fmt::format("count: {}", g.count), fmt::format("min: {}", g.min),
           fmt::format("max: {}", g.max)};
      break;
    case StreamDist::lognormal:
      f = {"dist: lognormal", fmt::format("count: {}", g.count), "median: " + yaml_number(g.median),
           "sigma: " + yaml_number(g.sigma), fmt::format("min: {}", g.min), fmt::format("max: {}", g.max)};
      break;
    case StreamDist::long_tail:
      f = {"dist: long_tail", fmt::format("count: {}", g.count), fmt::format("long: {}", g.long_tokens),
           fmt::format("long_count: {}", g.long_count), fmt::format("min: {}", g.min),
           fmt::format("max: {}", g.max)};
      break;
  }
  if (g.chunk_start) f.push_back(fmt::format("chunk_start: {}", g.chunk_start));
  if (g.chunk_start_max) f.push_back(fmt::format("chunk_start_max: {}", g.chunk_start_max));
  return "generate: {" + join(f, ", ") + "}";
}

// The layer list as pattern x repeat, with the shortest pattern that repeats.
std::pair<std::vector<LayerKind>, int> layer_pattern(const std::vector<LayerKind>& layers) {
  const size_t n = layers.size();
  for (size_t p = 1; p <= n; ++p) {
    if (n % p) continue;
    bool periodic = true;
    for (size_t i = p; i < n && periodic; ++i) periodic = layers[i] == layers[i % p];
    if (periodic) return {std::vector<LayerKind>(layers.begin(), layers.begin() + p), int(n / p)};
  }
  return {layers, 1};
}

// ---- files ----

std::vector<std::string> scenario_files(const std::vector<std::string>& inputs) {
  std::vector<std::string> files;
  for (const std::string& in : inputs) {
    std::error_code ec;
    if (fs::is_directory(in, ec)) {
      std::vector<std::string> here;
      for (const fs::directory_entry& e : fs::directory_iterator(in, ec)) {
        const std::string ext = e.path().extension().string();
        if (e.is_regular_file(ec) && (ext == ".yaml" || ext == ".yml")) here.push_back(e.path().string());
      }
      if (ec) throw InputError(fmt::format("{}: cannot list the directory: {}", in, ec.message()));
      if (here.empty()) throw InputError(fmt::format("{}: no scenario files (*.yaml) in the directory", in));
      std::sort(here.begin(), here.end());
      files.insert(files.end(), here.begin(), here.end());
    } else if (fs::exists(in, ec)) {
      files.push_back(in);
    } else {
      throw InputError(fmt::format("{}: no such directory or scenario file", in));
    }
  }
  if (files.empty()) throw InputError("sweep: no scenario directory or file given");
  return files;
}

void write_text(const std::string& path, const std::string& text) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  if (!f) throw std::runtime_error(fmt::format("cannot write {}: {}", path, std::strerror(errno)));
  f << text;
  f.close();
  if (!f) throw std::runtime_error(fmt::format("writing {} failed", path));
}

// A CMake bracket argument: taken literally, whatever `s` holds.
std::string bracket(const std::string& s) {
  std::string eq;
  while (s.find("]" + eq + "]") != std::string::npos) eq += "=";
  return "[" + eq + "[" + s + "]" + eq + "]";
}

std::string csv_field(const std::string& s) {
  if (s.find_first_of(",\"\n\r") == std::string::npos) return s;
  std::string out = "\"";
  for (char c : s) out += c == '"' ? std::string("\"\"") : std::string(1, c);
  return out + "\"";
}

std::string one_line(std::string s) {
  std::replace(s.begin(), s.end(), '\n', ' ');
  std::replace(s.begin(), s.end(), '\r', ' ');
  return s;
}

json manifest_json(const SweepResult& r, const std::vector<SweepAxis>& axes, bool ctest) {
  json grid = json::array();
  for (const SweepAxis& a : axes) grid.push_back({{"axis", a.name}, {"values", a.values}});
  json points = json::array();
  for (const SweepPointResult& p : r.points)
    points.push_back({{"scenario", p.scenario}, {"source", p.source}, {"point", p.point}, {"name", p.name},
                      {"yaml", p.yaml}, {"json", p.json}, {"skipped", p.skipped}});
  return {{"sweep_version", kManifestVersion}, {"grid", grid}, {"ctest", ctest}, {"points", points}};
}

// One CSV row from a point's report (its one run).
std::string csv_row(const SweepPointResult& p, const RunResult* r, const std::string& note) {
  std::string passed = p.skipped.empty() ? (r && r->passed() ? "true" : "false") : "skipped";
  std::string worst, att_ms, att_tflops;
  if (r) {
    if (const CheckResult* numeric = r->check(kCheckNumeric); numeric && numeric->ran && !numeric->figures.empty()) {
      double w = 0;
      for (const Figure& f : numeric->figures) {
        const double v = std::isfinite(f.max_abs) && f.nonfinite == 0 ? f.max_abs : NAN;
        if (std::isnan(w)) break;
        if (std::isnan(v) || v > w) w = v;
      }
      worst = std::isnan(w) ? "nan" : fmt::format("{:.6g}", w);
    }
    double ms = 0, flops = 0;
    bool any = false;
    for (const KernelTiming& t : r->timings)
      if (t.kernel == "attention" && std::isfinite(t.median_ms)) ms += t.median_ms, flops += t.flops, any = true;
    if (any) {
      att_ms = fmt::format("{:.6g}", ms);
      att_tflops = ms > 0 ? fmt::format("{:.6g}", flops / (ms * 1e9)) : "";
    }
  }
  return join({csv_field(p.scenario), csv_field(p.point), csv_field(r ? r->backend : ""), passed, worst,
               att_ms, att_tflops, csv_field(one_line(note))},
              ",");
}

}  // namespace

const std::vector<std::string>& sweep_axis_names() {
  static const std::vector<std::string> names = {"head_dim", "num_q_heads", "num_kv_heads", "block_size",
                                                 "scale", "line"};
  return names;
}

std::vector<SweepAxis> parse_grid(const std::vector<std::string>& specs) {
  const std::vector<std::string>& known = sweep_axis_names();
  std::vector<SweepAxis> axes;
  for (const std::string& spec : specs) {
    const size_t eq = spec.find('=');
    if (eq == std::string::npos)
      throw InputError(fmt::format("--grid {}: expected AXIS=V1,V2,... (axes: {})", spec, join(known, ", ")));
    SweepAxis a;
    a.name = spec.substr(0, eq);
    if (std::find(known.begin(), known.end(), a.name) == known.end())
      throw InputError(fmt::format("--grid {}: unknown axis '{}' (known: {})", spec, a.name, join(known, ", ")));
    for (const SweepAxis& b : axes)
      if (b.name == a.name) throw InputError(fmt::format("--grid {}: axis '{}' given twice", spec, a.name));
    const std::string list = spec.substr(eq + 1);
    std::stringstream in(list);
    for (std::string v; std::getline(in, v, ',');) {
      const std::string c = canonical_value(a.name, v);
      if (c.empty())
        throw InputError(fmt::format("--grid {}: {}: expected {}, found '{}'", spec, a.name,
                                     is_scale(a.name) ? "a positive number"
                                     : is_line(a.name) ? "a positive integer or all" : "a positive integer", v));
      if (std::find(a.values.begin(), a.values.end(), c) != a.values.end())
        throw InputError(fmt::format("--grid {}: {} value {} listed twice", spec, a.name, c));
      a.values.push_back(c);
    }
    if (a.values.empty() || list.back() == ',')
      throw InputError(fmt::format("--grid {}: expected a comma-separated list of values after '='", spec));
    axes.push_back(std::move(a));
  }
  return axes;
}

std::vector<SweepPoint> sweep_points(const Scenario& base, const std::vector<SweepPoint>& points) {
  std::vector<SweepPoint> out;
  for (const SweepPoint& p : points) {
    size_t at = p.values.size();
    for (size_t k = 0; k < p.values.size(); ++k)
      if (is_line(p.values[k].first) && p.values[k].second == "all") at = k;
    if (at == p.values.size() || base.streams_from_jsonl.empty()) {
      out.push_back(p);  // derive_scenario says why line=all cannot apply
      continue;
    }
    for (int line : jsonl_batch_lines(base.streams_from_jsonl)) {
      SweepPoint q = p;
      q.values[at].second = std::to_string(line);
      out.push_back(std::move(q));
    }
  }
  return out;
}

std::string SweepPoint::label() const {
  std::vector<std::string> parts;
  for (const auto& [axis, value] : values) parts.push_back(axis + "=" + value);
  return join(parts, ",");
}

std::vector<SweepPoint> grid_points(const std::vector<SweepAxis>& axes) {
  std::vector<SweepPoint> points(1);
  for (const SweepAxis& a : axes) {
    std::vector<SweepPoint> next;
    for (const SweepPoint& p : points)
      for (const std::string& v : a.values) {
        SweepPoint q = p;
        q.values.push_back({a.name, v});
        next.push_back(std::move(q));
      }
    points = std::move(next);
  }
  return axes.empty() ? std::vector<SweepPoint>{} : points;
}

Scenario derive_scenario(const Scenario& base, const SweepPoint& point, std::vector<std::string>* notes) {
  Scenario s = base;
  s.path.clear();
  s.marks.clear();
  s.name = base.name + "@" + point.label();
  std::vector<std::string> dropped;
  // line first (it replaces the streams), whatever its place in the grid.
  for (const auto& [axis, value] : point.values) {
    if (!is_line(axis)) continue;
    if (base.streams_from_jsonl.empty())
      throw InputError(fmt::format("line={}: the scenario's streams are not from_jsonl", value));
    if (value == "all") throw InputError("line=all: expanded per scenario file (sweep_points)");
    s.streams.clear();
    for (StreamSpec& st : read_jsonl_batch(base.streams_from_jsonl, int_value(value))) {
      StreamSource src;
      src.stream = std::move(st);
      s.streams.push_back(std::move(src));
    }
    s.streams_line = int_value(value);
  }
  auto drop_sizes = [&](bool scratch) {
    for (size_t i = 0; i < s.streams.size(); ++i)
      if (s.streams[i].stream && !s.streams[i].stream->blocks.empty()) {
        s.streams[i].stream->blocks.clear();
        dropped.push_back(fmt::format("streams[{}].blocks (their count follows block_size and tokens)", i));
      }
    if (s.kv_num_blocks) {
      dropped.push_back(fmt::format("kv_cache.num_blocks {} (sized for the original shape)", s.kv_num_blocks));
      s.kv_num_blocks = 0;
    }
    if (scratch && s.scratch_capacity) {
      dropped.push_back(fmt::format("scratch.capacity_bytes {} (sized for the original tokens)", s.scratch_capacity));
      s.scratch_capacity = 0;
    }
  };
  for (const auto& [axis, value] : point.values) {
    ModelSpec& m = s.model;
    if (is_line(axis)) {
      continue;  // done above
    } else if (axis == "head_dim") {
      const int v = int_value(value), old = m.head_dim;
      // rotary_dim keeps its fraction of head_dim; the MRoPE sections theirs of rotary_dim.
      const long long rot = static_cast<long long>(m.rotary_dim) * v;
      if (rot % old)
        throw InputError(fmt::format("head_dim={}: rotary_dim {} of head_dim {} does not scale to an integer",
                                     v, m.rotary_dim, old));
      const int new_rot = static_cast<int>(rot / old);
      if (m.mrope.enabled)
        for (int& sec : m.mrope.sections) {
          if ((static_cast<long long>(sec) * new_rot) % m.rotary_dim)
            throw InputError(fmt::format("head_dim={}: mrope.sections [{}, {}, {}] do not scale to rotary_dim {}",
                                         v, m.mrope.sections[0], m.mrope.sections[1], m.mrope.sections[2], new_rot));
          sec = static_cast<int>(static_cast<long long>(sec) * new_rot / m.rotary_dim);
        }
      m.rotary_dim = new_rot;
      m.head_dim = v;
    } else if (axis == "num_q_heads") {
      m.num_q_heads = int_value(value);
    } else if (axis == "num_kv_heads") {
      m.num_kv_heads = int_value(value);
    } else if (axis == "block_size") {
      m.block_size = int_value(value);
      drop_sizes(false);
    } else if (axis == "scale") {
      const double f = std::strtod(value.c_str(), nullptr);
      // Generators become the explicit streams they drew, so every stream's count scales exactly.
      std::vector<StreamSpec> resolved = resolve_streams(s);
      s.streams.clear();
      s.streams_from_jsonl.clear();  // the scaled streams are written out explicitly
      s.streams_line = 0;
      for (size_t b = 0; b < resolved.size(); ++b) {
        StreamSpec& st = resolved[b];
        const double scaled = std::max(1.0, std::round(st.tokens * f));
        if (!(scaled <= double(kMaxScaledTokens)))
          throw InputError(fmt::format("scale={}: stream {} would have {:.0f} tokens ({} x {}), at most {} per stream",
                                       value, b, scaled, st.tokens, value, kMaxScaledTokens));
        st.tokens = static_cast<int>(scaled);
        StreamSource src;
        src.stream = st;
        s.streams.push_back(std::move(src));
      }
      drop_sizes(true);
    } else {
      throw InputError(fmt::format("unknown sweep axis '{}' (known: {})", axis, join(sweep_axis_names(), ", ")));
    }
  }
  if (notes)
    for (const std::string& d : dropped) notes->push_back("dropped " + d);
  return s;
}

std::string scenario_yaml(const Scenario& s, const std::vector<std::string>& comment) {
  std::string y;
  for (const std::string& c : comment) y += "# " + one_line(c) + "\n";
  y += "name: " + yaml_string(s.name) + "\n";
  if (!s.description.empty()) y += "description: " + yaml_string(s.description) + "\n";
  y += fmt::format("seed: {}\n", s.seed);
  const ModelSpec& m = s.model;
  y += "model:\n";
  y += fmt::format("  num_q_heads: {}\n  num_kv_heads: {}\n  head_dim: {}\n", m.num_q_heads, m.num_kv_heads,
                   m.head_dim);
  if (m.rotary_dim != m.head_dim) y += fmt::format("  rotary_dim: {}\n", m.rotary_dim);
  if (m.rope_theta != 10000.0) y += "  rope_theta: " + yaml_number(m.rope_theta) + "\n";
  y += fmt::format("  block_size: {}\n", m.block_size);
  if (m.mrope.enabled)
    y += fmt::format("  mrope: {{sections: [{}, {}, {}]{}}}\n", m.mrope.sections[0], m.mrope.sections[1],
                     m.mrope.sections[2], m.mrope.interleaved ? ", interleaved: true" : "");
  if (m.gdn.present)
    y += fmt::format("  gdn: {{num_k_heads: {}, num_v_heads: {}, k_dim: {}, v_dim: {}, d_conv: {}}}\n",
                     m.gdn.num_k_heads, m.gdn.num_v_heads, m.gdn.k_dim, m.gdn.v_dim, m.gdn.d_conv);
  const auto [pattern, repeat] = layer_pattern(s.layers);
  std::vector<std::string> kinds;
  for (LayerKind k : pattern) kinds.push_back(k == LayerKind::attn ? "attn" : "gdn");
  y += "layers:\n  pattern: [" + join(kinds, ", ") + "]\n";
  if (repeat > 1) y += fmt::format("  repeat: {}\n", repeat);
  if (!s.streams_from_jsonl.empty())
    y += "streams: {from_jsonl: " + yaml_string(fs::absolute(s.streams_from_jsonl).lexically_normal().string()) +
         fmt::format(", line: {}}}\n", s.streams_line);
  else y += "streams:\n";
  for (const StreamSource& src : s.streams) {
    if (!s.streams_from_jsonl.empty()) break;
    if (src.generate) y += "  - " + generator_yaml(*src.generate) + "\n";
    else if (src.stream) y += "  - " + stream_yaml(*src.stream) + "\n";
  }
  y += fmt::format("run: {{warmup: {}", s.warmup);
  if (s.repeat) y += fmt::format(", repeat: {}", *s.repeat);
  if (!s.l2_flush) y += ", l2_flush: false";
  const NoiseRule dflt;
  if (s.noise.target != dflt.target || s.noise.min_samples != dflt.min_samples || s.noise.max_time_s != dflt.max_time_s)
    y += ", noise: {target: " + yaml_number(s.noise.target) + fmt::format(", min_samples: {}", s.noise.min_samples) +
         ", max_time_s: " + yaml_number(s.noise.max_time_s) + "}";
  y += "}\n";
  y += "tolerances:\n  bf16: {factor: " + yaml_number(s.tol_bf16.factor) + ", atol: " + yaml_number(s.tol_bf16.atol) +
       "}\n";
  if (s.kv_num_blocks) y += fmt::format("kv_cache: {{num_blocks: {}}}\n", s.kv_num_blocks);
  if (s.scratch_capacity) y += fmt::format("scratch: {{capacity_bytes: {}}}\n", s.scratch_capacity);
  if (s.ref_sample) y += fmt::format("reference: {{sample: {}}}\n", s.ref_sample);
  if (s.invariance_streams != 2) y += fmt::format("invariance: {{streams: {}}}\n", s.invariance_streams);
  if (!s.checks.empty()) y += "checks: [" + join(s.checks, ", ") + "]\n";
  if (!s.faults.empty()) {
    std::vector<std::string> names;
    for (const FaultInfo& f : all_faults())
      if (s.faults.has(f.fault)) names.push_back(f.name);
    y += "faults: [" + join(names, ", ") + "]\n";
  }
  return y;
}

bool SweepResult::all_passed() const {
  for (const SweepPointResult& p : points)
    if (p.skipped.empty() && !(p.ran && p.passed)) return false;
  return true;
}

int count_gpus() {
  FILE* pipe = popen("command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L 2>/dev/null", "r");
  if (!pipe) return 0;
  int gpus = 0;
  char line[512];
  while (std::fgets(line, sizeof line, pipe))
    if (std::string(line).rfind("GPU ", 0) == 0) ++gpus;
  pclose(pipe);
  return gpus;
}

SweepResult run_sweep(const SweepOptions& opt, const std::function<void(const std::string&)>& say) {
  // Everything is checked before anything is written or run.
  const std::vector<SweepAxis> axes = parse_grid(opt.grid);
  if (axes.empty())
    throw InputError(fmt::format("sweep: give at least one --grid AXIS=V1,V2 (axes: {})",
                                 join(sweep_axis_names(), ", ")));
  if (opt.out_dir.empty()) throw InputError("sweep: --out DIR is required");
  if (opt.run.backend != "auto" && opt.run.backend != "cuda" && opt.run.backend != "host")
    throw InputError("--backend: expected auto, cuda or host, found '" + opt.run.backend + "'");
  // A refused --kernels / --impl: exit 2 before anything runs. In-process points run on
  // this library, so its workspace is part of each point's estimate.
  std::unique_ptr<Backend> kernels;
  if (!opt.ctest) kernels = make_configured_backend(opt.run, opt.run.inject);
  const KernelLibrary* library = kernels ? &kernels->library() : nullptr;  // reset below, once validated
  const std::vector<std::string> files = scenario_files(opt.inputs);
  std::vector<Scenario> bases;
  std::set<std::string> stems;
  for (const std::string& f : files) {
    if (!valid_utf8(f))
      throw InputError(f + ": the file name is not valid UTF-8; the sweep writes it into JSON (sweep.json) and names "
                           "point files after it: rename the file");
    bases.push_back(load_scenario(f));
    validate_resources(bases.back(), opt.limits, library);
    const std::string stem = fs::path(f).stem().string();
    if (!stems.insert(stem).second)
      throw InputError(fmt::format("{}: a second scenario file named {} (point files are named after it)", f, stem));
  }
  SweepResult res;
  res.gpus = opt.ctest ? (opt.gpus >= 0 ? opt.gpus : count_gpus()) : 0;
  if (opt.ctest && res.gpus == 0 && opt.run.backend == "cuda")
    throw InputError("sweep --ctest --backend cuda: no GPU found (nvidia-smi -L lists none); give --gpus N");
  if (opt.ctest && opt.tool.empty()) throw InputError("sweep --ctest: the path of prefill-bench is unknown");

  std::error_code ec;
  fs::create_directories(opt.out_dir, ec);
  if (ec) throw std::runtime_error(fmt::format("cannot create {}: {}", opt.out_dir, ec.message()));
  res.out_dir = fs::absolute(opt.out_dir).lexically_normal().string();
  const fs::path out = res.out_dir;

  // Derive, write and reload every point.
  const std::vector<SweepPoint> points = grid_points(axes);
  std::vector<Scenario> derived;  // the reloaded file of each point that runs, in res.points order
  for (size_t i = 0; i < bases.size(); ++i) {
    const std::string stem = fs::path(files[i]).stem().string();
    for (const SweepPoint& p : sweep_points(bases[i], points)) {
      SweepPointResult pr;
      pr.scenario = bases[i].name;
      pr.source = files[i];
      pr.point = p.label();
      pr.name = bases[i].name + "@" + pr.point;
      pr.yaml = stem + "@" + pr.point + ".yaml";
      pr.json = stem + "@" + pr.point + ".json";
      const std::string yaml_path = (out / pr.yaml).string();
      fs::remove(out / pr.json, ec);  // a report from an earlier sweep would pass for this one's
      try {
        std::vector<std::string> comment = {
            fmt::format("Derived by `prefill-bench sweep` from {}, point {}.", files[i], pr.point),
            fmt::format("Rerun by hand: prefill-bench run {}", yaml_path)};
        const Scenario d = derive_scenario(bases[i], p, &comment);
        write_text(yaml_path, scenario_yaml(d, comment));
        Scenario back = load_scenario(yaml_path);
        validate_resources(back, opt.limits, library);
        derived.push_back(std::move(back));
      } catch (const InputError& e) {
        pr.skipped = e.what();
      }
      res.points.push_back(std::move(pr));
    }
  }
  kernels.reset();  // each point's run opens its own
  library = nullptr;
  if (derived.empty()) {
    std::string why;
    for (const SweepPointResult& p : res.points) why += "\n  " + p.name + ": " + p.skipped;
    throw InputError("sweep: no point of the grid gives a valid scenario:" + why);
  }
  res.manifest = (out / kManifest).string();
  write_text(res.manifest, manifest_json(res, axes, opt.ctest).dump(2) + "\n");

  if (opt.ctest) {
    // One test per point; with GPUs each takes one ("gpus:1") and sees only it.
    std::string t = fmt::format(
        "# Generated by `prefill-bench sweep --ctest`: one test per sweep point ({} points, {} GPUs).\n"
        "# Run: ctest --test-dir {} --resource-spec-file {} -j N\n",
        derived.size(), res.gpus, res.out_dir, (out / kResourceSpec).string());
    std::vector<std::string> run_args;
    const std::string backend = res.gpus == 0 ? "host" : opt.run.backend;
    run_args.insert(run_args.end(), {"--backend", backend, "--no-color"});
    if (opt.run.warmup) run_args.insert(run_args.end(), {"--warmup", std::to_string(*opt.run.warmup)});
    if (opt.run.repeat) run_args.insert(run_args.end(), {"--repeat", std::to_string(*opt.run.repeat)});
    if (opt.run.l2_flush) run_args.insert(run_args.end(), {"--l2", *opt.run.l2_flush ? "cold" : "hot"});
    if (opt.run.ref_sample) run_args.insert(run_args.end(), {"--ref-sample", std::to_string(*opt.run.ref_sample)});
    if (!opt.run.kernels.empty())
      run_args.insert(run_args.end(), {"--kernels", fs::absolute(opt.run.kernels).lexically_normal().string()});
    if (!opt.run.impl.empty()) run_args.insert(run_args.end(), {"--impl", opt.run.impl});
    if (opt.run.graph) run_args.push_back("--graph");
    for (const FaultInfo& f : all_faults())
      if (opt.run.inject.has(f.fault)) run_args.insert(run_args.end(), {"--inject", f.name});
    // The ceilings the points were validated against hold when they run.
    if (opt.limits.max_memory_bytes)
      run_args.insert(run_args.end(), {"--max-memory", fmt::format("{}", *opt.limits.max_memory_bytes / 1e9)});
    if (opt.limits.max_ref_flops)
      run_args.insert(run_args.end(), {"--max-ref-gflop", fmt::format("{}", *opt.limits.max_ref_flops / 1e9)});
    // CTest hands the test its GPU as CTEST_RESOURCE_GROUP_0_GPUS="id:3,slots:1";
    // the device it sees is then that one alone (in nvidia-smi's PCI order).
    const std::string pick_gpu =
        "g=\"${CTEST_RESOURCE_GROUP_0_GPUS:-}\"; if [ -n \"$g\" ]; then g=\"${g#id:}\"; "
        "export CUDA_DEVICE_ORDER=PCI_BUS_ID CUDA_VISIBLE_DEVICES=\"${g%%,*}\"; fi; exec \"$0\" \"$@\"";
    for (const SweepPointResult& p : res.points) {
      if (!p.skipped.empty()) {
        t += fmt::format("# skipped {}: {}\n", p.name, one_line(p.skipped));
        continue;
      }
      std::vector<std::string> cmd;
      if (res.gpus > 0) cmd = {"/bin/sh", "-c", pick_gpu};
      cmd.insert(cmd.end(), {opt.tool, "run", p.yaml, "--json", p.json});
      cmd.insert(cmd.end(), run_args.begin(), run_args.end());
      std::vector<std::string> quoted;
      for (const std::string& c : cmd) quoted.push_back(bracket(c));
      t += fmt::format("add_test({} {})\n", bracket(p.name), join(quoted, " "));
      t += fmt::format("set_tests_properties({} PROPERTIES WORKING_DIRECTORY {} FIXTURES_REQUIRED {} LABELS sweep{})\n",
                       bracket(p.name), bracket(res.out_dir), kPointsFixture,
                       res.gpus > 0 ? " RESOURCE_GROUPS \"gpus:1\"" : "");
    }
    // Last: the CSV summary from the point reports, once every point has run.
    t += fmt::format("add_test(sweep.summary {} sweep --summarize {})\n", bracket(opt.tool), bracket(res.out_dir));
    t += fmt::format("set_tests_properties(sweep.summary PROPERTIES FIXTURES_CLEANUP {} LABELS sweep)\n",
                     kPointsFixture);
    res.ctest_file = (out / kCtestFile).string();
    write_text(res.ctest_file, t);
    json gpus = json::array();
    for (int g = 0; g < res.gpus; ++g) gpus.push_back({{"id", std::to_string(g)}, {"slots", 1}});
    res.resource_spec = (out / kResourceSpec).string();
    write_text(res.resource_spec,
               json({{"version", {{"major", 1}, {"minor", 0}}}, {"local", json::array({{{"gpus", gpus}}})}}).dump(2) +
                   "\n");
    for (const SweepPointResult& p : res.points)
      if (say) say(p.skipped.empty() ? fmt::format("{}: test {}", p.name, p.yaml)
                                     : fmt::format("{}: skipped: {}", p.name, one_line(p.skipped)));
    return res;
  }

  size_t next = 0;
  for (SweepPointResult& p : res.points) {
    if (!p.skipped.empty()) {
      if (say) say(fmt::format("{}: skipped: {}", p.name, one_line(p.skipped)));
      continue;
    }
    const RunResult r = run_scenario(derived[next++], opt.run);
    write_json((out / p.json).string(), report_json({r}));
    p.ran = true;
    p.passed = r.passed();
    if (say)
      say(fmt::format("{}: {} ({}, {:.2f} s) -> {}", p.name, p.passed ? "PASS" : "FAIL", r.backend, r.wall_s,
                      (out / p.json).string()));
  }
  SweepResult summary = summarize_sweep(res.out_dir);
  res.csv = summary.csv;
  return res;
}

SweepResult summarize_sweep(const std::string& out_dir) {
  SweepResult res;
  res.out_dir = out_dir;
  const fs::path out = out_dir;
  res.manifest = (out / kManifest).string();
  json m;
  {
    std::ifstream in(res.manifest, std::ios::binary);
    if (!in) throw InputError(res.manifest + ": cannot open the sweep manifest (is " + out_dir + " a sweep --out?)");
    try {
      m = json::parse(in);
    } catch (const json::parse_error& e) {
      throw InputError(res.manifest + ": malformed JSON: " + e.what());
    }
  }
  try {
    if (m.at("sweep_version").get<int>() != kManifestVersion)
      throw InputError(fmt::format("{}: sweep_version {}, this prefill-bench reads {}", res.manifest,
                                   m.at("sweep_version").dump(), kManifestVersion));
    for (const json& j : m.at("points")) {
      SweepPointResult p;
      p.scenario = j.at("scenario").get<std::string>();
      p.source = j.at("source").get<std::string>();
      p.point = j.at("point").get<std::string>();
      p.name = j.at("name").get<std::string>();
      p.yaml = j.at("yaml").get<std::string>();
      p.json = j.at("json").get<std::string>();
      p.skipped = j.at("skipped").get<std::string>();
      res.points.push_back(std::move(p));
    }
  } catch (const json::exception& e) {
    throw InputError(res.manifest + ": not a sweep manifest: " + e.what());
  }
  std::string csv =
      "scenario,point,backend,passed,worst_numeric_max_abs,attention_median_ms,attention_tflops,note\n";
  for (SweepPointResult& p : res.points) {
    if (!p.skipped.empty()) {
      csv += csv_row(p, nullptr, p.skipped) + "\n";
      continue;
    }
    const std::string report = (out / p.json).string();
    std::error_code ec;
    if (!fs::exists(report, ec)) {
      csv += csv_row(p, nullptr, "no report: the point did not run to the end") + "\n";
      continue;
    }
    std::string note;
    try {
      const LoadedReport rep = load_report(report);
      if (rep.runs.size() != 1) throw InputError(fmt::format("{}: expected one run, found {}", report, rep.runs.size()));
      p.ran = true;
      p.passed = rep.runs.front().passed();
      csv += csv_row(p, &rep.runs.front(), "") + "\n";
    } catch (const InputError& e) {
      csv += csv_row(p, nullptr, e.what()) + "\n";
    }
  }
  res.csv = (out / kSummary).string();
  write_text(res.csv, csv);
  return res;
}

}  // namespace pb
