// backend.h: the harness side of one batch: a Memory (host or CUDA device
// memory, the clock or events) and a KernelLibrary (ours or a user's, behind
// include/prefill_bench/kernel_abi.h). The harness owns every buffer: it
// allocates, uploads the inputs, poisons the outputs and the workspace, stages,
// writes h_state_ptrs, reads back and times every entry it calls; the library
// only computes. It never sees the Batch's ground truth beyond the inputs.
// Flow per run: allocate -> (stage with its base addresses) -> upload_metadata
// -> for each layer: reset_layer, write h_state_ptrs, run_layer, read_layer.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "batch.h"
#include "buffer_guard.h"
#include "faults.h"
#include "kernel_library.h"
#include "memory.h"
#include "metadata.h"
#include "reference/reference.h"

namespace pb {

// What the checks read back after a layer.
struct LayerOutputs {
  std::vector<bf16> out;                     // attn [T, Hq, D]; gdn [T, Hv, v_dim]
  std::vector<bf16> k_cache, v_cache;        // attn: [num_blocks, block_size, Hkv, D]
  std::vector<std::vector<float>> h_state;   // gdn: stream b's own storage, [Hv, v_dim, k_dim]
  std::vector<bf16> conv_state;              // gdn: [N, conv_dim, d_conv - 1]
};
// FNV-1a over every byte of the outputs, to show two runs bit-identical in a report.
uint64_t outputs_checksum(const LayerOutputs& o);

// One kernel's elapsed time in one run of a layer.
struct KernelTime {
  std::string kernel;  // "rope", "kv_write", "attention", "conv1d", "gdn"; or "attn_layer", "ssm_layer"
  double ms = 0;
};

// The ABI's view of one layer's shape.
pb_layer_shape abi_layer_shape(LayerKind kind, const LayerShape& shape);

class Backend {
 public:
  Backend(std::unique_ptr<Memory> memory, std::unique_ptr<KernelLibrary> library);
  ~Backend();
  std::string name() const { return memory_->kind(); }  // "host" or "cuda"
  DeviceInfo device() const { return memory_->device(); }
  KernelLibrary& library() { return *library_; }

  // Allocates scratch (scratch_bytes), the table arena (arena_bytes) and every
  // layer's tensors, and uploads the layer inputs (initial KV cache, states).
  void allocate(const Batch& batch, const LayerShape& shape, size_t scratch_bytes, size_t arena_bytes);
  uint64_t scratch_base() const { return scratch_; }
  uint64_t arena_base() const { return arena_; }
  // Address of stream b's h_state storage of layer l (a gdn layer).
  uint64_t h_state_address(int layer, int stream) const;

  // One copy each: the whole scratch image and the table arena.
  void upload_metadata(const std::vector<uint8_t>& scratch, const std::vector<uint8_t>& arena);
  // The caller's own write into scratch (the per-layer h_state_ptrs array).
  void write_scratch(size_t offset, const void* data, size_t bytes);

  // "" when the library runs this layer, else its reason (supports() said no).
  std::string unsupported(int layer) const;
  // Restores what a run of the layer changes (KV cache, h_state, conv_state) to
  // the layer's initial contents and poisons the output (kBf16OutputPoisonBits).
  void reset_layer(int layer);
  // Runs one batched layer through the library: prepare (untimed), then each
  // per-kernel entry (or the layer entry) between two timing marks.
  // `h_state_ptrs` is the address of the pointer array (gdn layers); `schedule`
  // goes to the library (0: its normal work order).
  std::vector<KernelTime> run_layer(int layer, const BatchedAttnMetadata& meta, uint64_t h_state_ptrs,
                                    uint32_t schedule = 0);
  // Cold L2 (lib/timing.h): flush L2 before each timed entry of run_layer, outside
  // its timing marks. Returns the bytes each flush writes (0: this memory has none,
  // the run is then hot whatever was asked).
  size_t set_l2_flush(bool on) {
    l2_flush_ = on && memory_->l2_bytes() > 0;
    return l2_flush_ ? 2 * memory_->l2_bytes() : 0;
  }
  LayerOutputs read_layer(int layer);
  // buffer_guard's probe of prepare's contract (it may write only its workspace):
  // whether the library has a prepare entry for the layer's kind, and prepare
  // alone for this layer as run_layer calls it (schedule 0), then a synchronize.
  bool has_prepare(int layer) const;
  void prepare_only(int layer, const BatchedAttnMetadata& meta, uint64_t h_state_ptrs);

