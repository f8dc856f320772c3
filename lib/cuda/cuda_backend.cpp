// cuda_backend.cpp: the CUDA backend. It owns the device scratch buffer, the
// table arena and every layer's tensors, and runs one launch per kernel per
// layer for all streams (kernels/kernels.h), timing each with CUDA events.
// Invariants: every CUDA call is checked (errors throw with the call and where);
// the kernels read only the staged metadata and this backend's buffers; the
// backend's own faults (causal-off-by-one, conv-state-bleed) are kernel flags.
// Attention runs on tensor cores (attention_mma.cu) where the head dim allows;
// PB_ATTN_KERNEL=fp32 selects the fp32 kernel (attention.cu), its oracle.
#include <cuda_runtime_api.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <memory>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "kernels/attention_mma.h"
#include "kernels/gdn_chunked.h"
#include "kernels/kernels.h"
#include "lib/backend.h"
#include "lib/trace.h"

namespace pb {
namespace {

[[noreturn]] void throw_cuda(cudaError_t e, const char* what, int line) {
  std::ostringstream os;
  os << "lib/cuda/cuda_backend.cpp:" << line << ": " << what << " failed: " << cudaGetErrorName(e) << " ("
     << cudaGetErrorString(e) << ")";
  throw std::runtime_error(os.str());
}
#define PB_CUDA(call)                                          \
  do {                                                         \
    const cudaError_t pb_err_ = (call);                        \
    if (pb_err_ != cudaSuccess) throw_cuda(pb_err_, #call, __LINE__); \
  } while (0)

// One device allocation (at least 256 bytes, so an empty tensor still has an address).
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  explicit DeviceBuffer(size_t bytes) : bytes_(bytes) {
    PB_CUDA(cudaMalloc(&ptr_, bytes < 256 ? 256 : bytes));
  }
  ~DeviceBuffer() {
    if (ptr_) cudaFree(ptr_);  // no throw from a destructor
  }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  DeviceBuffer(DeviceBuffer&& o) noexcept : ptr_(o.ptr_), bytes_(o.bytes_) { o.ptr_ = nullptr; o.bytes_ = 0; }
  DeviceBuffer& operator=(DeviceBuffer&& o) noexcept {
    if (this != &o) {
      if (ptr_) cudaFree(ptr_);
      ptr_ = o.ptr_;
      bytes_ = o.bytes_;
      o.ptr_ = nullptr;
      o.bytes_ = 0;
    }
    return *this;
  }
  template <class T> T* as() const { return static_cast<T*>(ptr_); }
  void* get() const { return ptr_; }
  size_t bytes() const { return bytes_; }
  uint64_t address() const { return reinterpret_cast<uint64_t>(ptr_); }

 private:
  void* ptr_ = nullptr;
  size_t bytes_ = 0;
};

template <class T>
DeviceBuffer upload(const std::vector<T>& host, size_t expect, const char* what) {
  if (host.size() != expect) {
    std::ostringstream os;
    os << "cuda backend: " << what << " holds " << host.size() << " elements, expected " << expect;
    throw std::runtime_error(os.str());
  }
  DeviceBuffer d(expect * sizeof(T));
  if (expect) PB_CUDA(cudaMemcpy(d.get(), host.data(), expect * sizeof(T), cudaMemcpyHostToDevice));
  return d;
}

template <class T>
std::vector<T> download(const DeviceBuffer& d, size_t count) {
  std::vector<T> host(count);
  if (count) PB_CUDA(cudaMemcpy(host.data(), d.get(), count * sizeof(T), cudaMemcpyDeviceToHost));
  return host;
}

struct LayerBuffers {
  LayerKind kind = LayerKind::attn;
  // attn
  DeviceBuffer q, k, v, q_rot, k_rot, out, k_cache, v_cache, k_cache0, v_cache0;
  // gdn
  DeviceBuffer x, conv_w, g, beta, conv_out, conv_state, conv0, h_state, h0;
};

// "580.159.04" from /proc/driver/nvidia/version, else the CUDA driver API version.
std::string driver_version() {
  std::ifstream f("/proc/driver/nvidia/version");
  std::string word;
  while (f >> word) {
    bool digits_dots = !word.empty() && word.find('.') != std::string::npos;
    for (char c : word) digits_dots = digits_dots && ((c >= '0' && c <= '9') || c == '.');
    if (digits_dots) return word;
  }
  int v = 0;
  if (cudaDriverGetVersion(&v) != cudaSuccess) return "";
  return std::to_string(v / 1000) + "." + std::to_string((v % 1000) / 10);
}

// Which attention kernel runs: PB_ATTN_KERNEL=fp32 selects the fp32 FMA kernel
// (the oracle); unset or "mma", the tensor-core kernel's default variant where
// it supports the head dim (64, 128, 256), else the fp32 one; "mma:N" its
// variant N (kernels/attention_mma.h). Returns -2 for fp32, else the variant (-1: default).
int choose_attention(const LayerShape& shape) {
  const char* env = std::getenv("PB_ATTN_KERNEL");
  const std::string want = env ? env : "";
  if (want == "fp32") return -2;
  int variant = -1;
  if (want.rfind("mma:", 0) == 0) {
    char* end = nullptr;
    const long v = std::strtol(want.c_str() + 4, &end, 10);
    if (end == want.c_str() + 4 || *end != '\0' || v < 0 || v > 63)
      throw std::runtime_error("cuda backend: PB_ATTN_KERNEL='" + want + "': expected mma:N with N a variant number");
    variant = static_cast<int>(v);
  } else if (!want.empty() && want != "mma") {
    throw std::runtime_error("cuda backend: PB_ATTN_KERNEL='" + want + "': expected fp32, mma or mma:N");
  }
  return kernels::attention_mma_supported(shape) ? variant : -2;
}

// Which gdn kernel runs: PB_GDN_KERNEL=token selects the token-by-token kernel
// (kernels/gdn.cu, the oracle); "chunked" the chunked WY-form kernel
// (kernels/gdn_chunked.cu) where it supports the shape (k_dim <= 128), else the
// token one; unset, the default below. Returns true for the chunked kernel.
constexpr bool kGdnChunkedDefault = true;  // device-checked 2026-12-02 (kernels/NOTES.md)
bool choose_gdn_chunked(const LayerShape& shape) {
  const char* env = std::getenv("PB_GDN_KERNEL");
  const std::string want = env ? env : "";
  bool chunked = kGdnChunkedDefault;
  if (want == "token") chunked = false;
  else if (want == "chunked") chunked = true;
  else if (!want.empty())
    throw std::runtime_error("cuda backend: PB_GDN_KERNEL='" + want + "': expected token or chunked");
  return chunked && kernels::gdn_chunked_supports(shape);
}

class CudaBackend final : public Backend {
 public:
  explicit CudaBackend(FaultSet faults) : faults_(faults) {
    PB_CUDA(cudaSetDevice(0));
    cudaDeviceProp prop{};
    PB_CUDA(cudaGetDeviceProperties(&prop, 0));
    info_.name = prop.name;
    info_.sm_count = prop.multiProcessorCount;
    int rt = 0;
    PB_CUDA(cudaRuntimeGetVersion(&rt));
    info_.runtime = std::to_string(rt / 1000) + "." + std::to_string((rt % 1000) / 10);
    info_.driver = driver_version();
    if (info_.name.find("H200") != std::string::npos) {
      // Measured on this workplace's H200 (docs/DEVICE-NOTES.md): bf16 matrix
      // product ~790 TFLOP/s, device-to-device copy 4.24 TB/s (read + write).
      info_.peak_tflops = 790;
      info_.peak_gbps = 4240;
    }
    PB_CUDA(cudaStreamCreate(&stream_));
    for (auto& e : events_) PB_CUDA(cudaEventCreate(&e));
  }
  ~CudaBackend() override {
    for (auto& e : events_)
      if (e) cudaEventDestroy(e);
    if (stream_) cudaStreamDestroy(stream_);
  }

