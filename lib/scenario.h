// scenario.h: a parsed, validated scenario file. Every field has the same name
// as in the YAML and in docs/DESIGN.md. A Scenario only exists once it passed
// validate(): later stages may assume every invariant listed below.
#pragma once
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "faults.h"
#include "input_error.h"
#include "timing.h"

namespace pb {

enum class LayerKind { attn, gdn };
enum class DType { bf16 };

struct MropeSpec {
  bool enabled = false;
  int sections[3] = {0, 0, 0};  // t, h, w: frequencies per section, sum = rotary_dim / 2
  bool interleaved = false;     // Qwen3-VL style: frequencies alternate t,h,w
};

struct GdnSpec {
  bool present = false;  // required when the layer pattern holds a gdn layer
  int num_k_heads = 0;   // q and k heads
  int num_v_heads = 0;   // multiple of num_k_heads
  int k_dim = 0;
  int v_dim = 0;
  int d_conv = 0;        // conv1d kernel width, >= 2
  // The generator draws each token's log-decay g uniformly in [g_range[0], g_range[1]]
  // (-100 <= g_range[0] <= g_range[1] <= 0). The default forgets within ~30 tokens;
  // e.g. [-0.005, -0.0005] keeps a state over thousands (long-memory heads).
  double g_range[2] = {-0.31, -0.01};
  int conv_dim() const { return 2 * num_k_heads * k_dim + num_v_heads * v_dim; }
};

struct ModelSpec {
  int num_q_heads = 0;
  int num_kv_heads = 0;   // divides num_q_heads
  int head_dim = 0;
  int rotary_dim = 0;     // even, <= head_dim
  double rope_theta = 10000.0;
  int block_size = 16;
  DType dtype = DType::bf16;
  MropeSpec mrope;
  GdnSpec gdn;
};

// An image segment: grid_t*grid_h*grid_w tokens starting at absolute token
// index `start` of the stream's sequence (Qwen2-VL position rule,
// docs/DESIGN.md "The kernels").
struct ImageSegment {
  int start = 0;
  int grid_t = 1, grid_h = 1, grid_w = 1;
  int tokens() const { return grid_t * grid_h * grid_w; }
};

// One explicit stream, or one produced by a generator.
struct StreamSpec {
  int chunk_start = 0;               // tokens already in the KV cache
  int tokens = 0;                    // tokens this chunk contributes (> 0)
  std::vector<ImageSegment> images;  // sorted, non-overlapping, within [0, kv_len)
  std::vector<int32_t> blocks;       // explicit physical block ids; empty = allocate
};

enum class StreamDist { fixed, uniform, lognormal, long_tail };

struct StreamGenerator {
  StreamDist dist = StreamDist::fixed;
  int count = 0;
  int tokens = 0;                  // fixed
  int min = 1, max = 1;            // uniform, lognormal (clamp), long_tail short range
  double median = 0, sigma = 0;    // lognormal
  int long_tokens = 0;             // long_tail: length of the long streams
  int long_count = 0;              // long_tail: how many of `count` are long (placed first)
  int chunk_start = 0;             // fixed chunk_start for every stream...
  int chunk_start_max = 0;         // ...or uniform in [chunk_start, chunk_start_max] when > 0
};

// One entry of the `streams:` list, in file order.
struct StreamSource {
  std::optional<StreamSpec> stream;
  std::optional<StreamGenerator> generate;
  Mark mark;
};

// Tolerance of the numeric and state checks (FlashAttention's rule,
// docs/DESIGN.md "The checks"):
// max|backend - ref| <= factor * max|lowp_ref - ref| + atol.
struct Tolerance {
  double factor = 2.0;
  double atol = 1e-5;
};

struct Scenario {
  std::string path;         // the file it came from
  std::string name;
  std::string description;
  uint64_t seed = 0;
  ModelSpec model;
  std::vector<LayerKind> layers;  // pattern x repeat, expanded
  std::vector<StreamSource> streams;
  // streams: {from_jsonl: FILE, line: N}: the file (resolved against the
  // scenario's directory) and the 1-based line the streams came from; "" / 0 otherwise.
  std::string streams_from_jsonl;
  int streams_line = 0;
  int warmup = 2;
  std::optional<int> repeat;  // run.repeat: exactly this many timed samples; unset: the noise rule
  NoiseRule noise;            // run.noise (lib/timing.h)
  bool l2_flush = true;       // run.l2_flush: cold L2 (flushed before each timed entry)
  Tolerance tol_bf16;
  int64_t kv_num_blocks = 0;       // 0: enough for the batch plus spare blocks
  int64_t scratch_capacity = 0;    // bytes; 0: what the layout needs plus guards
  int ref_sample = 0;              // rows per stream and head; 0 = full reference
  int invariance_streams = 2;      // invariance.streams: streams the invariance check runs alone
  std::vector<std::string> checks; // enabled checks; empty = all
  FaultSet faults;                 // injected faults listed in the file

  // Field path ("model.head_dim", "streams[2].tokens") -> where it was in the file.
  std::map<std::string, Mark> marks;
  // "FILE:LINE:COL" of a field (or of its closest parent that has a mark).
  std::string where(const std::string& field) const;
  // An InputError located at `field`.
  InputError error(const std::string& field, const std::string& what) const;
};

// Parses and validates the file; throws InputError (located) on any problem.
Scenario load_scenario(const std::string& path);
// Same, from text (`path` is used in messages only).
Scenario parse_scenario(const std::string& text, const std::string& path);

}  // namespace pb