  // --graph (docs/DESIGN.md "Graph mode"). capture_layer: prepare with `meta`
  // (untimed), then the layer's timed entries captured once, schedule 0: on CUDA
  // into a graph on the memory's stream (nothing runs); on host the exact args
  // struct is recorded, the capture-time host copies kept alive and unchanged.
  // replay_layer: the workspace poisoned, prepare on the CURRENT `meta` (its host
  // copies and scalars), then the capture replayed between two marks: the graph
  // launched, or on host the same entries called again with the recorded struct.
  // Returns the replay's ms. Throws when the library asks for more workspace than
  // at capture (its workspace_bytes must hold for the whole bucket).
  void capture_layer(int layer, const BatchedAttnMetadata& meta, uint64_t h_state_ptrs);
  double replay_layer(int layer, const BatchedAttnMetadata& meta, uint64_t h_state_ptrs);
  // Another batch of the same bucket (same streams and tokens, same shape):
  // its inputs and initial caches and states uploaded into the SAME buffers,
  // every address kept.
  void upload_inputs(const Batch& batch);
  // The arithmetic the library declares for layer `layer`'s gdn kernel (its
  // `precision` entry), which the reference's lp reproduces so the numeric limit
  // follows it (docs/TOLERANCES.md); fp32 when the library declares none.
  GdnPrecision gdn_precision(int layer) const;
  std::vector<uint8_t> read_scratch();
  std::vector<uint8_t> read_arena();
  // buffer_guard: the layer's read-only inputs as they are now (attn q, k, v;
  // gdn x, conv_w, g, beta), and the guard zones of every buffer of the layer
  // (its workspace included) and of scratch and the table arena.
  LayerInputs read_inputs(int layer);
  std::vector<GuardZones> read_guards(int layer);

 private:
  struct Buffer {
    uint64_t at = 0;
    size_t bytes = 0;
    const char* name = "";
    size_t row_bytes = 0;
  };
  // One layer's capture (--graph): the args struct as captured, the host
  // copies it points at, and the graph id (CUDA) or -1 (host: replay by calling).
  struct Captured {
    bool live = false;
    int graph = -1;
    pb_attn_layer_args attn{};
    pb_ssm_layer_args ssm{};
    std::vector<int32_t> cu_seqlens_host, kv_lens_host;
  };
  struct LayerBuffers {
    LayerKind kind = LayerKind::attn;
    Buffer q, k, v, out, k_cache, v_cache, k_cache0, v_cache0;              // attn
    Buffer x, conv_w, g, beta, conv_state, conv0, h_state, h0;              // gdn
    Buffer workspace;
    Captured captured;
  };
  // `bytes` between two guard zones (kBufferGuardBytes of kBufferGuardBits).
  Buffer alloc(size_t bytes, const char* name, size_t row_bytes = 0);
  template <class T>
  Buffer upload(const std::vector<T>& host, size_t expect, const char* what, size_t row_bytes = 0);
  template <class T>
  void upload_into(const Buffer& b, const std::vector<T>& host, const char* what);
  // The workspace grown to what this metadata asks for (never moved under a
  // capture) and poisoned; the layer's args built from `m` and its buffers.
  pb_workspace prepare_workspace(LayerBuffers& L, const pb_batched_attn_metadata& m);
  pb_attn_layer_args attn_args(const LayerBuffers& L, const pb_batched_attn_metadata& m, pb_workspace ws,
                               uint32_t schedule) const;
  pb_ssm_layer_args ssm_args(const LayerBuffers& L, const pb_batched_attn_metadata& m, pb_workspace ws,
                             uint64_t h_state_ptrs, uint32_t schedule) const;
  // Both, as one layer run needs them: the workspace prepared, then the args of the
  // layer's kind (the other kind's left zero).
  struct LayerArgs {
    pb_attn_layer_args attn{};
    pb_ssm_layer_args ssm{};
  };
  LayerArgs layer_args(LayerBuffers& L, const pb_batched_attn_metadata& m, uint64_t h_state_ptrs, uint32_t schedule);
  // Waits for the stream after the library's entries; a device error there is the
  // library's failure (KernelFailure).
  void library_synchronize(const char* what);
  // prepare_* (when the library has it) with these args, untimed.
  void prepare(const LayerBuffers& L, const pb_attn_layer_args& a, const pb_ssm_layer_args& s);
  // The layer's timed entries on these args, each as `each(name, call)` runs it.
  template <class Each>
  void entries(const LayerBuffers& L, const pb_attn_layer_args& a, const pb_ssm_layer_args& s, char* msg,
               size_t msg_len, Each&& each);
  const LayerBuffers& at(int layer) const;

  std::unique_ptr<Memory> memory_;
  std::unique_ptr<KernelLibrary> library_;
  LayerShape shape_;
  int num_streams_ = 0, total_tokens_ = 0;
  uint64_t scratch_ = 0, arena_ = 0;
  size_t scratch_bytes_ = 0, arena_bytes_ = 0;
  std::vector<uint8_t> guard_image_;  // one zone's worth of kBufferGuardBits
  std::vector<LayerBuffers> layers_;
  bool l2_flush_ = false;
};

// "auto" (cuda when a device is present), "cuda" or "host" memory with our
// kernel library for it, or with the library at `kernels_path` (its device
// decides the memory; `want` must agree or be "auto"). Throws InputError for a
// refused library, a CUDA library without a device, or an unknown `want`.
std::unique_ptr<Backend> make_backend(const std::string& want, const std::string& kernels_path);
// Host memory and our host kernel library (benchmarks, tests).
std::unique_ptr<Backend> make_host_backend();
// True when this build has CUDA and a device is present; else `why` says which.
bool cuda_device_available(std::string* why);

// The initial content of one attention layer's paged cache (K or V): NaN
// poison everywhere, the stream's prior KV at its own blocks. Ground truth,
// shared by the harness (to upload) and the reference (to compare).
std::vector<bf16> initial_cache(const Batch& batch, const LayerShape& shape, int layer, bool v);

LayerShape layer_shape(const Scenario& s, const Batch& b);

}  // namespace pb
