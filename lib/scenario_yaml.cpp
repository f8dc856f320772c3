// scenario_yaml.cpp: the scenario file reader (yaml-cpp) and Scenario's error helpers.
// Every problem is an InputError "FILE:LINE:COL: FIELD: expected X, found Y"; unknown keys
// are errors at every level; each field read leaves its mark in Scenario::marks.
#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdint>
#include <fstream>
#include <limits>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include <sys/stat.h>
#include <yaml-cpp/yaml.h>

#include <cstring>

#include "batch.h"
#include "batch_jsonl.h"
#include "check_plan.h"
#include "check_result.h"
#include "scenario.h"

namespace pb {
namespace {

constexpr uint64_t kMaxScenarioBytes = uint64_t(16) << 20;  // read no more than this
constexpr int64_t kMaxTokens = int64_t(1) << 20;  // per stream, and for chunk_start
constexpr int64_t kMaxStreams = 4096;             // over all entries and generators
constexpr int64_t kMaxLayers = 64;
constexpr int64_t kMaxHeads = 1024;
constexpr int64_t kMaxDim = 1024;                 // head_dim, rotary_dim, k_dim, v_dim
constexpr int64_t kInt32Max = std::numeric_limits<int32_t>::max();
constexpr int64_t kInt64Max = std::numeric_limits<int64_t>::max();

Mark to_mark(const YAML::Mark& m) {
  if (m.is_null() || m.line < 0) return {};
  return {m.line + 1, m.column + 1};
}

std::string join(const std::vector<std::string>& v) {
  std::string s;
  for (const auto& x : v) s += (s.empty() ? "" : ", ") + x;
  return s;
}

size_t edit_distance(const std::string& a, const std::string& b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diag = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      size_t up = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diag + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diag = up;
    }
  }
  return row[b.size()];
}

// "unknown X 'foo' (did you mean 'bar'? known: ...)": the suggestion only when close.
std::string unknown_name(const std::string& kind, const std::string& name,
                         const std::vector<std::string>& known) {
  std::string best;
  size_t best_d = std::numeric_limits<size_t>::max();
  for (const auto& k : known) {
    size_t d = edit_distance(name, k);
    if (d < best_d) best_d = d, best = k;
  }
  std::string s = "unknown " + kind + " '" + name + "' (";
  if (!best.empty() && best_d <= std::max<size_t>(2, name.size() / 4))
    s += "did you mean '" + best + "'? ";
  return s + "known: " + join(known) + ")";
}

// What a node holds, for "found ..." in messages.
std::string found(const YAML::Node& n) {
  if (!n.IsDefined() || n.IsNull()) return "nothing";
  if (n.IsMap()) return "a map";
  if (n.IsSequence()) return "a list";
  return "'" + n.Scalar() + "'";
}

std::string child(const std::string& parent, const std::string& key) {
  return parent.empty() ? key : parent + "." + key;
}
std::string item(const std::string& parent, size_t i) {
  return parent + "[" + std::to_string(i) + "]";
}

// A decimal integer, optional sign, nothing else. Returns false when `text` is not one
// or does not fit in int64.
bool parse_int64(const std::string& text, int64_t& out) {
  size_t i = 0;
  bool neg = false;
  if (i < text.size() && (text[i] == '+' || text[i] == '-')) neg = text[i++] == '-';
  if (i == text.size()) return false;
  uint64_t mag = 0;
  for (; i < text.size(); ++i) {
    if (text[i] < '0' || text[i] > '9') return false;
    uint64_t d = uint64_t(text[i] - '0');
    if (mag > (uint64_t(kInt64Max) + 1 - d) / 10) return false;
    mag = mag * 10 + d;
  }
  if (!neg && mag > uint64_t(kInt64Max)) return false;
  out = neg ? int64_t(0 - mag) : int64_t(mag);
  return true;
}

// "a positive integer", "an integer in [2, 8]", ...
std::string int_range_text(int64_t lo, int64_t hi) {
  const bool open_hi = hi >= kInt32Max;
  if (lo == 1 && open_hi) return "a positive integer";
  if (lo == 0 && open_hi) return "a non-negative integer";
  if (open_hi) return "an integer >= " + std::to_string(lo);
  if (lo == 1) return "a positive integer <= " + std::to_string(hi);
  if (lo == 0) return "a non-negative integer <= " + std::to_string(hi);
  return "an integer in [" + std::to_string(lo) + ", " + std::to_string(hi) + "]";
}

// A map of the file being read: its entries, its path and mark. Unknown and repeated
// keys are rejected when it is built.
struct MapView {
  std::string path;
  Mark mark;
  std::vector<std::pair<std::string, std::pair<YAML::Node, Mark>>> entries;  // key -> value, key mark

  const std::pair<YAML::Node, Mark>* find(const std::string& key) const {
    for (const auto& e : entries)
      if (e.first == key) return &e.second;
    return nullptr;
  }
  bool has(const std::string& key) const { return find(key) != nullptr; }
};

class Reader {
 public:
  Reader(const std::string& file, Scenario& s) : file_(file), s_(s) {}

  [[noreturn]] void fail(Mark m, const std::string& field, const std::string& what) const {
    throw InputError(located(file_, m, field, what));
  }

