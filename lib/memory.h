// memory.h: where the harness keeps the buffers it owns (scratch, arena, every
// layer's tensors, the library's workspace) and how it times a kernel library's
// entries: host memory and the host clock, or CUDA device memory and events on
// one stream. Invariants: every allocation is 256-byte aligned and lives until
// release_all(); addresses are u64 (host or device pointers, as the library sees them).
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

namespace pb {

struct DeviceInfo {
  std::string name;     // "NVIDIA H200" or the host CPU
  std::string driver;   // driver version, or "" on host
  std::string runtime;  // CUDA runtime version, or ""
  int sm_count = 0;
  double peak_tflops = 0;  // measured/declared bf16 matrix peak, 0 when unknown
  double peak_gbps = 0;    // device memory bandwidth, 0 when unknown
};

class Memory {
 public:
  virtual ~Memory() = default;
  virtual std::string kind() const = 0;  // "host" or "cuda"
  virtual DeviceInfo device() const = 0;

  // A zeroed buffer of at least `bytes` (an empty one still has an address).
  virtual uint64_t allocate(size_t bytes) = 0;
  virtual void release_all() = 0;
  virtual void upload(uint64_t dst, const void* src, size_t bytes) = 0;
  virtual void download(void* dst, uint64_t src, size_t bytes) = 0;
  virtual void copy(uint64_t dst, uint64_t src, size_t bytes) = 0;
  virtual void fill_u16(uint64_t dst, size_t count, uint16_t value) = 0;

  // The stream a library's entries run on: a cudaStream_t, nullptr on host.
  virtual void* stream() = 0;
  // Waits for everything enqueued; throws with `what` on a device error.
  virtual void synchronize(const char* what) = 0;
  // Timing: mark(i) records marker i (0 <= i < kMarkers) in stream order;
  // elapsed_ms(a, b) after synchronize().
  static constexpr int kMarkers = 16;
  virtual void mark(int i) = 0;
  virtual double elapsed_ms(int from, int to) = 0;

  // The cold-L2 primitive: the device's L2 size in bytes (0 where nothing is
  // flushed: the host backend, see docs/DESIGN.md "Timing"), and a write of twice
  // that many bytes enqueued on stream() (outside any timing marks) that leaves
  // none of the harness's or the library's data in L2.
  virtual size_t l2_bytes() const { return 0; }
  virtual void flush_l2() {}
  // Graphs (--graph). captures(): true when the stream can capture launches into
  // a graph (CUDA); false on host, where the backend records the entries' args
  // and replays them by calling again (backend.h). capture_begin() starts
  // capturing the stream (what is enqueued then does not run); capture_end()
  // instantiates what was captured and returns its id; graph_launch(id) enqueues
  // one replay on the stream. Graphs live until release_all().
  virtual bool captures() const { return false; }
  virtual void capture_begin() {}
  virtual int capture_end() { return -1; }
  virtual void graph_launch(int /*id*/) {}
};

std::unique_ptr<Memory> make_host_memory();
// nullptr when this build has no CUDA or no device is present; `why` says which.
std::unique_ptr<Memory> make_cuda_memory(std::string* why);
// Free memory of the current CUDA device in bytes; 0 without CUDA or a device.
double cuda_device_free_bytes();

}  // namespace pb