  std::string name() const override { return "cuda"; }
  DeviceInfo device() const override { return info_; }

  void allocate(const Batch& batch, const LayerShape& shape, size_t scratch_bytes,
                size_t arena_bytes) override {
    layers_.clear();
    shape_ = shape;
    attn_variant_ = choose_attention(shape);
    use_mma_ = attn_variant_ != -2;
    gdn_chunked_ = choose_gdn_chunked(shape);
    num_streams_ = batch.num_streams;
    total_tokens_ = batch.total_tokens;
    scratch_ = DeviceBuffer(scratch_bytes);
    arena_ = DeviceBuffer(arena_bytes);
    scratch_bytes_ = scratch_bytes;
    arena_bytes_ = arena_bytes;
    work_ = DeviceBuffer();
    work_count_ = 0;
    work_cu_.clear();
    work_kv_.clear();
    order_ = DeviceBuffer();
    order_cu_.clear();
    const std::vector<float> inv_freq = kernels::rope_inv_freq(shape);
    inv_freq_ = upload(inv_freq, inv_freq.size(), "inv_freq");

    const size_t T = static_cast<size_t>(batch.total_tokens);
    const size_t N = static_cast<size_t>(batch.num_streams);
    const size_t q_elems = T * shape.num_q_heads * shape.head_dim;
    const size_t kv_elems = T * shape.num_kv_heads * shape.head_dim;
    const size_t cache_elems = static_cast<size_t>(shape.num_blocks) * shape.block_size *
                               shape.num_kv_heads * shape.head_dim;
    const size_t conv_dim = conv_dim_();
    const size_t hist = shape.d_conv > 0 ? static_cast<size_t>(shape.d_conv - 1) : 0;
    const size_t h_elems = static_cast<size_t>(shape.num_v_heads) * shape.v_dim * shape.k_dim;

    layers_.resize(batch.layers.size());
    for (size_t l = 0; l < batch.layers.size(); ++l) {
      LayerBuffers& L = layers_[l];
      const LayerInputs& in = batch.layers[l];
      L.kind = in.kind;
      if (in.kind == LayerKind::attn) {
        L.q = upload(in.attn.q, q_elems, "attn q");
        L.k = upload(in.attn.k, kv_elems, "attn k");
        L.v = upload(in.attn.v, kv_elems, "attn v");
        L.q_rot = DeviceBuffer(q_elems * sizeof(bf16));
        L.k_rot = DeviceBuffer(kv_elems * sizeof(bf16));
        L.out = DeviceBuffer(q_elems * sizeof(bf16));
        L.k_cache0 = upload(initial_cache(batch, shape, static_cast<int>(l), false), cache_elems, "k cache");
        L.v_cache0 = upload(initial_cache(batch, shape, static_cast<int>(l), true), cache_elems, "v cache");
        L.k_cache = DeviceBuffer(cache_elems * sizeof(bf16));
        L.v_cache = DeviceBuffer(cache_elems * sizeof(bf16));
      } else {
        const GdnInputs& gi = in.gdn;
        L.x = upload(gi.x, T * conv_dim, "gdn x");
        L.conv_w = upload(gi.conv_w, conv_dim * shape.d_conv, "gdn conv_w");
        L.g = upload(gi.g, T * shape.num_v_heads, "gdn g");
        L.beta = upload(gi.beta, T * shape.num_v_heads, "gdn beta");
        L.conv_out = DeviceBuffer(T * conv_dim * sizeof(bf16));
        L.out = DeviceBuffer(T * shape.num_v_heads * shape.v_dim * sizeof(bf16));
        std::vector<bf16> conv0;
        std::vector<float> h0;
        conv0.reserve(N * conv_dim * hist);
        h0.reserve(N * h_elems);
        for (size_t b = 0; b < N; ++b) {
          if (b >= gi.conv0.size() || gi.conv0[b].size() != conv_dim * hist ||
              b >= gi.h0.size() || gi.h0[b].size() != h_elems)
            throw std::runtime_error("cuda backend: gdn layer " + std::to_string(l) + " stream " +
                                     std::to_string(b) + ": conv0/h0 of the wrong size");
          conv0.insert(conv0.end(), gi.conv0[b].begin(), gi.conv0[b].end());
          h0.insert(h0.end(), gi.h0[b].begin(), gi.h0[b].end());
        }
        L.conv0 = upload(conv0, N * conv_dim * hist, "conv0");
        L.h0 = upload(h0, N * h_elems, "h0");
        L.conv_state = DeviceBuffer(N * conv_dim * hist * sizeof(bf16));
        L.h_state = DeviceBuffer(N * h_elems * sizeof(float));
      }
    }
    for (size_t l = 0; l < layers_.size(); ++l) reset_layer(static_cast<int>(l));
  }