  // Runs one field's reading; a problem is recorded and reading goes on, so a file's
  // every problem is reported at once. Returns false when `read` failed.
  template <typename F>
  bool guard(F&& read) {
    try {
      read();
      return true;
    } catch (const InputError& e) {
      errors_.insert(errors_.end(), e.problems().begin(), e.problems().end());
      return false;
    }
  }
  const std::vector<std::string>& errors() const { return errors_; }
  // Leaves the enclosing guard() without adding a problem (its parts were recorded).
  [[noreturn]] static void already_reported() { throw InputError(std::vector<std::string>{}); }

  // The mark of a value, or `fallback` (its key) when yaml-cpp has none. An empty value
  // is marked where the next token starts, so it takes its key's mark too.
  static Mark value_mark(const YAML::Node& v, Mark fallback) {
    Mark m = v.IsDefined() && !v.IsNull() ? to_mark(v.Mark()) : Mark{};
    return m.line > 0 ? m : fallback;
  }

  MapView map(const YAML::Node& node, const std::string& path, Mark mark,
              const std::vector<std::string>& known) {
    if (!node.IsMap()) fail(value_mark(node, mark), path, "expected a map, found " + found(node));
    // A missing field is reported at the map's own key ("model:"), or where the map starts.
    MapView m{path, mark.line > 0 ? mark : value_mark(node, mark), {}};
    for (auto it = node.begin(); it != node.end(); ++it) {
      const Mark km = value_mark(it->first, m.mark);
      if (!it->first.IsScalar()) fail(km, path, "expected a key name, found " + found(it->first));
      const std::string key = it->first.Scalar();
      if (std::find(known.begin(), known.end(), key) == known.end()) {
        errors_.push_back(located(file_, km, child(path, key), unknown_name("key", key, known)));
        continue;
      }
      if (m.has(key)) {
        errors_.push_back(located(file_, km, child(path, key), "key '" + key + "' given twice"));
        continue;
      }
      m.entries.push_back({key, {it->second, km}});
      s_.marks[child(path, key)] = km;
    }
    return m;
  }

  [[noreturn]] void missing(const MapView& m, const std::string& key,
                            const std::string& why = "") const {
    fail(m.mark, child(m.path, key),
         "required field missing" + (m.path.empty() ? std::string() : " in '" + m.path + "'") +
             (why.empty() ? "" : " (" + why + ")"));
  }

  // The value of a required key.
  const YAML::Node& need(const MapView& m, const std::string& key) const {
    const auto* e = m.find(key);
    if (!e) missing(m, key);
    return e->first;
  }

  // The elements of a list at `path`, each with its mark recorded as path[i].
  std::vector<std::pair<YAML::Node, Mark>> list(const YAML::Node& v, const std::string& path,
                                                 Mark mark, bool allow_empty = false) {
    if (!v.IsSequence()) fail(value_mark(v, mark), path, "expected a list, found " + found(v));
    std::vector<std::pair<YAML::Node, Mark>> out;
    for (size_t i = 0; i < v.size(); ++i) {
      const Mark em = value_mark(v[i], value_mark(v, mark));
      s_.marks[item(path, i)] = em;
      out.push_back({v[i], em});
    }
    if (out.empty() && !allow_empty) fail(value_mark(v, mark), path, "expected a non-empty list, found []");
    return out;
  }

  // A quoted scalar ("42", '1.5') is a string: numbers and booleans are plain.
  void refuse_quoted(const YAML::Node& v, const std::string& path, Mark mark, const char* want) const {
    if (v.IsScalar() && v.Tag() == "!")
      fail(value_mark(v, mark), path,
           std::string("expected ") + want + ", found the string \"" + v.Scalar() + "\" (quoted: remove the quotes)");
  }

  int64_t integer(const YAML::Node& v, const std::string& path, Mark mark, int64_t lo, int64_t hi) {
    const Mark at = value_mark(v, mark);
    int64_t x = 0;
    refuse_quoted(v, path, mark, "an integer");
    if (!v.IsScalar() || !parse_int64(v.Scalar(), x))
      fail(at, path, "expected an integer, found " + found(v));
    if (x < lo || x > hi) fail(at, path, "expected " + int_range_text(lo, hi) + ", found " + v.Scalar());
    return x;
  }

  static std::string shortest(double x) {
    std::ostringstream o;
    o << x;  // -100, 0.5: no trailing zeros
    return o.str();
  }

  // A finite number, > lo (strict) or >= lo.
  double number(const YAML::Node& v, const std::string& path, Mark mark, double lo, bool strict) {
    const Mark at = value_mark(v, mark);
    double x = 0;
    refuse_quoted(v, path, mark, "a number");
    bool ok = v.IsScalar() && !v.Scalar().empty();
    if (ok) {
      const std::string& t = v.Scalar();
      char* end = nullptr;
      x = std::strtod(t.c_str(), &end);
      ok = end == t.c_str() + t.size() && std::isfinite(x) && !std::isspace((unsigned char)t[0]);
    }
    if (!ok) fail(at, path, "expected a number, found " + found(v));
    if (strict ? !(x > lo) : !(x >= lo)) {
      std::string want = lo == 0 ? (strict ? "a positive number" : "a non-negative number")
                                 : std::string(strict ? "a number > " : "a number >= ") + shortest(lo);
      fail(at, path, "expected " + want + ", found " + v.Scalar());
    }
    return x;
  }

