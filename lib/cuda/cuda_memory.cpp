// cuda_memory.cpp: the harness's buffers in CUDA device memory, one stream for
// every entry of a kernel library, and CUDA events as timing marks (memory.h).
// Invariants: every CUDA call is checked (errors throw with the call and line);
// device 0 is current for the harness and every library call.
#include <cuda_runtime_api.h>

#include <fstream>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "kernels/kernels.h"
#include "lib/memory.h"

namespace pb {
namespace {

[[noreturn]] void throw_cuda(cudaError_t e, const char* what, int line) {
  std::ostringstream os;
  os << "lib/cuda/cuda_memory.cpp:" << line << ": " << what << " failed: " << cudaGetErrorName(e) << " ("
     << cudaGetErrorString(e) << ")";
  throw std::runtime_error(os.str());
}
#define PB_CUDA(call)                                                 \
  do {                                                                \
    const cudaError_t pb_err_ = (call);                               \
    if (pb_err_ != cudaSuccess) throw_cuda(pb_err_, #call, __LINE__); \
  } while (0)

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

class CudaMemory final : public Memory {
 public:
  CudaMemory() {
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
      // Measured on this workplace's H200: bf16 matrix product ~790 TFLOP/s,
      // device-to-device copy 4.24 TB/s (read + write).
      info_.peak_tflops = 790;
      info_.peak_gbps = 4240;
    }
    PB_CUDA(cudaStreamCreate(&stream_));
    for (auto& e : events_) PB_CUDA(cudaEventCreate(&e));
    int l2 = 0;
    PB_CUDA(cudaDeviceGetAttribute(&l2, cudaDevAttrL2CacheSize, 0));
    l2_bytes_ = l2 > 0 ? static_cast<size_t>(l2) : 0;
  }
  ~CudaMemory() override {
    release_all();
    for (auto& e : events_)
      if (e) cudaEventDestroy(e);
    if (flush_buf_) cudaFree(flush_buf_);
    if (stream_) cudaStreamDestroy(stream_);
  }
  std::string kind() const override { return "cuda"; }
  DeviceInfo device() const override { return info_; }

  uint64_t allocate(size_t bytes) override {
    void* p = nullptr;
    const size_t n = bytes < 256 ? 256 : bytes;  // cudaMalloc aligns to 256
    PB_CUDA(cudaMalloc(&p, n));
    blocks_.push_back(p);
    PB_CUDA(cudaMemset(p, 0, n));
    return reinterpret_cast<uint64_t>(p);
  }
  void release_all() override {
    if (!blocks_.empty() || !graphs_.empty()) cudaStreamSynchronize(stream_);
    for (cudaGraphExec_t g : graphs_) cudaGraphExecDestroy(g);  // no throw from cleanup
    graphs_.clear();
    for (void* p : blocks_) cudaFree(p);  // no throw from cleanup
    blocks_.clear();
  }
  void upload(uint64_t dst, const void* src, size_t bytes) override {
    PB_CUDA(cudaStreamSynchronize(stream_));
    if (bytes) PB_CUDA(cudaMemcpy(ptr(dst), src, bytes, cudaMemcpyHostToDevice));
  }
  void download(void* dst, uint64_t src, size_t bytes) override {
    PB_CUDA(cudaStreamSynchronize(stream_));
    if (bytes) PB_CUDA(cudaMemcpy(dst, ptr(src), bytes, cudaMemcpyDeviceToHost));
  }
  void copy(uint64_t dst, uint64_t src, size_t bytes) override {
    if (bytes) PB_CUDA(cudaMemcpyAsync(ptr(dst), ptr(src), bytes, cudaMemcpyDeviceToDevice, stream_));
  }
  void fill_u16(uint64_t dst, size_t count, uint16_t value) override {
    if (count) PB_CUDA(kernels::launch_fill_u16(stream_, ptr(dst), count, value));
  }
  void* stream() override { return stream_; }
  void synchronize(const char* what) override {
    cudaError_t e = cudaStreamSynchronize(stream_);
    if (e == cudaSuccess) e = cudaGetLastError();
    if (e != cudaSuccess) throw_cuda(e, what, __LINE__);
  }
  void mark(int i) override { PB_CUDA(cudaEventRecord(events_[i], stream_)); }
  double elapsed_ms(int from, int to) override {
    float ms = 0;
    PB_CUDA(cudaEventElapsedTime(&ms, events_[from], events_[to]));
    return ms;
  }
  size_t l2_bytes() const override { return l2_bytes_; }
  // Its own buffer (not in blocks_: it outlives release_all), made on first use.
  void flush_l2() override {
    if (!l2_bytes_) return;
    if (!flush_buf_) PB_CUDA(cudaMalloc(&flush_buf_, 2 * l2_bytes_));
    PB_CUDA(cudaMemsetAsync(flush_buf_, ++flush_value_, 2 * l2_bytes_, stream_));
  }

  bool captures() const override { return true; }
  void capture_begin() override {
    PB_CUDA(cudaStreamSynchronize(stream_));
    // Thread-local: an entry that synchronises, allocates or copies from pageable
    // memory on this thread while it is captured fails the capture (not graph-safe).
    PB_CUDA(cudaStreamBeginCapture(stream_, cudaStreamCaptureModeThreadLocal));
  }
  int capture_end() override {
    cudaGraph_t graph = nullptr;
    PB_CUDA(cudaStreamEndCapture(stream_, &graph));
    cudaGraphExec_t exec = nullptr;
    const cudaError_t e = cudaGraphInstantiate(&exec, graph, 0);
    cudaGraphDestroy(graph);
    if (e != cudaSuccess) throw_cuda(e, "cudaGraphInstantiate", __LINE__);
    graphs_.push_back(exec);
    return static_cast<int>(graphs_.size()) - 1;
  }
  void graph_launch(int id) override {
    if (id < 0 || id >= static_cast<int>(graphs_.size()))
      throw std::runtime_error("lib/cuda/cuda_memory.cpp: graph_launch of an unknown graph");
    PB_CUDA(cudaGraphLaunch(graphs_[id], stream_));
  }

 private:
  static void* ptr(uint64_t a) { return reinterpret_cast<void*>(a); }
  DeviceInfo info_;
  cudaStream_t stream_ = nullptr;
  cudaEvent_t events_[kMarkers] = {};
  std::vector<void*> blocks_;
  size_t l2_bytes_ = 0;
  void* flush_buf_ = nullptr;
  unsigned char flush_value_ = 0;
  std::vector<cudaGraphExec_t> graphs_;
};

}  // namespace

double cuda_device_free_bytes() {
  int count = 0;
  size_t free = 0, total = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess || count == 0 || cudaMemGetInfo(&free, &total) != cudaSuccess) {
    cudaGetLastError();  // clear the error state
    return 0;
  }
  return static_cast<double>(free);
}

std::unique_ptr<Memory> make_cuda_memory(std::string* why) {
  int count = 0;
  const cudaError_t e = cudaGetDeviceCount(&count);
  if (e != cudaSuccess || count == 0) {
    cudaGetLastError();  // clear the error state
    if (why) *why = "no CUDA device";
    return nullptr;
  }
  try {
    return std::make_unique<CudaMemory>();
  } catch (const std::exception& ex) {
    if (why) *why = std::string("no CUDA device: ") + ex.what();
    return nullptr;
  }
}

}  // namespace pb