  uint64_t scratch_base() const override { return scratch_.address(); }
  uint64_t arena_base() const override { return arena_.address(); }
  uint64_t h_state_address(int layer, int stream) const override {
    const LayerBuffers& L = at(layer);
    const size_t h_elems = static_cast<size_t>(shape_.num_v_heads) * shape_.v_dim * shape_.k_dim;
    return L.h_state.address() + static_cast<uint64_t>(stream) * h_elems * sizeof(float);
  }

  void upload_metadata(const std::vector<uint8_t>& scratch, const std::vector<uint8_t>& arena) override {
    if (scratch.size() > scratch_bytes_ || arena.size() > arena_bytes_)
      throw std::runtime_error("cuda backend: metadata image larger than the scratch/arena allocated");
    PB_CUDA(cudaMemcpy(scratch_.get(), scratch.data(), scratch.size(), cudaMemcpyHostToDevice));
    PB_CUDA(cudaMemcpy(arena_.get(), arena.data(), arena.size(), cudaMemcpyHostToDevice));
  }

  void write_scratch(size_t offset, const void* data, size_t bytes) override {
    if (offset > scratch_bytes_ || bytes > scratch_bytes_ - offset)
      throw std::runtime_error("cuda backend: write_scratch past the end of scratch");
    PB_CUDA(cudaMemcpy(scratch_.as<uint8_t>() + offset, data, bytes, cudaMemcpyHostToDevice));
  }