  bool boolean(const YAML::Node& v, const std::string& path, Mark mark) {
    refuse_quoted(v, path, mark, "true or false");
    if (v.IsScalar()) {
      const std::string& t = v.Scalar();
      if (t == "true" || t == "True" || t == "TRUE") return true;
      if (t == "false" || t == "False" || t == "FALSE") return false;
    }
    fail(value_mark(v, mark), path, "expected true or false, found " + found(v));
  }

  std::string string(const YAML::Node& v, const std::string& path, Mark mark, bool allow_empty) {
    if (!v.IsScalar() || (!allow_empty && v.Scalar().empty()))
      fail(value_mark(v, mark), path, "expected a non-empty string, found " + found(v));
    return v.Scalar();
  }

  // Shorthands on a map entry (key must exist).
  int64_t int_at(const MapView& m, const std::string& k, int64_t lo, int64_t hi) {
    const auto* e = m.find(k);
    if (!e) missing(m, k);
    return integer(e->first, child(m.path, k), e->second, lo, hi);
  }
  int64_t int_or(const MapView& m, const std::string& k, int64_t lo, int64_t hi, int64_t dflt) {
    return m.has(k) ? int_at(m, k, lo, hi) : dflt;
  }
  double num_at(const MapView& m, const std::string& k, double lo, bool strict) {
    const auto* e = m.find(k);
    if (!e) missing(m, k);
    return number(e->first, child(m.path, k), e->second, lo, strict);
  }
  double num_or(const MapView& m, const std::string& k, double lo, bool strict, double dflt) {
    const auto* e = m.find(k);
    return e ? number(e->first, child(m.path, k), e->second, lo, strict) : dflt;
  }
  bool bool_or(const MapView& m, const std::string& k, bool dflt) {
    const auto* e = m.find(k);
    return e ? boolean(e->first, child(m.path, k), e->second) : dflt;
  }
  Mark mark_of(const MapView& m, const std::string& k) const {
    const auto* e = m.find(k);
    return e ? e->second : m.mark;
  }

  void read(const YAML::Node& root);

 private:
  void read_model(const YAML::Node& v, Mark mark);
  void read_gdn(const MapView& model);
  void read_g_range(const MapView& gdn, double out[2]);
  void read_layers(const YAML::Node& v, Mark mark);
  void read_streams(const YAML::Node& v, Mark mark);
  StreamSpec read_stream(const MapView& m);
  StreamGenerator read_generator(const YAML::Node& v, const std::string& path, Mark mark);
  void read_run(const YAML::Node& v, Mark mark);
  void read_checks(const YAML::Node& v, Mark mark);
  void read_faults(const YAML::Node& v, Mark mark);

  const std::string& file_;
  Scenario& s_;
  std::vector<std::string> errors_;
};

