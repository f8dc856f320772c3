// host_memory.cpp: the harness's buffers in host memory (aligned, zeroed) and
// the host clock for timing. Used with a PB_DEVICE_HOST kernel library.
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <new>
#include <thread>
#include <vector>

#include "memory.h"

namespace pb {
namespace {

class HostMemory final : public Memory {
 public:
  ~HostMemory() override { release_all(); }
  std::string kind() const override { return "host"; }
  DeviceInfo device() const override {
    DeviceInfo d;
    d.name = "host CPU (" + std::to_string(std::thread::hardware_concurrency()) + " threads)";
    return d;
  }
  uint64_t allocate(size_t bytes) override {
    const size_t n = ((bytes < 256 ? 256 : bytes) + 255) & ~size_t(255);
    void* p = std::aligned_alloc(256, n);
    if (!p) throw std::bad_alloc();
    std::memset(p, 0, n);
    blocks_.push_back(p);
    return reinterpret_cast<uint64_t>(p);
  }
  void release_all() override {
    for (void* p : blocks_) std::free(p);
    blocks_.clear();
  }
  void upload(uint64_t dst, const void* src, size_t bytes) override {
    if (bytes) std::memcpy(ptr(dst), src, bytes);
  }
  void download(void* dst, uint64_t src, size_t bytes) override {
    if (bytes) std::memcpy(dst, ptr(src), bytes);
  }
  void copy(uint64_t dst, uint64_t src, size_t bytes) override {
    if (bytes) std::memmove(ptr(dst), ptr(src), bytes);
  }
  void fill_u16(uint64_t dst, size_t count, uint16_t value) override {
    uint16_t* p = static_cast<uint16_t*>(ptr(dst));
    std::fill(p, p + count, value);
  }
  void* stream() override { return nullptr; }
  void synchronize(const char*) override {}
  void mark(int i) override { marks_[i] = std::chrono::steady_clock::now(); }
  double elapsed_ms(int from, int to) override {
    return std::chrono::duration<double, std::milli>(marks_[to] - marks_[from]).count();
  }

 private:
  static void* ptr(uint64_t a) { return reinterpret_cast<void*>(a); }
  std::vector<void*> blocks_;
  std::chrono::steady_clock::time_point marks_[kMarkers];
};

}  // namespace

std::unique_ptr<Memory> make_host_memory() { return std::make_unique<HostMemory>(); }

}  // namespace pb