  void reset_layer(int layer) override {
    LayerBuffers& L = at(layer);
    if (L.kind == LayerKind::attn) {
      PB_CUDA(cudaMemcpyAsync(L.k_cache.get(), L.k_cache0.get(), L.k_cache0.bytes(), cudaMemcpyDeviceToDevice, stream_));
      PB_CUDA(cudaMemcpyAsync(L.v_cache.get(), L.v_cache0.get(), L.v_cache0.bytes(), cudaMemcpyDeviceToDevice, stream_));
      poison(L.out);
      poison(L.q_rot);
      poison(L.k_rot);
    } else {
      PB_CUDA(cudaMemcpyAsync(L.h_state.get(), L.h0.get(), L.h0.bytes(), cudaMemcpyDeviceToDevice, stream_));
      PB_CUDA(cudaMemcpyAsync(L.conv_state.get(), L.conv0.get(), L.conv0.bytes(), cudaMemcpyDeviceToDevice, stream_));
      poison(L.out);
      poison(L.conv_out);
    }
    PB_CUDA(cudaStreamSynchronize(stream_));
  }

  std::vector<KernelTime> run_layer(int layer, const BatchedAttnMetadata& meta,
                                    uint64_t h_state_ptrs) override {
    LayerBuffers& L = at(layer);
    const bool attn = L.kind == LayerKind::attn;
    TraceRange layer_range("L" + std::to_string(layer) + (attn ? " attn" : " gdn"));
    std::vector<const char*> names;
    if (attn) {
      prepare_work(meta);
      const float scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(shape_.head_dim)));
      timed(0, "rope", names, [&] {
        return kernels::launch_rope(stream_, shape_, meta.total_tokens, meta.positions_stacked,
                                    meta.positions_h_stacked, meta.positions_w_stacked, inv_freq_.as<float>(),
                                    L.q.as<bf16>(), L.k.as<bf16>(), L.q_rot.as<bf16>(), L.k_rot.as<bf16>());
      });
      timed(1, "kv_write", names, [&] {
        return kernels::launch_kv_write(stream_, shape_, meta.total_tokens, meta.slot_stacked, L.k_rot.as<bf16>(),
                                        L.v.as<bf16>(), L.k_cache.as<bf16>(), L.v_cache.as<bf16>());
      });
      timed(2, "attention", names, [&] {
        if (use_mma_)
          return kernels::launch_attention_mma(
              stream_, shape_, meta.batch_size, meta.total_tokens, meta.max_blocks_per_seq, meta.cu_seqlens,
              meta.kv_lens, meta.block_table_ptrs, work_.as<kernels::AttnWorkItem>(), work_count_,
              L.q_rot.as<bf16>(), L.k_cache.as<bf16>(), L.v_cache.as<bf16>(), L.out.as<bf16>(), scale,
              faults_.has(Fault::causal_off_by_one), attn_variant_);
        return kernels::launch_attention(
            stream_, shape_, meta.batch_size, meta.total_tokens, meta.max_blocks_per_seq, meta.cu_seqlens,
            meta.kv_lens, meta.block_table_ptrs, work_.as<kernels::AttnWorkItem>(), work_count_,
            L.q_rot.as<bf16>(), L.k_cache.as<bf16>(), L.v_cache.as<bf16>(), L.out.as<bf16>(), scale,
            faults_.has(Fault::causal_off_by_one), arena_range());
      });
    } else {
      prepare_order(meta);
      timed(0, "conv1d", names, [&] {
        return kernels::launch_conv1d(stream_, shape_, meta.batch_size, meta.total_tokens, meta.cu_seqlens,
                                      L.x.as<bf16>(), L.conv_w.as<bf16>(), L.conv_state.as<bf16>(),
                                      L.conv_out.as<bf16>(), faults_.has(Fault::conv_state_bleed));
      });
      timed(1, "gdn", names, [&] {
        if (gdn_chunked_)
          return kernels::launch_gdn_chunked(stream_, shape_, meta.batch_size, meta.total_tokens, meta.cu_seqlens,
                                             h_state_ptrs, order_.as<int32_t>(), L.conv_out.as<bf16>(),
                                             L.g.as<float>(), L.beta.as<float>(), L.out.as<bf16>(),
                                             range_of(L.h_state));
        return kernels::launch_gdn(stream_, shape_, meta.batch_size, meta.total_tokens, meta.cu_seqlens,
                                   h_state_ptrs, order_.as<int32_t>(), L.conv_out.as<bf16>(), L.g.as<float>(),
                                   L.beta.as<float>(), L.out.as<bf16>(), range_of(L.h_state));
      });
    }
    PB_CUDA(cudaStreamSynchronize(stream_));
    PB_CUDA(cudaGetLastError());
    std::vector<KernelTime> times;
    for (size_t i = 0; i < names.size(); ++i) {
      float ms = 0;
      PB_CUDA(cudaEventElapsedTime(&ms, events_[2 * i], events_[2 * i + 1]));
      times.push_back({names[i], static_cast<double>(ms)});
    }
    return times;
  }