void Reader::read(const YAML::Node& root) {
  if (!root.IsMap())
    fail(value_mark(root, Mark{1, 1}), "", "expected a map of scenario fields at the top level, found " + found(root));
  const MapView top = map(root, "", value_mark(root, Mark{1, 1}),
                          {"name", "description", "seed", "model", "layers", "streams", "run",
                           "tolerances", "kv_cache", "scratch", "reference", "invariance", "checks", "faults"});
  guard([&] { s_.name = string(need(top, "name"), "name", mark_of(top, "name"), false); });
  if (top.has("description"))
    guard([&] {
      s_.description = string(top.find("description")->first, "description", mark_of(top, "description"), true);
    });
  guard([&] {
    const YAML::Node& v = need(top, "seed");
    const Mark at = value_mark(v, mark_of(top, "seed"));
    refuse_quoted(v, "seed", mark_of(top, "seed"), "a non-negative integer");
    int64_t x = 0;
    const std::string t = v.IsScalar() ? v.Scalar() : "";
    if (!v.IsScalar() || !parse_int64(t, x)) {
      // Seeds above INT64_MAX: a plain decimal that fits in uint64.
      bool digits = !t.empty() && std::all_of(t.begin(), t.end(), [](char c) { return c >= '0' && c <= '9'; });
      errno = 0;
      unsigned long long u = digits ? std::strtoull(t.c_str(), nullptr, 10) : 0;
      if (!digits || errno == ERANGE) fail(at, "seed", "expected a non-negative integer, found " + found(v));
      s_.seed = u;
    } else {
      if (x < 0) fail(at, "seed", "expected a non-negative integer, found " + t);
      s_.seed = uint64_t(x);
    }
  });
  const size_t before_model = errors_.size();
  guard([&] { read_model(need(top, "model"), mark_of(top, "model")); });
  const bool model_ok = errors_.size() == before_model;
  const bool layers_ok = guard([&] { read_layers(need(top, "layers"), mark_of(top, "layers")); });

  // A gdn layer needs the model's gdn shape.
  if (model_ok && layers_ok && !s_.model.gdn.present) {
    for (size_t i = 0; i < s_.layers.size(); ++i) {
      if (s_.layers[i] == LayerKind::gdn) {
        guard([&] {
          fail(mark_of(top, "model"), "model.gdn",
               "required field missing in 'model' (layers.pattern holds a gdn layer, which needs "
               "num_k_heads, num_v_heads, k_dim, v_dim, d_conv)");
        });
        break;
      }
    }
  }
  guard([&] { read_streams(need(top, "streams"), mark_of(top, "streams")); });

  if (top.has("run")) guard([&] { read_run(top.find("run")->first, mark_of(top, "run")); });
  if (top.has("tolerances"))
    guard([&] {
      const MapView t = map(top.find("tolerances")->first, "tolerances", mark_of(top, "tolerances"), {"bf16"});
      if (t.has("bf16")) {
        const MapView b = map(t.find("bf16")->first, "tolerances.bf16", mark_of(t, "bf16"), {"factor", "atol"});
        guard([&] { s_.tol_bf16.factor = num_or(b, "factor", 0, true, 2.0); });
        guard([&] { s_.tol_bf16.atol = num_or(b, "atol", 0, false, 1e-5); });
      }
    });
  if (top.has("kv_cache"))
    guard([&] {
      const MapView k = map(top.find("kv_cache")->first, "kv_cache", mark_of(top, "kv_cache"), {"num_blocks"});
      s_.kv_num_blocks = int_at(k, "num_blocks", 1, kInt32Max);
    });
  if (top.has("scratch"))
    guard([&] {
      const MapView k = map(top.find("scratch")->first, "scratch", mark_of(top, "scratch"), {"capacity_bytes"});
      s_.scratch_capacity = int_at(k, "capacity_bytes", 1, kInt64Max);
    });
  if (top.has("reference"))
    guard([&] {
      const MapView k = map(top.find("reference")->first, "reference", mark_of(top, "reference"), {"sample"});
      s_.ref_sample = int(int_or(k, "sample", 0, kInt32Max, 0));
    });
  if (top.has("invariance"))
    guard([&] {
      const MapView k = map(top.find("invariance")->first, "invariance", mark_of(top, "invariance"), {"streams"});
      s_.invariance_streams = int(int_or(k, "streams", 0, kMaxStreams, 2));
    });
  if (top.has("checks")) guard([&] { read_checks(top.find("checks")->first, mark_of(top, "checks")); });
  if (top.has("faults")) guard([&] { read_faults(top.find("faults")->first, mark_of(top, "faults")); });
}

void Reader::read_model(const YAML::Node& v, Mark mark) {
  const MapView m = map(v, "model", mark,
                        {"num_q_heads", "num_kv_heads", "head_dim", "rotary_dim", "rope_theta",
                         "block_size", "dtype", "mrope", "gdn"});
  ModelSpec& md = s_.model;
  // Each field on its own (every problem is reported); the rules that relate fields
  // only run once the fields themselves read well.
  bool ok = guard([&] { md.num_q_heads = int(int_at(m, "num_q_heads", 1, kMaxHeads)); });
  ok &= guard([&] { md.num_kv_heads = int(int_at(m, "num_kv_heads", 1, kMaxHeads)); });
  const bool head_ok = guard([&] { md.head_dim = int(int_at(m, "head_dim", 1, kMaxDim)); });
  ok &= head_ok;
  ok &= head_ok && guard([&] { md.rotary_dim = int(int_or(m, "rotary_dim", 1, kMaxDim, md.head_dim)); });
  ok &= guard([&] { md.rope_theta = num_or(m, "rope_theta", 0, true, 10000.0); });
  ok &= guard([&] { md.block_size = int(int_or(m, "block_size", 1, 4096, 16)); });
  if (m.has("dtype"))
    ok &= guard([&] {
      const std::string d = string(m.find("dtype")->first, "model.dtype", mark_of(m, "dtype"), false);
      if (d != "bf16")
        fail(value_mark(m.find("dtype")->first, mark_of(m, "dtype")), "model.dtype",
             "this build supports bf16 only, found '" + d + "'");
    });
  if (m.has("gdn")) guard([&] { read_gdn(m); });
  if (!ok) return;
  guard([&] {
    if (md.num_q_heads % md.num_kv_heads != 0)
      fail(mark_of(m, "num_q_heads"), "model.num_q_heads",
           "GQA ratio: num_q_heads " + std::to_string(md.num_q_heads) + " is not a multiple of num_kv_heads " +
               std::to_string(md.num_kv_heads));
  });
  guard([&] {
    if (md.head_dim % 2 != 0)
      fail(mark_of(m, "head_dim"), "model.head_dim", "expected an even head_dim, found " + std::to_string(md.head_dim));
  });
  const bool rot_ok = guard([&] {
    if (md.rotary_dim > md.head_dim)
      fail(mark_of(m, "rotary_dim"), "model.rotary_dim",
           "expected rotary_dim <= head_dim " + std::to_string(md.head_dim) + ", found " + std::to_string(md.rotary_dim));
    if (md.rotary_dim % 2 != 0 || md.rotary_dim < 2)
      fail(mark_of(m, "rotary_dim"), "model.rotary_dim",
           "expected an even rotary_dim >= 2, found " + std::to_string(md.rotary_dim));
  });

  if (m.has("mrope") && rot_ok)
    guard([&] {
      const MapView r = map(m.find("mrope")->first, "model.mrope", mark_of(m, "mrope"), {"sections", "interleaved"});
      const auto secs = list(need(r, "sections"), "model.mrope.sections", mark_of(r, "sections"), true);
      if (secs.size() != 3)
        fail(mark_of(r, "sections"), "model.mrope.sections",
             "expected 3 integers [t, h, w], found " + std::to_string(secs.size()) + " entries");
      int sum = 0;
      for (int i = 0; i < 3; ++i) {
        md.mrope.sections[i] = int(integer(secs[i].first, item("model.mrope.sections", i), secs[i].second, 0, kMaxDim));
        sum += md.mrope.sections[i];
      }
      if (sum != md.rotary_dim / 2)
        fail(mark_of(r, "sections"), "model.mrope.sections",
             "sections sum to " + std::to_string(sum) + ", expected rotary_dim / 2 = " + std::to_string(md.rotary_dim / 2));
      md.mrope.interleaved = bool_or(r, "interleaved", false);
      md.mrope.enabled = true;
    });
}

