// backend.h: what a backend (host, cuda) does for one batch. A backend knows
// only the staged metadata and the buffers it allocated; it never sees the
// Batch's ground truth beyond the input tensors uploaded at allocate().
// Flow per run: allocate -> (stage with its base addresses) -> upload_metadata
// -> for each layer: reset_layer, write h_state_ptrs, run_layer, read_layer.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "batch.h"
#include "faults.h"
#include "metadata.h"
#include "reference/reference.h"

namespace pb {

struct DeviceInfo {
  std::string name;     // "NVIDIA H200" or the host CPU
  std::string driver;   // driver version, or "" on host
  std::string runtime;  // CUDA runtime version, or ""
  int sm_count = 0;
  double peak_tflops = 0;  // measured/declared bf16 matrix peak, 0 when unknown
  double peak_gbps = 0;    // device memory bandwidth, 0 when unknown
};

// What the checks read back after a layer.
struct LayerOutputs {
  std::vector<bf16> out;                     // attn [T, Hq, D]; gdn [T, Hv, v_dim]
  std::vector<bf16> k_cache, v_cache;        // attn: [num_blocks, block_size, Hkv, D]
  std::vector<std::vector<float>> h_state;   // gdn: stream b's own storage, [Hv, v_dim, k_dim]
  std::vector<bf16> conv_state;              // gdn: [N, conv_dim, d_conv - 1]
};

// One kernel's elapsed time in one run of a layer.
struct KernelTime {
  std::string kernel;  // "rope", "kv_write", "attention", "conv1d", "gdn"
  double ms = 0;
};

class Backend {
 public:
  virtual ~Backend() = default;
  virtual std::string name() const = 0;
  virtual DeviceInfo device() const = 0;

  // Allocates scratch (scratch_bytes), the table arena (arena_bytes) and every
  // layer's tensors, and uploads the layer inputs (initial KV cache, states).
  virtual void allocate(const Batch& batch, const LayerShape& shape, size_t scratch_bytes,
                        size_t arena_bytes) = 0;
  virtual uint64_t scratch_base() const = 0;
  virtual uint64_t arena_base() const = 0;
  // Address of stream b's h_state storage of layer l (a gdn layer).
  virtual uint64_t h_state_address(int layer, int stream) const = 0;

  // One copy each: the whole scratch image and the table arena.
  virtual void upload_metadata(const std::vector<uint8_t>& scratch,
                               const std::vector<uint8_t>& arena) = 0;
  // The caller's own write into scratch (the per-layer h_state_ptrs array).
  virtual void write_scratch(size_t offset, const void* data, size_t bytes) = 0;

  // Restores what a run of the layer changes (KV cache, h_state, conv_state) to
  // the layer's initial contents and poisons the output.
  virtual void reset_layer(int layer) = 0;
  // Runs one batched layer: one launch per kernel for all streams.
  // `h_state_ptrs` is the address of the pointer array (gdn layers).
  virtual std::vector<KernelTime> run_layer(int layer, const BatchedAttnMetadata& meta,
                                            uint64_t h_state_ptrs) = 0;
  virtual LayerOutputs read_layer(int layer) = 0;
  // The arithmetic of the gdn kernel allocate() chose, which the reference's lp
  // reproduces so the numeric limit follows it (docs/TOLERANCES.md).
  virtual GdnPrecision gdn_precision() const { return GdnPrecision::fp32; }
  virtual std::vector<uint8_t> read_scratch() = 0;
  virtual std::vector<uint8_t> read_arena() = 0;
};

std::unique_ptr<Backend> make_host_backend(FaultSet faults);
// nullptr when this build has no CUDA or no device is present; `why` says which.
std::unique_ptr<Backend> make_cuda_backend(FaultSet faults, std::string* why);

// The initial content of one attention layer's paged cache (K or V): NaN
// poison everywhere, the stream's prior KV at its own blocks. Ground truth,
// shared by backends (to upload) and the reference (to compare).
std::vector<bf16> initial_cache(const Batch& batch, const LayerShape& shape, int layer, bool v);

LayerShape layer_shape(const Scenario& s, const Batch& b);

}  // namespace pb
