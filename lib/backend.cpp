// backend.cpp: the one harness path for every kernel library (backend.h): the
// buffers in a Memory, the ABI's argument structs built from them, prepare
// outside timing, and timing marks around every entry the harness calls.
#include "backend.h"

#include <fmt/format.h>

#include <cmath>
#include <cstring>
#include <stdexcept>

#include "input_error.h"
#include "trace.h"

namespace pb {

namespace {

constexpr size_t kMsgLen = 1024;

pb_tensor tensor(uint64_t data, pb_dtype dtype, std::initializer_list<int64_t> dims) {
  pb_tensor t;
  std::memset(&t, 0, sizeof t);
  t.data = data;
  t.dtype = dtype;
  t.ndim = static_cast<uint32_t>(dims.size());
  int i = 0;
  for (int64_t d : dims) t.shape[i++] = d;
  int64_t stride = 1;
  for (int j = static_cast<int>(t.ndim) - 1; j >= 0; --j) {
    t.stride[j] = stride;
    stride *= t.shape[j];
  }
  return t;
}

// The ABI's metadata: the same values, the host copies as pointers into `m`
// (valid while `m` lives).
pb_batched_attn_metadata abi_metadata(const BatchedAttnMetadata& m) {
  pb_batched_attn_metadata a;
  std::memset(&a, 0, sizeof a);
  a.positions_stacked = m.positions_stacked;
  a.positions_h_stacked = m.positions_h_stacked;
  a.positions_w_stacked = m.positions_w_stacked;
  a.slot_stacked = m.slot_stacked;
  a.block_table_ptrs = m.block_table_ptrs;
  a.seq_len_ptrs = m.seq_len_ptrs;
  a.batch_size = m.batch_size;
  a.chunk_len = m.chunk_len;
  a.total_tokens = m.total_tokens;
  a.cu_seqlens = m.cu_seqlens;
  a.cu_seqlens_host = m.cu_seqlens_host.data();
  a.cu_seqlens_host_count = static_cast<uint32_t>(m.cu_seqlens_host.size());
  a.kv_lens = m.kv_lens;
  a.kv_lens_host = m.kv_lens_host.data();
  a.kv_lens_host_count = static_cast<uint32_t>(m.kv_lens_host.size());
  a.max_blocks_per_seq = m.max_blocks_per_seq;
  a.staged_bytes = m.staged_bytes;
  return a;
}

int conv_dim(const LayerShape& s) { return 2 * s.num_k_heads * s.k_dim + s.num_v_heads * s.v_dim; }

}  // namespace

uint64_t outputs_checksum(const LayerOutputs& o) {
  uint64_t h = 1469598103934665603ull;
  auto mix = [&](const void* p, size_t n) {
    const uint8_t* b = static_cast<const uint8_t*>(p);
    for (size_t i = 0; i < n; ++i) h = (h ^ b[i]) * 1099511628211ull;
  };
  mix(o.out.data(), o.out.size() * 2);
  mix(o.k_cache.data(), o.k_cache.size() * 2);
  mix(o.v_cache.data(), o.v_cache.size() * 2);
  mix(o.conv_state.data(), o.conv_state.size() * 2);
  for (const auto& s : o.h_state) mix(s.data(), s.size() * 4);
  return h;
}

pb_layer_shape abi_layer_shape(LayerKind kind, const LayerShape& s) {
  pb_layer_shape l;
  std::memset(&l, 0, sizeof l);
  l.struct_size = sizeof l;
  l.kind = kind == LayerKind::attn ? PB_LAYER_ATTN : PB_LAYER_SSM;
  l.attn.num_q_heads = s.num_q_heads;
  l.attn.num_kv_heads = s.num_kv_heads;
  l.attn.head_dim = s.head_dim;
  l.attn.rotary_dim = s.rotary_dim;
  l.attn.rope_theta = s.rope_theta;
  l.attn.mrope_enabled = s.mrope;
  l.attn.mrope_interleaved = s.mrope_interleaved;
  for (int i = 0; i < 3; ++i) l.attn.mrope_sections[i] = s.mrope_sections[i];
  l.attn.block_size = s.block_size;
  l.attn.num_blocks = s.num_blocks;
  l.attn.poison_block = s.poison_block;
  l.attn.scale = s.head_dim > 0 ? static_cast<float>(1.0 / std::sqrt(static_cast<double>(s.head_dim))) : 0.f;
  l.ssm.num_k_heads = s.num_k_heads;
  l.ssm.num_v_heads = s.num_v_heads;
  l.ssm.k_dim = s.k_dim;
  l.ssm.v_dim = s.v_dim;
  l.ssm.d_conv = s.d_conv;
  l.ssm.conv_dim = conv_dim(s);
  return l;
}

Backend::Backend(std::unique_ptr<Memory> memory, std::unique_ptr<KernelLibrary> library)
    : memory_(std::move(memory)), library_(std::move(library)) {
  library_->init();
}

Backend::~Backend() {
  // The library's context goes before the memory its entries wrote into.
  library_.reset();
  memory_.reset();
}

Backend::Buffer Backend::alloc(size_t bytes, const char* name, size_t row_bytes) {
  if (guard_image_.empty()) {
    guard_image_.resize(kBufferGuardBytes);
    for (size_t i = 0; i < kBufferGuardBytes; i += 2) std::memcpy(&guard_image_[i], &kBufferGuardBits, 2);
  }
  const uint64_t base = memory_->allocate(bytes + 2 * kBufferGuardBytes);
  const Buffer b{base + kBufferGuardBytes, bytes, name, row_bytes};
  memory_->upload(base, guard_image_.data(), kBufferGuardBytes);
  memory_->upload(b.at + bytes, guard_image_.data(), kBufferGuardBytes);
  return b;
}

template <class T>
Backend::Buffer Backend::upload(const std::vector<T>& host, size_t expect, const char* what, size_t row_bytes) {
  if (host.size() != expect)
    throw std::runtime_error(fmt::format("harness: {} holds {} elements, expected {}", what, host.size(), expect));
  Buffer b = alloc(expect * sizeof(T), what, row_bytes);
  memory_->upload(b.at, host.data(), b.bytes);
  return b;
}

const Backend::LayerBuffers& Backend::at(int layer) const {
  if (layer < 0 || layer >= static_cast<int>(layers_.size()))
    throw std::runtime_error(fmt::format("harness: no layer {}", layer));
  return layers_[layer];
}

void Backend::allocate(const Batch& batch, const LayerShape& shape, size_t scratch_bytes, size_t arena_bytes) {
  memory_->release_all();
  layers_.clear();
  shape_ = shape;
  num_streams_ = batch.num_streams;
  total_tokens_ = batch.total_tokens;
  scratch_bytes_ = scratch_bytes;
  arena_bytes_ = arena_bytes;
  scratch_ = alloc(scratch_bytes, "scratch").at;
  arena_ = alloc(arena_bytes, "block-table arena").at;

  const size_t T = static_cast<size_t>(batch.total_tokens);
  const size_t N = static_cast<size_t>(batch.num_streams);
  const size_t q_elems = T * shape.num_q_heads * shape.head_dim;
  const size_t kv_elems = T * shape.num_kv_heads * shape.head_dim;
  const size_t cache_elems = static_cast<size_t>(shape.num_blocks) * shape.block_size * shape.num_kv_heads * shape.head_dim;
  const size_t C = static_cast<size_t>(conv_dim(shape));
  const size_t hist = shape.d_conv > 0 ? static_cast<size_t>(shape.d_conv - 1) : 0;
  const size_t h_elems = static_cast<size_t>(shape.num_v_heads) * shape.v_dim * shape.k_dim;
  const size_t q_row = static_cast<size_t>(shape.num_q_heads) * shape.head_dim * sizeof(bf16);
  const size_t kv_row = static_cast<size_t>(shape.num_kv_heads) * shape.head_dim * sizeof(bf16);

  layers_.resize(batch.layers.size());
  for (size_t l = 0; l < batch.layers.size(); ++l) {
    LayerBuffers& L = layers_[l];
    const LayerInputs& in = batch.layers[l];
    L.kind = in.kind;
    if (in.kind == LayerKind::attn) {
      L.q = upload(in.attn.q, q_elems, "q", q_row);
      L.k = upload(in.attn.k, kv_elems, "k", kv_row);
      L.v = upload(in.attn.v, kv_elems, "v", kv_row);
      L.out = alloc(q_elems * sizeof(bf16), "out", q_row);
      L.k_cache0 = upload(initial_cache(batch, shape, static_cast<int>(l), false), cache_elems, "the harness's initial k_cache");
      L.v_cache0 = upload(initial_cache(batch, shape, static_cast<int>(l), true), cache_elems, "the harness's initial v_cache");
      L.k_cache = alloc(cache_elems * sizeof(bf16), "k_cache");
      L.v_cache = alloc(cache_elems * sizeof(bf16), "v_cache");
    } else {
      const GdnInputs& gi = in.gdn;
      L.x = upload(gi.x, T * C, "x", C * sizeof(bf16));
      L.conv_w = upload(gi.conv_w, C * shape.d_conv, "conv_weight");
      L.g = upload(gi.g, T * shape.num_v_heads, "g", shape.num_v_heads * sizeof(float));
      L.beta = upload(gi.beta, T * shape.num_v_heads, "beta", shape.num_v_heads * sizeof(float));
      L.out = alloc(T * shape.num_v_heads * shape.v_dim * sizeof(bf16), "out", shape.num_v_heads * shape.v_dim * sizeof(bf16));
      std::vector<bf16> conv0;
      std::vector<float> h0;
      conv0.reserve(N * C * hist);
      h0.reserve(N * h_elems);
      for (size_t b = 0; b < N; ++b) {
        if (b >= gi.conv0.size() || gi.conv0[b].size() != C * hist || b >= gi.h0.size() || gi.h0[b].size() != h_elems)
          throw std::runtime_error(fmt::format("harness: gdn layer {} stream {}: conv0/h0 of the wrong size", l, b));
        conv0.insert(conv0.end(), gi.conv0[b].begin(), gi.conv0[b].end());
        h0.insert(h0.end(), gi.h0[b].begin(), gi.h0[b].end());
      }
      L.conv0 = upload(conv0, N * C * hist, "the harness's initial conv_state");
      L.h0 = upload(h0, N * h_elems, "the harness's initial h_state");
      L.conv_state = alloc(N * C * hist * sizeof(bf16), "conv_state");
      L.h_state = alloc(N * h_elems * sizeof(float), "h_state");
    }
  }
  for (size_t l = 0; l < layers_.size(); ++l) reset_layer(static_cast<int>(l));
}

uint64_t Backend::h_state_address(int layer, int stream) const {
  const size_t h_elems = static_cast<size_t>(shape_.num_v_heads) * shape_.v_dim * shape_.k_dim;
  return at(layer).h_state.at + static_cast<uint64_t>(stream) * h_elems * sizeof(float);
}

void Backend::upload_metadata(const std::vector<uint8_t>& scratch, const std::vector<uint8_t>& arena) {
  if (scratch.size() > scratch_bytes_ || arena.size() > arena_bytes_)
    throw std::runtime_error("harness: metadata image larger than the scratch/arena allocated");
  memory_->upload(scratch_, scratch.data(), scratch.size());
  memory_->upload(arena_, arena.data(), arena.size());
}

void Backend::write_scratch(size_t offset, const void* data, size_t bytes) {
  if (offset > scratch_bytes_ || bytes > scratch_bytes_ - offset)
    throw std::runtime_error("harness: write_scratch past the end of scratch");
  memory_->upload(scratch_ + offset, data, bytes);
}

std::string Backend::unsupported(int layer) const {
  return library_->unsupported(abi_layer_shape(at(layer).kind, shape_));
}

GdnPrecision Backend::gdn_precision(int layer) const {
  const std::string p = library_->precision(abi_layer_shape(at(layer).kind, shape_), "gdn");
  if (p == "fp32") return GdnPrecision::fp32;
  if (p == "tf32-chunked") return GdnPrecision::tf32_chunked;
  if (p == "tf32-split") return GdnPrecision::tf32_split;
  if (p == "bf16-chunk64") return GdnPrecision::bf16_chunk64;
  throw InputError(fmt::format("kernel library {}: precision(\"gdn\") is '{}', which the harness cannot model "
                               "(known: fp32, tf32-chunked, tf32-split, bf16-chunk64; docs/KERNEL-ABI.md)",
                               library_->label(), p));
}

void Backend::reset_layer(int layer) {
  const LayerBuffers& L = at(layer);
  if (L.kind == LayerKind::attn) {
    memory_->copy(L.k_cache.at, L.k_cache0.at, L.k_cache0.bytes);
    memory_->copy(L.v_cache.at, L.v_cache0.at, L.v_cache0.bytes);
  } else {
    memory_->copy(L.h_state.at, L.h0.at, L.h0.bytes);
    memory_->copy(L.conv_state.at, L.conv0.at, L.conv0.bytes);
  }
  memory_->fill_u16(L.out.at, L.out.bytes / 2, kBf16OutputPoisonBits);
  memory_->synchronize("reset_layer");
}

pb_workspace Backend::prepare_workspace(LayerBuffers& L, const pb_batched_attn_metadata& m) {
  // The library's workspace, grown when this metadata asks for more, poisoned every run.
  const pb_layer_shape shape = abi_layer_shape(L.kind, shape_);
  const uint64_t ws = library_->workspace_bytes(shape, m);
  // The contract (docs/KERNEL-ABI.md): the size follows the counts and host copies
  // alone, so the answer the memory ceiling was held to before the run, asked with no
  // device array, is the one the run gets.
  pb_batched_attn_metadata counts_only = m;
  counts_only.positions_stacked = counts_only.positions_h_stacked = counts_only.positions_w_stacked = 0;
  counts_only.slot_stacked = counts_only.block_table_ptrs = counts_only.seq_len_ptrs = 0;
  counts_only.cu_seqlens = counts_only.kv_lens = 0;
  const uint64_t planned = library_->workspace_bytes(shape, counts_only);
  if (planned != ws)
    throw KernelFailure(fmt::format(
        "{}: workspace_bytes asks for {} bytes with the metadata's device arrays and {} with every device address 0, "
        "as before the run: it must size from the counts and host copies alone, so that the memory ceiling holds "
        "(docs/KERNEL-ABI.md \"Lifetime and call order\")",
        library_->label(), ws, planned));
  if (ws > L.workspace.bytes || (ws && !L.workspace.at)) {
    if (L.captured.live)
      throw KernelFailure(fmt::format(
          "{}: workspace_bytes asks for {} bytes on this batch, more than the {} the layer was captured with; "
          "a graph-safe library (PB_CAP_GRAPH) must ask the same for every batch of a bucket",
          library_->label(), ws, L.workspace.bytes));
    L.workspace = alloc(ws, "workspace");
  }
  if (L.workspace.bytes) memory_->fill_u16(L.workspace.at, L.workspace.bytes / 2, kBf16PoisonBits);
  return pb_workspace{L.workspace.at, L.workspace.bytes};
}

pb_attn_layer_args Backend::attn_args(const LayerBuffers& L, const pb_batched_attn_metadata& m, pb_workspace ws,
                                      uint32_t schedule) const {
  const size_t T = static_cast<size_t>(total_tokens_);
  pb_attn_layer_args a;
  std::memset(&a, 0, sizeof a);
  a.struct_size = sizeof a;
  a.schedule = schedule;
  a.metadata = m;
  a.shape = abi_layer_shape(L.kind, shape_).attn;
  const int64_t Hq = shape_.num_q_heads, Hkv = shape_.num_kv_heads, D = shape_.head_dim;
  a.q = tensor(L.q.at, PB_DTYPE_BF16, {int64_t(T), Hq, D});
  a.k = tensor(L.k.at, PB_DTYPE_BF16, {int64_t(T), Hkv, D});
  a.v = tensor(L.v.at, PB_DTYPE_BF16, {int64_t(T), Hkv, D});
  a.out = tensor(L.out.at, PB_DTYPE_BF16, {int64_t(T), Hq, D});
  a.k_cache = tensor(L.k_cache.at, PB_DTYPE_BF16, {shape_.num_blocks, shape_.block_size, Hkv, D});
  a.v_cache = tensor(L.v_cache.at, PB_DTYPE_BF16, {shape_.num_blocks, shape_.block_size, Hkv, D});
  a.workspace = ws;
  return a;
}

pb_ssm_layer_args Backend::ssm_args(const LayerBuffers& L, const pb_batched_attn_metadata& m, pb_workspace ws,
                                    uint64_t h_state_ptrs, uint32_t schedule) const {
  const size_t T = static_cast<size_t>(total_tokens_), N = static_cast<size_t>(num_streams_);
  pb_ssm_layer_args a;
  std::memset(&a, 0, sizeof a);
  a.struct_size = sizeof a;
  a.schedule = schedule;
  a.metadata = m;
  a.shape = abi_layer_shape(L.kind, shape_).ssm;
  const int64_t Hv = shape_.num_v_heads, C = conv_dim(shape_), K = shape_.d_conv;
  a.x = tensor(L.x.at, PB_DTYPE_BF16, {int64_t(T), C});
  a.g = tensor(L.g.at, PB_DTYPE_F32, {int64_t(T), Hv});
  a.beta = tensor(L.beta.at, PB_DTYPE_F32, {int64_t(T), Hv});
  a.conv_weight = tensor(L.conv_w.at, PB_DTYPE_BF16, {C, K});
  a.conv_state = tensor(L.conv_state.at, PB_DTYPE_BF16, {int64_t(N), C, K > 0 ? K - 1 : 0});
  a.h_state_ptrs = h_state_ptrs;
  a.out = tensor(L.out.at, PB_DTYPE_BF16, {int64_t(T), Hv, shape_.v_dim});
  a.workspace = ws;
  return a;
}

Backend::LayerArgs Backend::layer_args(LayerBuffers& L, const pb_batched_attn_metadata& m, uint64_t h_state_ptrs,
                                        uint32_t schedule) {
  const pb_workspace workspace = prepare_workspace(L, m);
  LayerArgs x;
  if (L.kind == LayerKind::attn) x.attn = attn_args(L, m, workspace, schedule);
  else x.ssm = ssm_args(L, m, workspace, h_state_ptrs, schedule);
  return x;
}

void Backend::library_synchronize(const char* what) {
  try {
    memory_->synchronize(what);
  } catch (const std::runtime_error& e) {
    // A device error surfacing after the library's entries is the library's (its
    // kernels ran last on the stream), not the harness's.
    throw KernelFailure(fmt::format("kernel library {}: the device reported an error after its entries: {}",
                                    library_->label(), e.what()));
  }
}

void Backend::prepare(const LayerBuffers& L, const pb_attn_layer_args& a, const pb_ssm_layer_args& s) {
  const pb_kernel_table& t = library_->table();
  void* ctx = library_->context();
  char msg[kMsgLen] = "";
  if (L.kind == LayerKind::attn) {
    if (t.prepare_attn) library_->check(t.prepare_attn(ctx, &a, memory_->stream(), msg, sizeof msg), "prepare_attn", msg);
  } else if (t.prepare_ssm) {
    library_->check(t.prepare_ssm(ctx, &s, memory_->stream(), msg, sizeof msg), "prepare_ssm", msg);
  }
}

template <class Each>
void Backend::entries(const LayerBuffers& L, const pb_attn_layer_args& a, const pb_ssm_layer_args& s, char* msg,
                      size_t msg_len, Each&& each) {
  const pb_kernel_table& t = library_->table();
  void* ctx = library_->context();
  void* stream = memory_->stream();
  if (L.kind == LayerKind::attn) {
    if (t.rope && t.kv_write && t.attention) {
      each("rope", [&] { return t.rope(ctx, &a, stream, msg, msg_len); });
      each("kv_write", [&] { return t.kv_write(ctx, &a, stream, msg, msg_len); });
      each("attention", [&] { return t.attention(ctx, &a, stream, msg, msg_len); });
    } else {
      each("attn_layer", [&] { return t.attn_layer(ctx, &a, stream, msg, msg_len); });
    }
  } else {
    if (t.conv1d && t.gdn) {
      each("conv1d", [&] { return t.conv1d(ctx, &s, stream, msg, msg_len); });
      each("gdn", [&] { return t.gdn(ctx, &s, stream, msg, msg_len); });
    } else {
      each("ssm_layer", [&] { return t.ssm_layer(ctx, &s, stream, msg, msg_len); });
    }
  }
}

std::vector<KernelTime> Backend::run_layer(int layer, const BatchedAttnMetadata& meta, uint64_t h_state_ptrs,
                                           uint32_t schedule) {
  LayerBuffers& L = layers_.at(layer);
  const bool attn = L.kind == LayerKind::attn;
  const LayerArgs x = layer_args(L, abi_metadata(meta), h_state_ptrs, schedule);
  const pb_attn_layer_args& a = x.attn;
  const pb_ssm_layer_args& sa = x.ssm;
  std::vector<KernelTime> times;
  char msg[kMsgLen] = "";
  int marks = 0;
  // Each entry inside its own NVTX range (the layer's range is run.cpp's), after
  // the L2 flush when cold, between its two timing marks.
  auto timed = [&](const char* name, auto&& call) {
    msg[0] = '\0';
    if (l2_flush_) memory_->flush_l2();
    TraceRange range(name);
    memory_->mark(marks);
    const pb_status st = call();
    memory_->mark(marks + 1);
    library_->check(st, name, msg);
    times.push_back({name, static_cast<double>(marks)});  // marker index until synchronised
    marks += 2;
  };
  prepare(L, a, sa);
  entries(L, a, sa, msg, sizeof msg, timed);
  library_synchronize(attn ? "attention layer" : "ssm layer");
  for (KernelTime& k : times) {
    const int from = static_cast<int>(k.ms);
    k.ms = memory_->elapsed_ms(from, from + 1);
  }
  return times;
}

bool Backend::has_prepare(int layer) const {
  const pb_kernel_table& t = library_->table();
  return layers_.at(layer).kind == LayerKind::attn ? t.prepare_attn != nullptr : t.prepare_ssm != nullptr;
}

void Backend::prepare_only(int layer, const BatchedAttnMetadata& meta, uint64_t h_state_ptrs) {
  LayerBuffers& L = layers_.at(layer);
  const LayerArgs x = layer_args(L, abi_metadata(meta), h_state_ptrs, 0);
  prepare(L, x.attn, x.ssm);
  library_synchronize(L.kind == LayerKind::attn ? "prepare_attn" : "prepare_ssm");
}

void Backend::capture_layer(int layer, const BatchedAttnMetadata& meta, uint64_t h_state_ptrs) {
  LayerBuffers& L = layers_.at(layer);
  Captured& c = L.captured;
  c = Captured{};
  // The capture-time host copies, kept alive and unchanged for every replay.
  c.cu_seqlens_host = meta.cu_seqlens_host;
  c.kv_lens_host = meta.kv_lens_host;
  pb_batched_attn_metadata m = abi_metadata(meta);
  m.cu_seqlens_host = c.cu_seqlens_host.data();
  m.kv_lens_host = c.kv_lens_host.data();
  const LayerArgs x = layer_args(L, m, h_state_ptrs, 0);
  c.attn = x.attn;
  c.ssm = x.ssm;
  prepare(L, c.attn, c.ssm);
  library_synchronize("prepare before capture");
  char msg[kMsgLen] = "";
  auto call = [&](const char* name, auto&& fn) {
    msg[0] = '\0';
    library_->check(fn(), name, msg);
  };
  if (memory_->captures()) {
    memory_->capture_begin();
    try {
      entries(L, c.attn, c.ssm, msg, sizeof msg, call);
    } catch (...) {
      try {
        memory_->capture_end();  // leave the stream usable; the capture is invalid anyway
      } catch (...) {
      }
      throw;
    }
    c.graph = memory_->capture_end();
  }
  c.live = true;
}

double Backend::replay_layer(int layer, const BatchedAttnMetadata& meta, uint64_t h_state_ptrs) {
  LayerBuffers& L = layers_.at(layer);
  Captured& c = L.captured;
  if (!c.live) throw std::runtime_error(fmt::format("harness: replay of layer {} before its capture", layer));
  const bool attn = L.kind == LayerKind::attn;
  // Planning on the current batch, outside the graph, as the engine does before each replay.
  const LayerArgs x = layer_args(L, abi_metadata(meta), h_state_ptrs, 0);
  prepare(L, x.attn, x.ssm);
  char msg[kMsgLen] = "";
  auto call = [&](const char* name, auto&& fn) {
    msg[0] = '\0';
    library_->check(fn(), name, msg);
  };
  if (l2_flush_) memory_->flush_l2();  // cold L2 under the same policy as the per-launch times
  TraceRange range("graph replay");
  memory_->mark(0);
  if (c.graph >= 0) memory_->graph_launch(c.graph);
  else entries(L, c.attn, c.ssm, msg, sizeof msg, call);  // host: the recorded struct, called again
  memory_->mark(1);
  library_synchronize(attn ? "attention layer graph replay" : "ssm layer graph replay");
  return memory_->elapsed_ms(0, 1);
}

template <class T>
void Backend::upload_into(const Buffer& b, const std::vector<T>& host, const char* what) {
  if (host.size() * sizeof(T) != b.bytes)
    throw std::runtime_error(fmt::format("harness: {} holds {} bytes, the buffer {}: not the same bucket", what,
                                         host.size() * sizeof(T), b.bytes));
  memory_->upload(b.at, host.data(), b.bytes);
}

void Backend::upload_inputs(const Batch& batch) {
  if (batch.num_streams != num_streams_ || batch.total_tokens != total_tokens_ ||
      batch.layers.size() != layers_.size() || batch.num_blocks != shape_.num_blocks ||
      batch.poison_block != shape_.poison_block)
    throw std::runtime_error("harness: upload_inputs of a batch outside the allocated bucket");
  const size_t C = static_cast<size_t>(conv_dim(shape_));
  const size_t hist = shape_.d_conv > 0 ? static_cast<size_t>(shape_.d_conv - 1) : 0;
  const size_t h_elems = static_cast<size_t>(shape_.num_v_heads) * shape_.v_dim * shape_.k_dim;
  for (size_t l = 0; l < layers_.size(); ++l) {
    const LayerBuffers& L = layers_[l];
    const LayerInputs& in = batch.layers[l];
    if (in.kind != L.kind) throw std::runtime_error("harness: upload_inputs with another layer pattern");
    if (in.kind == LayerKind::attn) {
      upload_into(L.q, in.attn.q, "attn q");
      upload_into(L.k, in.attn.k, "attn k");
      upload_into(L.v, in.attn.v, "attn v");
      upload_into(L.k_cache0, initial_cache(batch, shape_, static_cast<int>(l), false), "k cache");
      upload_into(L.v_cache0, initial_cache(batch, shape_, static_cast<int>(l), true), "v cache");
    } else {
      const GdnInputs& gi = in.gdn;
      upload_into(L.x, gi.x, "gdn x");
      upload_into(L.conv_w, gi.conv_w, "gdn conv_w");
      upload_into(L.g, gi.g, "gdn g");
      upload_into(L.beta, gi.beta, "gdn beta");
      std::vector<bf16> conv0;
      std::vector<float> h0;
      for (int b = 0; b < num_streams_; ++b) {
        if (gi.conv0[b].size() != C * hist || gi.h0[b].size() != h_elems)
          throw std::runtime_error(fmt::format("harness: gdn layer {} stream {}: conv0/h0 of the wrong size", l, b));
        conv0.insert(conv0.end(), gi.conv0[b].begin(), gi.conv0[b].end());
        h0.insert(h0.end(), gi.h0[b].begin(), gi.h0[b].end());
      }
      upload_into(L.conv0, conv0, "conv0");
      upload_into(L.h0, h0, "h0");
    }
  }
  for (size_t l = 0; l < layers_.size(); ++l) reset_layer(static_cast<int>(l));
}

LayerOutputs Backend::read_layer(int layer) {
  const LayerBuffers& L = at(layer);
  LayerOutputs o;
  auto down = [&](auto& vec, const Buffer& b) {
    vec.resize(b.bytes / sizeof(vec[0]));
    memory_->download(vec.data(), b.at, vec.size() * sizeof(vec[0]));
  };
  down(o.out, L.out);
  if (L.kind == LayerKind::attn) {
    down(o.k_cache, L.k_cache);
    down(o.v_cache, L.v_cache);
  } else {
    down(o.conv_state, L.conv_state);
    std::vector<float> all;
    down(all, L.h_state);
    const size_t h_elems = num_streams_ ? all.size() / num_streams_ : 0;
    o.h_state.resize(num_streams_);
    for (int b = 0; b < num_streams_; ++b)
      o.h_state[b].assign(all.begin() + b * h_elems, all.begin() + (b + 1) * h_elems);
  }
  return o;
}

LayerInputs Backend::read_inputs(int layer) {
  const LayerBuffers& L = at(layer);
  LayerInputs in;
  in.kind = L.kind;
  auto down = [&](auto& vec, const Buffer& b) {
    vec.resize(b.bytes / sizeof(vec[0]));
    memory_->download(vec.data(), b.at, vec.size() * sizeof(vec[0]));
  };
  if (L.kind == LayerKind::attn) {
    down(in.attn.q, L.q);
    down(in.attn.k, L.k);
    down(in.attn.v, L.v);
  } else {
    down(in.gdn.x, L.x);
    down(in.gdn.conv_w, L.conv_w);
    down(in.gdn.g, L.g);
    down(in.gdn.beta, L.beta);
  }
  return in;
}

std::vector<GuardZones> Backend::read_guards(int layer) {
  const LayerBuffers& L = at(layer);
  std::vector<GuardZones> zones;
  auto read = [&](const Buffer& b) {
    if (!b.at) return;  // never allocated (a layer that asked for no workspace)
    GuardZones z{b.name, b.bytes, b.row_bytes, std::vector<uint8_t>(kBufferGuardBytes),
                 std::vector<uint8_t>(kBufferGuardBytes)};
    memory_->download(z.front.data(), b.at - kBufferGuardBytes, kBufferGuardBytes);
    memory_->download(z.rear.data(), b.at + b.bytes, kBufferGuardBytes);
    zones.push_back(std::move(z));
  };
  read(Buffer{scratch_, scratch_bytes_, "scratch"});
  read(Buffer{arena_, arena_bytes_, "block-table arena"});
  const Buffer* attn[] = {&L.q, &L.k, &L.v, &L.out, &L.k_cache, &L.v_cache, &L.k_cache0, &L.v_cache0};
  const Buffer* gdn[] = {&L.x, &L.conv_w, &L.g, &L.beta, &L.out, &L.conv_state, &L.h_state, &L.conv0, &L.h0};
  if (L.kind == LayerKind::attn)
    for (const Buffer* b : attn) read(*b);
  else
    for (const Buffer* b : gdn) read(*b);
  read(L.workspace);
  return zones;
}

std::vector<uint8_t> Backend::read_scratch() {
  std::vector<uint8_t> h(scratch_bytes_);
  memory_->download(h.data(), scratch_, h.size());
  return h;
}

std::vector<uint8_t> Backend::read_arena() {
  std::vector<uint8_t> h(arena_bytes_);
  memory_->download(h.data(), arena_, h.size());
  return h;
}

bool cuda_device_available(std::string* why) {
  if (!cuda_kernel_table()) {
    if (why) *why = "this build has no CUDA kernels (nvcc was not found at configure time)";
    return false;
  }
  return make_cuda_memory(why) != nullptr;
}

std::unique_ptr<Backend> make_host_backend() {
  return std::make_unique<Backend>(make_host_memory(), KernelLibrary::builtin(host_kernel_table()));
}

std::unique_ptr<Backend> make_backend(const std::string& want, const std::string& kernels_path) {
  if (want != "auto" && want != "cuda" && want != "host")
    throw InputError("--backend: expected auto, cuda or host, found '" + want + "'");
  std::unique_ptr<KernelLibrary> lib;
  bool cuda = false;
  if (!kernels_path.empty()) {
    lib = KernelLibrary::open(kernels_path);
    cuda = lib->cuda();
    if (want != "auto" && want != (cuda ? "cuda" : "host"))
      throw InputError(fmt::format("--kernels {}: '{}' is a {} library; --backend {} asks for the other",
                                   kernels_path, lib->table().name, cuda ? "CUDA" : "host", want));
  } else if (want == "cuda") {
    cuda = true;
  } else if (want == "auto") {
    std::string ignored;
    cuda = cuda_device_available(&ignored);
  }
  if (!cuda) {
    if (!lib) lib = KernelLibrary::builtin(host_kernel_table());
    return std::make_unique<Backend>(make_host_memory(), std::move(lib));
  }
  std::string why;
  std::unique_ptr<Memory> memory = make_cuda_memory(&why);
  if (!memory) {
    if (lib)
      throw InputError(fmt::format("--kernels {}: '{}' is a CUDA library and there is no CUDA device here ({})",
                                   kernels_path, lib->table().name, why));
    throw InputError("--backend cuda: " + why);
  }
  if (!lib) {
    if (!cuda_kernel_table()) throw InputError("--backend cuda: this build has no CUDA kernels");
    lib = KernelLibrary::builtin(cuda_kernel_table());
  }
  return std::make_unique<Backend>(std::move(memory), std::move(lib));
}

}  // namespace pb