void Reader::read_gdn(const MapView& m) {
  const MapView g = map(m.find("gdn")->first, "model.gdn", mark_of(m, "gdn"),
                        {"num_k_heads", "num_v_heads", "k_dim", "v_dim", "d_conv", "g_range"});
  GdnSpec& gd = s_.model.gdn;
  bool ok = guard([&] { gd.num_k_heads = int(int_at(g, "num_k_heads", 1, kMaxHeads)); });
  ok &= guard([&] { gd.num_v_heads = int(int_at(g, "num_v_heads", 1, kMaxHeads)); });
  ok &= guard([&] { gd.k_dim = int(int_at(g, "k_dim", 1, kMaxDim)); });
  ok &= guard([&] { gd.v_dim = int(int_at(g, "v_dim", 1, kMaxDim)); });
  ok &= guard([&] { gd.d_conv = int(int_at(g, "d_conv", 2, 8)); });
  if (g.has("g_range")) guard([&] { read_g_range(g, gd.g_range); });
  if (ok && gd.num_v_heads % gd.num_k_heads != 0)
    fail(mark_of(g, "num_v_heads"), "model.gdn.num_v_heads",
         "num_v_heads " + std::to_string(gd.num_v_heads) + " is not a multiple of num_k_heads " +
             std::to_string(gd.num_k_heads));
  // present even when a field failed: a gdn layer then does not also report model.gdn missing
  gd.present = true;
}

// model.gdn.g_range: [lo, hi] with -100 <= lo <= hi <= 0 (g is a log-decay).
void Reader::read_g_range(const MapView& g, double out[2]) {
  const std::string path = "model.gdn.g_range";
  const auto r = list(need(g, "g_range"), path, mark_of(g, "g_range"), true);
  if (r.size() != 2)
    fail(mark_of(g, "g_range"), path, "expected two numbers [lo, hi], found " + std::to_string(r.size()));
  double x[2];
  for (int i = 0; i < 2; ++i) {
    x[i] = number(r[i].first, item(path, i), r[i].second, -100, false);
    if (x[i] > 0)
      fail(value_mark(r[i].first, r[i].second), item(path, i),
           "expected a number <= 0 (g is a log-decay), found " + r[i].first.Scalar());
  }
  if (x[0] > x[1])
    fail(mark_of(g, "g_range"), path, "expected lo <= hi, found [" + r[0].first.Scalar() + ", " + r[1].first.Scalar() + "]");
  out[0] = x[0];
  out[1] = x[1];
}

void Reader::read_layers(const YAML::Node& v, Mark mark) {
  const MapView m = map(v, "layers", mark, {"pattern", "repeat"});
  const auto pat = list(need(m, "pattern"), "layers.pattern", mark_of(m, "pattern"));
  std::vector<LayerKind> kinds;
  for (size_t i = 0; i < pat.size(); ++i) {
    const YAML::Node& n = pat[i].first;
    if (n.IsScalar() && n.Scalar() == "attn") kinds.push_back(LayerKind::attn);
    else if (n.IsScalar() && n.Scalar() == "gdn") kinds.push_back(LayerKind::gdn);
    else fail(pat[i].second, item("layers.pattern", i), "expected attn or gdn, found " + found(n));
  }
  const int64_t repeat = int_or(m, "repeat", 1, kMaxLayers, 1);
  if (int64_t(kinds.size()) * repeat > kMaxLayers)
    fail(m.has("repeat") ? mark_of(m, "repeat") : mark_of(m, "pattern"), m.has("repeat") ? "layers.repeat" : "layers.pattern",
         std::to_string(kinds.size()) + " layers x repeat " + std::to_string(repeat) + " = " +
             std::to_string(int64_t(kinds.size()) * repeat) + " layers, at most " + std::to_string(kMaxLayers));
  for (int64_t r = 0; r < repeat; ++r) s_.layers.insert(s_.layers.end(), kinds.begin(), kinds.end());
}

