// resource_estimate.cpp: the sizes of resource_estimate.h, counted from what the
// code allocates: the generated inputs of every layer (Batch), the backend's
// buffers of every layer (the host backend keeps initial and live caches and
// states), one layer's reference and read-backs at a time (two read-backs: the
// checked run and the determinism rerun), and the staged scratch images.
#include "resource_estimate.h"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <limits>
#include <sstream>

#include <fmt/format.h>

#include "batch.h"
#include "buffer_guard.h"
#include "check_result.h"
#include "staged_layout.h"

namespace pb {

namespace {

constexpr uint64_t kI32Max = uint64_t(std::numeric_limits<int32_t>::max());

// Checked 64-bit products and sums; an overflow is an input error at `field`.
class Sizer {
 public:
  explicit Sizer(const Scenario& s) : s_(s) {}
  uint64_t mul(std::initializer_list<uint64_t> factors, const std::string& what, const std::string& field) const {
    uint64_t r = 1;
    for (uint64_t f : factors)
      if (__builtin_mul_overflow(r, f, &r))
        throw s_.error(field, what + ": the size overflows 64 bits");
    return r;
  }
  uint64_t add(uint64_t a, uint64_t b, const std::string& what, const std::string& field) const {
    uint64_t r = 0;
    if (__builtin_add_overflow(a, b, &r)) throw s_.error(field, what + ": the size overflows 64 bits");
    return r;
  }
  // A tensor indexed with i32 by the kernels: its element count must fit.
  uint64_t tensor(std::initializer_list<uint64_t> dims, const std::string& what, const std::string& field) const {
    const uint64_t n = mul(dims, what, field);
    if (n > kI32Max)
      throw s_.error(field, fmt::format("{} would hold {} elements, more than an i32 index reaches ({})", what, n,
                                        kI32Max));
    return n;
  }