  LayerOutputs read_layer(int layer) override {
    LayerBuffers& L = at(layer);
    LayerOutputs o;
    const size_t T = static_cast<size_t>(total_tokens_);
    if (L.kind == LayerKind::attn) {
      o.out = download<bf16>(L.out, T * shape_.num_q_heads * shape_.head_dim);
      o.k_cache = download<bf16>(L.k_cache, L.k_cache.bytes() / sizeof(bf16));
      o.v_cache = download<bf16>(L.v_cache, L.v_cache.bytes() / sizeof(bf16));
    } else {
      o.out = download<bf16>(L.out, T * shape_.num_v_heads * shape_.v_dim);
      o.conv_state = download<bf16>(L.conv_state, L.conv_state.bytes() / sizeof(bf16));
      const size_t h_elems = static_cast<size_t>(shape_.num_v_heads) * shape_.v_dim * shape_.k_dim;
      const std::vector<float> all = download<float>(L.h_state, static_cast<size_t>(num_streams_) * h_elems);
      o.h_state.resize(num_streams_);
      for (int b = 0; b < num_streams_; ++b)
        o.h_state[b].assign(all.begin() + b * h_elems, all.begin() + (b + 1) * h_elems);
    }
    return o;
  }

  std::vector<uint8_t> read_scratch() override {
    std::vector<uint8_t> h(scratch_bytes_);
    if (scratch_bytes_) PB_CUDA(cudaMemcpy(h.data(), scratch_.get(), scratch_bytes_, cudaMemcpyDeviceToHost));
    return h;
  }
  std::vector<uint8_t> read_arena() override {
    std::vector<uint8_t> h(arena_bytes_);
    if (arena_bytes_) PB_CUDA(cudaMemcpy(h.data(), arena_.get(), arena_bytes_, cudaMemcpyDeviceToHost));
    return h;
  }

 private:
  static constexpr int kMaxKernels = 3;

  size_t conv_dim_() const {
    return static_cast<size_t>(2 * shape_.num_k_heads * shape_.k_dim + shape_.num_v_heads * shape_.v_dim);
  }