StreamSpec Reader::read_stream(const MapView& m) {
  StreamSpec st;
  bool ok = guard([&] { st.chunk_start = int(int_or(m, "chunk_start", 0, kMaxTokens, 0)); });
  ok &= guard([&] { st.tokens = int(int_at(m, "tokens", 1, kMaxTokens)); });
  if (!ok) already_reported();
  const int64_t kv_len = int64_t(st.chunk_start) + st.tokens;
  if (m.has("images")) {
    const std::string ip = child(m.path, "images");
    if (!s_.model.mrope.enabled)
      fail(mark_of(m, "images"), ip, "image segments need model.mrope (their H/W positions come from the patch grid)");
    const auto imgs = list(m.find("images")->first, ip, mark_of(m, "images"));
    int64_t prev_end = 0;
    for (size_t j = 0; j < imgs.size(); ++j) {
      const std::string p = item(ip, j);
      const MapView im = map(imgs[j].first, p, imgs[j].second, {"start", "grid"});
      ImageSegment seg;
      seg.start = int(int_at(im, "start", 0, kMaxTokens));
      const auto grid = list(need(im, "grid"), child(p, "grid"), mark_of(im, "grid"), true);
      if (grid.size() != 3)
        fail(mark_of(im, "grid"), child(p, "grid"),
             "expected 3 positive integers [t, h, w], found " + std::to_string(grid.size()) + " entries");
      int64_t g[3];
      for (int k = 0; k < 3; ++k) g[k] = integer(grid[k].first, item(child(p, "grid"), k), grid[k].second, 1, kMaxTokens);
      const int64_t n = g[0] * g[1] * g[2];
      if (n > kMaxTokens)
        fail(mark_of(im, "grid"), child(p, "grid"), "grid holds " + std::to_string(n) + " tokens, at most " + std::to_string(kMaxTokens));
      seg.grid_t = int(g[0]), seg.grid_h = int(g[1]), seg.grid_w = int(g[2]);
      if (seg.start < prev_end)
        fail(imgs[j].second, p,
             "image segments must be sorted and non-overlapping: starts at " + std::to_string(seg.start) +
                 " but the previous one ends at " + std::to_string(prev_end));
      if (seg.start + n > kv_len)
        fail(imgs[j].second, p,
             "image tokens [" + std::to_string(seg.start) + ", " + std::to_string(seg.start + n) +
                 ") reach past the stream's sequence [0, " + std::to_string(kv_len) + ") (chunk_start + tokens)");
      prev_end = seg.start + n;
      st.images.push_back(seg);
    }
  }
  if (m.has("blocks")) {
    const std::string bp = child(m.path, "blocks");
    const auto blocks = list(m.find("blocks")->first, bp, mark_of(m, "blocks"));
    for (size_t j = 0; j < blocks.size(); ++j)
      st.blocks.push_back(int32_t(integer(blocks[j].first, item(bp, j), blocks[j].second, 0, kInt32Max)));
  }
  return st;
}

StreamGenerator Reader::read_generator(const YAML::Node& v, const std::string& path, Mark mark) {
  if (!v.IsMap()) fail(value_mark(v, mark), path, "expected a map, found " + found(v));
  // The dist decides which keys are known, so it is read first.
  const YAML::Node dn = v["dist"];
  StreamGenerator g;
  std::vector<std::string> keys = {"dist", "count", "chunk_start", "chunk_start_max"};
  if (!dn.IsDefined()) {
    fail(value_mark(v, mark), child(path, "dist"),
         "required field missing in '" + path + "' (one of: fixed, uniform, lognormal, long_tail)");
  }
  const Mark dist_mark = value_mark(dn, value_mark(v, mark));
  const std::string d = dn.IsScalar() ? dn.Scalar() : "";
  if (d == "fixed") g.dist = StreamDist::fixed, keys.push_back("tokens");
  else if (d == "uniform") g.dist = StreamDist::uniform, keys.insert(keys.end(), {"min", "max"});
  else if (d == "lognormal") g.dist = StreamDist::lognormal, keys.insert(keys.end(), {"median", "sigma", "min", "max"});
  else if (d == "long_tail") g.dist = StreamDist::long_tail, keys.insert(keys.end(), {"long", "long_count", "min", "max"});
  else fail(dist_mark, child(path, "dist"), "expected fixed, uniform, lognormal or long_tail, found " + found(dn));

  // A field of another dist gets its own message.
  const std::vector<std::string> any = {"tokens", "min", "max", "median", "sigma", "long", "long_count"};
  for (auto it = v.begin(); it != v.end(); ++it) {
    const std::string k = it->first.IsScalar() ? it->first.Scalar() : "";
    if (std::find(any.begin(), any.end(), k) != any.end() && std::find(keys.begin(), keys.end(), k) == keys.end())
      fail(value_mark(it->first, mark), child(path, k),
           "'" + k + "' is not a field of dist " + d + " (its fields: " + join(keys) + ")");
  }
  const MapView m = map(v, path, mark, keys);
  g.count = int(int_at(m, "count", 1, kMaxStreams));
  switch (g.dist) {
    case StreamDist::fixed:
      g.tokens = int(int_at(m, "tokens", 1, kMaxTokens));
      break;
    case StreamDist::lognormal:
      g.median = num_at(m, "median", 0, true);
      g.sigma = num_at(m, "sigma", 0, true);
      [[fallthrough]];
    case StreamDist::uniform:
      g.min = int(int_at(m, "min", 1, kMaxTokens));
      g.max = int(int_at(m, "max", 1, kMaxTokens));
      break;
    case StreamDist::long_tail:
      g.long_tokens = int(int_at(m, "long", 1, kMaxTokens));
      g.long_count = int(int_at(m, "long_count", 1, kMaxStreams));
      if (g.long_count > g.count)
        fail(mark_of(m, "long_count"), child(path, "long_count"),
             "expected 1 <= long_count <= count " + std::to_string(g.count) + ", found " + std::to_string(g.long_count));
      g.min = int(int_at(m, "min", 1, kMaxTokens));
      g.max = int(int_at(m, "max", 1, kMaxTokens));
      break;
  }
  if (g.dist != StreamDist::fixed && g.min > g.max)
    fail(mark_of(m, "max"), child(path, "max"),
         "expected max >= min " + std::to_string(g.min) + ", found " + std::to_string(g.max));
  g.chunk_start = int(int_or(m, "chunk_start", 0, kMaxTokens, 0));
  g.chunk_start_max = int(int_or(m, "chunk_start_max", 0, kMaxTokens, 0));
  if (m.has("chunk_start_max") && g.chunk_start_max < g.chunk_start)
    fail(mark_of(m, "chunk_start_max"), child(path, "chunk_start_max"),
         "expected chunk_start_max >= chunk_start " + std::to_string(g.chunk_start) + ", found " +
             std::to_string(g.chunk_start_max));
  return g;
}