 private:
  const Scenario& s_;
};

std::string human_bytes(double b) {
  if (b >= 1e9) return fmt::format("{:.1f} GB", b / 1e9);
  if (b >= 1e6) return fmt::format("{:.1f} MB", b / 1e6);
  if (b >= 1e3) return fmt::format("{:.1f} kB", b / 1e3);
  return fmt::format("{:.0f} B", b);
}

double sum(const std::vector<EstimateItem>& v) {
  double t = 0;
  for (const EstimateItem& i : v) t += i.amount;
  return t;
}

const EstimateItem* largest(const std::vector<const std::vector<EstimateItem>*>& lists) {
  const EstimateItem* best = nullptr;
  for (const auto* l : lists)
    for (const EstimateItem& i : *l)
      if (!best || i.amount > best->amount) best = &i;
  return best;
}

std::string breakdown(const std::vector<const std::vector<EstimateItem>*>& lists, bool bytes) {
  std::vector<const EstimateItem*> all;
  for (const auto* l : lists)
    for (const EstimateItem& i : *l) all.push_back(&i);
  std::sort(all.begin(), all.end(), [](auto* a, auto* b) { return a->amount > b->amount; });
  std::string s;
  for (size_t i = 0; i < all.size() && i < 3; ++i)
    s += fmt::format("{}{} {}", i ? ", " : "", bytes ? human_bytes(all[i]->amount)
                                                    : fmt::format("{:.0f} GFLOP", all[i]->amount / 1e9),
                     all[i]->what);
  return s;
}

}  // namespace

double ResourceEstimate::host_bytes() const { return sum(host); }
double ResourceEstimate::device_bytes() const { return sum(device); }
double ResourceEstimate::ref_flops() const { return sum(work); }

std::string ResourceEstimate::summary() const {
  return fmt::format("host {}, device {} (the host backend holds both in host memory), reference {:.3g} GFLOP",
                     human_bytes(host_bytes()), human_bytes(device_bytes()), ref_flops() / 1e9);
}

uint64_t planned_num_blocks(const Scenario& s, const std::vector<StreamSpec>& streams) {
  if (s.kv_num_blocks) return uint64_t(s.kv_num_blocks);
  const uint64_t bs = uint64_t(std::max(1, s.model.block_size));
  uint64_t blocks = 0;
  for (const StreamSpec& st : streams) blocks += (uint64_t(st.chunk_start) + uint64_t(st.tokens) + bs - 1) / bs;
  return default_num_blocks(blocks);
}

ResourceEstimate estimate_resources(const Scenario& s, const std::vector<StreamSpec>& streams, int ref_sample,
                                    bool graph) {
  const Sizer z(s);
  const ModelSpec& m = s.model;
  const uint64_t N = streams.size();
  uint64_t T = 0, P = 0, blocks = 0, max_blocks = 0;
  double pairs = 0;  // (query row, key) pairs of the causal attention the reference computes
  const uint64_t bs = uint64_t(std::max(1, m.block_size));
  for (const StreamSpec& st : streams) {
    const uint64_t kv = z.add(uint64_t(st.chunk_start), uint64_t(st.tokens), "chunk_start + tokens", "streams");
    T = z.add(T, uint64_t(st.tokens), "total tokens", "streams");
    P = z.add(P, uint64_t(st.chunk_start), "total cached tokens", "streams");
    const uint64_t nb = (kv + bs - 1) / bs;
    blocks = z.add(blocks, nb, "blocks", "streams");
    max_blocks = std::max(max_blocks, nb);
    const double rows = ref_sample > 0 ? std::min<double>(ref_sample, st.tokens) : st.tokens;
    pairs += ref_sample > 0 ? rows * double(kv)
                            : double(st.tokens) * st.chunk_start + 0.5 * double(st.tokens) * (st.tokens + 1.0);
  }
  const std::string kv_field = s.kv_num_blocks ? "kv_cache.num_blocks" : "streams";
  const uint64_t NB = planned_num_blocks(s, streams);
  const uint64_t A = std::count(s.layers.begin(), s.layers.end(), LayerKind::attn);
  const uint64_t G = std::count(s.layers.begin(), s.layers.end(), LayerKind::gdn);
  const uint64_t Hq = m.num_q_heads, Hkv = m.num_kv_heads, D = m.head_dim;

  ResourceEstimate e;
  double host_inputs = 0, ref_layer = 0, read_layer = 0;
  double cobatched = 0;  // invariance: every layer's outputs kept per stream
  std::string layer_field = "streams";  // what drives the per-layer items: the KV cache or the streams
  if (A) {
    const uint64_t q = z.tensor({T, Hq, D}, "q (total tokens x num_q_heads x head_dim)", "streams");
    const uint64_t k = z.tensor({T, Hkv, D}, "k (total tokens x num_kv_heads x head_dim)", "streams");
    const uint64_t prior = z.mul({P, Hkv, D, 2}, "prior KV of the cached tokens", "streams");
    const uint64_t cache = z.tensor({NB, bs, Hkv, D}, "the paged KV cache (num_blocks x block_size x num_kv_heads x head_dim)",
                                    kv_field);
    host_inputs += double(A) * 2 * (double(q) + 2.0 * k + 2.0 * prior);
    cobatched += double(A) * 2 * (double(q) + 2.0 * k);
    e.device.push_back({fmt::format("attention tensors ({} layers: q, k, v, roped q and k, out)", A), "streams",
                        double(A) * 2 * (2.0 * q + 2.0 * k + q + k + k)});
    e.device.push_back({fmt::format("KV caches ({} layers x initial and live K and V)", A), kv_field,
                        double(A) * 4 * 2 * double(cache)});
    ref_layer = std::max(ref_layer, 8.0 * q + q + 2 * 2.0 * cache + 2 * 2.0 * cache);  // out hp/lp, expected and initial caches
    if (4.0 * cache > 9.0 * q) layer_field = kv_field;
    read_layer = std::max(read_layer, 2 * (2.0 * q + 2 * 2.0 * cache));
    e.work.push_back({fmt::format("attention reference ({} layers, float64 and bf16 passes)", A), "streams",
                      double(A) * 2 * 4.0 * Hq * D * pairs});
  }
  if (G) {
    const GdnSpec& g = m.gdn;
    const uint64_t C = uint64_t(g.conv_dim()), W = uint64_t(std::max(1, g.d_conv - 1));
    const uint64_t S = z.tensor({uint64_t(g.num_v_heads), uint64_t(g.v_dim), uint64_t(g.k_dim)}, "h_state of one stream",
                                "model.gdn");
    const uint64_t states = z.tensor({N, S}, "h_state of all streams (streams x num_v_heads x v_dim x k_dim)", "streams");
    const uint64_t x = z.tensor({T, C}, "x (total tokens x conv_dim)", "streams");
    const uint64_t gb = z.tensor({T, uint64_t(g.num_v_heads)}, "g and beta", "streams");
    const uint64_t conv = z.tensor({N, C, W}, "conv_state of all streams", "streams");
    const uint64_t out = z.tensor({T, uint64_t(g.num_v_heads), uint64_t(g.v_dim)}, "gdn out", "streams");
    host_inputs += double(G) * (2.0 * x + 2.0 * C * (W + 1) + 8.0 * gb + 4.0 * states + 2.0 * conv);
    cobatched += double(G) * (2.0 * out + 4.0 * states + 2.0 * conv);
    e.device.push_back({fmt::format("gdn tensors ({} layers: x, conv out, weights, g, beta, out)", G), "streams",
                        double(G) * (4.0 * x + 2.0 * C * (W + 1) + 8.0 * gb + 2.0 * out)});
    e.device.push_back({fmt::format("gdn states ({} layers x initial and live h_state, conv_state)", G), "streams",
                        double(G) * (8.0 * states + 4.0 * conv)});
    if (8.0 * out + 8.0 * states + 2.0 * conv > ref_layer) layer_field = "streams";
    ref_layer = std::max(ref_layer, 8.0 * out + 8.0 * states + 2.0 * conv);
    read_layer = std::max(read_layer, 2 * (2.0 * out + 4.0 * states + 2.0 * conv));
    e.work.push_back({fmt::format("gdn reference ({} layers, float64 and bf16 passes)", G), "streams",
                      double(G) * 2 * 4.0 * double(T) * g.num_v_heads * g.k_dim * g.v_dim});
  }
  e.host.push_back({"generated inputs of every layer", "streams", host_inputs});
  if (graph) e.host.push_back({"--graph: the bucket's second batch (its generated inputs)", "streams", host_inputs});
  if (N >= 2 && (s.checks.empty() || std::count(s.checks.begin(), s.checks.end(), kCheckInvariance)))
    e.host.push_back({"invariance check (a sub-batch's inputs, every layer's co-batched outputs)", "streams",
                      host_inputs + cobatched});
  e.host.push_back({"one layer's reference", layer_field, ref_layer});
  e.host.push_back({"one layer's read-backs (checked run and determinism rerun)", layer_field, read_layer});

  const StagedLayout layout = compute_layout(int(std::min<uint64_t>(N, kI32Max)), int(std::min<uint64_t>(T, kI32Max)),
                                             m.mrope.enabled);
  const double scratch = s.scratch_capacity ? double(s.scratch_capacity) : double(plan_scratch(layout, 0).needed());
  const std::string scratch_field = s.scratch_capacity ? "scratch.capacity_bytes" : "streams";
  const double arena = 4.0 * (double(blocks) + 2.0 * N) + 8.0 * N + 4.0 * (double(max_blocks) + 2) + 8.0 * N;
  e.device.push_back({"scratch buffer", scratch_field, scratch});
  e.device.push_back({"table arena", "streams", arena});
  // buffer_guard: two zones around each buffer (Backend::alloc): per attention layer
  // q, k, v, out, the live and initial caches and the workspace; per gdn layer x,
  // conv_weight, g, beta, out, the live and initial states and the workspace.
  e.device.push_back({fmt::format("guard zones (2 x {} around each of {} buffers)", human_bytes(kBufferGuardBytes),
                                  9 * A + 10 * G + 2),
                      "layers.pattern", 2.0 * kBufferGuardBytes * double(9 * A + 10 * G + 2)});
  e.host.push_back({"staged scratch images (image, expectation, read-back)", scratch_field, 3 * scratch + 2 * arena});
  return e;
}

double host_memory_available() {
  std::ifstream in("/proc/meminfo");
  std::string key;
  double kb = 0;
  std::string unit;
  while (in >> key >> kb >> unit)
    if (key == "MemAvailable:") return kb * 1024;
  return 0;
}

void check_resources(const Scenario& s, const ResourceEstimate& e, const ResourceLimits& lim) {
  const bool host_holds_device = lim.backend != "cuda";
  std::vector<const std::vector<EstimateItem>*> host_lists = {&e.host};
  if (host_holds_device) host_lists.push_back(&e.device);
  const double host = e.host_bytes() + (host_holds_device ? e.device_bytes() : 0);
  const double avail = host_memory_available();
  const double host_max = lim.max_memory_bytes ? *lim.max_memory_bytes : avail > 0 ? avail : 8e9;
  const char* raise = "raise the ceiling with --max-memory GB if the machine really has it";
  if (host > host_max) {
    const EstimateItem* big = largest(host_lists);
    throw s.error(big->field,
                  fmt::format("the run would hold an estimated {} of host memory{} ({}), more than the {} {}; "
                              "{}", human_bytes(host), host_holds_device ? " (host backend, or auto without a GPU)" : "",
                              breakdown(host_lists, true), human_bytes(host_max),
                              lim.max_memory_bytes ? "given by --max-memory" : avail > 0 ? "available (MemAvailable)"
                                                                                      : "assumed (MemAvailable unknown)",
                              raise));
  }
  const double dev_max = lim.max_memory_bytes    ? *lim.max_memory_bytes
                         : lim.device_free_bytes ? *lim.device_free_bytes
                                                 : kDefaultDeviceBytes;
  if (lim.backend != "host" && e.device_bytes() > dev_max) {
    const EstimateItem* big = largest({&e.device});
    throw s.error(big->field, fmt::format("the run would hold an estimated {} of device memory ({}), more than the {} {}; {}",
                                          human_bytes(e.device_bytes()), breakdown({&e.device}, true), human_bytes(dev_max),
                                          lim.max_memory_bytes    ? "given by --max-memory"
                                          : lim.device_free_bytes ? "free on the CUDA device"
                                                                  : "assumed for a device",
                                          raise));
  }
  const double ref_max = lim.max_ref_flops ? *lim.max_ref_flops : kDefaultRefFlops;
  if (lim.reference && e.ref_flops() > ref_max) {
    const EstimateItem* big = largest({&e.work});
    throw s.error(big->field,
                  fmt::format("the reference would take an estimated {:.0f} GFLOP ({}), more than the {:.0f} GFLOP "
                              "allowed; sample rows (--ref-sample K, reference.sample) or raise the ceiling with "
                              "--max-ref-gflop N", e.ref_flops() / 1e9, breakdown({&e.work}, false), ref_max / 1e9));
  }
}

}  // namespace pb