  // The buffers a pointer read back from scratch may point into: kernels skip
  // a stream whose block-table or h_state pointer lies outside its range.
  static kernels::AddressRange range_of(const DeviceBuffer& b) { return {b.address(), b.address() + b.bytes()}; }
  kernels::AddressRange arena_range() const { return {arena_.address(), arena_.address() + arena_bytes_}; }

  LayerBuffers& at(int layer) {
    if (layer < 0 || layer >= static_cast<int>(layers_.size()))
      throw std::runtime_error("cuda backend: no layer " + std::to_string(layer));
    return layers_[layer];
  }
  const LayerBuffers& at(int layer) const { return const_cast<CudaBackend*>(this)->at(layer); }

  void poison(const DeviceBuffer& d) {
    PB_CUDA(kernels::launch_fill_u16(stream_, d.get(), d.bytes() / 2, kBf16PoisonBits));
  }

  // Launches one kernel between its two events, inside its NVTX range.
  template <class Launch>
  void timed(int slot, const char* name, std::vector<const char*>& names, Launch&& launch) {
    TraceRange range(name);
    PB_CUDA(cudaEventRecord(events_[2 * slot], stream_));
    const cudaError_t e = launch();
    if (e != cudaSuccess) throw_cuda(e, name, __LINE__);
    PB_CUDA(cudaEventRecord(events_[2 * slot + 1], stream_));
    names.push_back(name);
  }

  // The attention work list (host copies), uploaded when it changes; its
  // q-tiles are the selected kernel's.
  void prepare_work(const BatchedAttnMetadata& meta) {
    if (work_.get() && meta.cu_seqlens_host == work_cu_ && meta.kv_lens_host == work_kv_) return;
    const std::vector<kernels::AttnWorkItem> w =
        use_mma_ ? kernels::plan_attention_mma_work(shape_, meta.cu_seqlens_host, meta.kv_lens_host)
                 : kernels::plan_attention_work(shape_, meta.cu_seqlens_host, meta.kv_lens_host);
    work_ = upload(w, w.size(), "attention work list");
    work_count_ = static_cast<int>(w.size());
    work_cu_ = meta.cu_seqlens_host;
    work_kv_ = meta.kv_lens_host;
  }
  // The gdn stream order (longest first), uploaded when it changes.
  void prepare_order(const BatchedAttnMetadata& meta) {
    if (order_.get() && meta.cu_seqlens_host == order_cu_) return;
    std::vector<int32_t> order = kernels::plan_gdn_order(meta.cu_seqlens_host);
    if (order.size() != meta.batch_size) {  // host copy inconsistent with batch_size: identity
      order.resize(meta.batch_size);
      for (uint32_t b = 0; b < meta.batch_size; ++b) order[b] = static_cast<int32_t>(b);
    }
    order_ = upload(order, order.size(), "gdn stream order");
    order_cu_ = meta.cu_seqlens_host;
  }

  FaultSet faults_;
  DeviceInfo info_;
  cudaStream_t stream_ = nullptr;
  cudaEvent_t events_[2 * kMaxKernels] = {};
  LayerShape shape_;
  bool use_mma_ = false;  // attention on tensor cores (kernels/attention_mma.cu), else the fp32 kernel
  int attn_variant_ = -1; // its variant (-1: the default for the head dim)
  bool gdn_chunked_ = false;  // gdn by kernels/gdn_chunked.cu, else kernels/gdn.cu
  int num_streams_ = 0, total_tokens_ = 0;
  DeviceBuffer scratch_, arena_, inv_freq_;
  size_t scratch_bytes_ = 0, arena_bytes_ = 0;
  std::vector<LayerBuffers> layers_;
  DeviceBuffer work_;
  int work_count_ = 0;
  std::vector<int32_t> work_cu_, work_kv_;
  DeviceBuffer order_;
  std::vector<int32_t> order_cu_;
};

}  // namespace

std::unique_ptr<Backend> make_cuda_backend(FaultSet faults, std::string* why) {
  int count = 0;
  const cudaError_t e = cudaGetDeviceCount(&count);
  if (e != cudaSuccess || count == 0) {
    cudaGetLastError();  // clear the sticky-free error state
    if (why) *why = "no CUDA device";
    return nullptr;
  }
  try {
    return std::make_unique<CudaBackend>(faults);
  } catch (const std::exception& ex) {
    if (why) *why = std::string("no CUDA device: ") + ex.what();
    return nullptr;
  }
}

}  // namespace pb