void Reader::read_streams(const YAML::Node& v, Mark mark) {
  if (v.IsMap()) {  // streams: {from_jsonl: FILE, line: N}, an engine-captured batch
    const MapView m = map(v, "streams", mark, {"from_jsonl", "line"});
    std::string file;
    bool ok = guard([&] { file = string(need(m, "from_jsonl"), "streams.from_jsonl", mark_of(m, "from_jsonl"), false); });
    ok &= guard([&] {
      if (!m.has("line"))
        missing(m, "line", "the 1-based line of the file; `prefill-bench sweep --grid line=all` runs every line");
      s_.streams_line = int(int_at(m, "line", 1, kInt32Max));
    });
    if (!ok) already_reported();
    const size_t slash = file_.find_last_of('/');
    s_.streams_from_jsonl = file[0] == '/' || slash == std::string::npos ? file : file_.substr(0, slash + 1) + file;
    std::vector<StreamSpec> specs;
    try {
      specs = read_jsonl_batch(s_.streams_from_jsonl, s_.streams_line);
    } catch (const InputError& e) {
      std::vector<std::string> problems;
      for (const std::string& p : e.problems())
        problems.push_back(p + " (streams.from_jsonl at " + file_ + ":" + std::to_string(mark_of(m, "from_jsonl").line) + ")");
      throw InputError(problems);
    }
    for (StreamSpec& st : specs) {
      StreamSource src;
      src.stream = std::move(st);
      src.mark = mark_of(m, "line");
      s_.streams.push_back(std::move(src));
    }
    return;
  }
  const auto items = list(v, "streams", mark);
  int64_t total = 0;
  for (size_t i = 0; i < items.size(); ++i) guard([&] {
    const std::string p = item("streams", i);
    const YAML::Node& n = items[i].first;
    StreamSource src;
    src.mark = items[i].second;
    if (n.IsMap() && n["generate"].IsDefined()) {
      for (auto it = n.begin(); it != n.end(); ++it)
        if (!(it->first.IsScalar() && it->first.Scalar() == "generate"))
          fail(value_mark(it->first, items[i].second), p,
               "an entry is either an explicit stream (chunk_start, tokens, images, blocks) or "
               "{generate: ...}, not both: found " + found(it->first) + " next to 'generate'");
      const MapView m = map(n, p, items[i].second, {"generate"});
      src.generate = read_generator(m.find("generate")->first, child(p, "generate"), mark_of(m, "generate"));
      total += src.generate->count;
    } else {
      const MapView m = map(n, p, items[i].second, {"chunk_start", "tokens", "images", "blocks", "generate"});
      src.stream = read_stream(m);
      total += 1;
    }
    if (total > kMaxStreams)
      fail(items[i].second, p,
           "the stream list reaches " + std::to_string(total) + " streams here, at most " + std::to_string(kMaxStreams));
    s_.streams.push_back(std::move(src));
  });
}

void Reader::read_run(const YAML::Node& v, Mark mark) {
  const MapView m = map(v, "run", mark, {"warmup", "repeat", "l2_flush", "noise"});
  s_.warmup = int(int_or(m, "warmup", 0, 100000, 2));
  if (m.has("repeat")) s_.repeat = int(int_at(m, "repeat", 1, 100000));
  s_.l2_flush = bool_or(m, "l2_flush", true);
  if (const auto* e = m.find("noise")) {
    const MapView n = map(e->first, "run.noise", e->second, {"target", "min_samples", "max_time_s"});
    guard([&] { s_.noise.target = num_or(n, "target", 0, true, s_.noise.target); });
    guard([&] { s_.noise.min_samples = int(int_or(n, "min_samples", 1, 100000, s_.noise.min_samples)); });
    guard([&] { s_.noise.max_time_s = num_or(n, "max_time_s", 0, true, s_.noise.max_time_s); });
  }
}

void Reader::read_checks(const YAML::Node& v, Mark mark) {
  const auto names = list(v, "checks", mark);
  const std::vector<std::string>& known = all_check_names();
  for (size_t i = 0; i < names.size(); ++i) guard([&] {
    const std::string c = string(names[i].first, item("checks", i), names[i].second, false);
    if (std::find(known.begin(), known.end(), c) == known.end())
      fail(names[i].second, item("checks", i), unknown_name("check", c, known));
    if (std::find(s_.checks.begin(), s_.checks.end(), c) != s_.checks.end())
      fail(names[i].second, item("checks", i), "check '" + c + "' listed twice");
    s_.checks.push_back(c);
  });
}

void Reader::read_faults(const YAML::Node& v, Mark mark) {
  const auto names = list(v, "faults", mark);
  for (size_t i = 0; i < names.size(); ++i) {
    const std::string f = string(names[i].first, item("faults", i), names[i].second, false);
    Fault fault;
    try {
      fault = parse_fault(f);
    } catch (const InputError& e) {
      fail(names[i].second, item("faults", i), e.what());
    }
    if (s_.faults.has(fault)) fail(names[i].second, item("faults", i), "fault '" + f + "' listed twice");
    s_.faults.add(fault);
  }
}

}  // namespace

std::string Scenario::where(const std::string& field) const {
  std::string f = field;
  while (!f.empty()) {
    auto it = marks.find(f);
    if (it != marks.end() && it->second.line > 0)
      return path + ":" + std::to_string(it->second.line) + ":" + std::to_string(it->second.column);
    // Drop the last component: "a.b[3]" -> "a.b" -> "a".
    const size_t cut = f.find_last_of(".[");
    f = cut == std::string::npos ? "" : f.substr(0, cut);
  }
  return path;
}

InputError Scenario::error(const std::string& field, const std::string& what) const {
  std::string f = field;
  while (!f.empty()) {
    auto it = marks.find(f);
    if (it != marks.end() && it->second.line > 0) return InputError(located(path, it->second, field, what));
    const size_t cut = f.find_last_of(".[");
    f = cut == std::string::npos ? "" : f.substr(0, cut);
  }
  return InputError(located(path, Mark{}, field, what));
}

Scenario parse_scenario(const std::string& text, const std::string& path) {
  YAML::Node root;
  try {
    // One document per file: a second one (after ---) would be silently ignored by Load.
    const std::vector<YAML::Node> docs = YAML::LoadAll(text);
    if (docs.size() > 1)
      throw InputError(located(path, to_mark(docs[1].Mark()), "",
                               "a second YAML document (after '---'); a scenario file holds one document"));
    if (!docs.empty()) root = docs.front();
  } catch (const YAML::Exception& e) {
    throw InputError(located(path, to_mark(e.mark), "", "YAML syntax error: " + e.msg));
  }
  Scenario s;
  s.path = path;
  Reader reader(path, s);
  reader.read(root);
  if (!reader.errors().empty()) throw InputError(reader.errors());
  // The batch-level checks (block tables, KV cache size) and the checks list against
  // the model run here too, so a scenario that loads is one that can run.
  validate_batch(s, resolve_streams(s));
  validate_checks(s);
  return s;
}

Scenario load_scenario(const std::string& path) {
  // stat before open: opening a FIFO would block, and /dev/zero never ends.
  struct stat st {};
  if (stat(path.c_str(), &st) != 0)
    throw InputError(located(path, Mark{}, "", std::string("cannot open the scenario file: ") + std::strerror(errno)));
  if (!S_ISREG(st.st_mode))
    throw InputError(located(path, Mark{}, "",
                             std::string("not a regular file (") +
                                 (S_ISDIR(st.st_mode) ? "a directory" : S_ISFIFO(st.st_mode) ? "a FIFO"
                                  : S_ISCHR(st.st_mode) || S_ISBLK(st.st_mode) ? "a device" : "a special file") +
                                 "); a scenario is a YAML file"));
  if (uint64_t(st.st_size) > kMaxScenarioBytes)
    throw InputError(located(path, Mark{}, "",
                             "the file holds " + std::to_string(st.st_size) + " bytes, more than the " +
                                 std::to_string(kMaxScenarioBytes) + " a scenario file may (16 MiB)"));
  std::ifstream in(path, std::ios::binary);
  if (!in) throw InputError(located(path, Mark{}, "", "cannot open the scenario file (missing or unreadable)"));
  std::ostringstream text;
  text << in.rdbuf();
  if (in.bad()) throw InputError(located(path, Mark{}, "", "cannot read the scenario file"));
  return parse_scenario(text.str(), path);
}

}  // namespace pb
