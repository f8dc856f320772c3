// kernel_library.h: a kernel library behind the public C ABI
// (include/prefill_bench/kernel_abi.h): one of ours linked in (built-in) or a
// shared library opened with --kernels PATH. Owns the dlopen handle and one
// context; turns every pb_status into an exception with the library's message.
// Invariants: a KernelLibrary that exists passed every refusal below (file,
// shared object, symbol, ABI version, required entries); its context is live
// from init() to destruction.
#pragma once
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "prefill_bench/kernel_abi.h"

namespace pb {

// The kernel library under test failed while it ran: an entry returned an error
// status, or it broke the contract (docs/KERNEL-ABI.md). The run stops and fails
// (exit 1): the library is what is being judged, not the harness (exit 3).
class KernelFailure : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// What the reports record about the library a run used.
struct KernelLibraryInfo {
  std::string name, version;
  std::string path = "built-in";  // the file given to --kernels, or "built-in"
  std::string sha256;             // of that file; "" for a built-in library
  std::string device;             // "host" or "cuda"
  uint32_t abi_version = 0;
  std::vector<std::string> entries;  // the optional entries it provides ("rope", ..., "prepare_attn")
  bool schedule = false;             // PB_CAP_SCHEDULE: honours a non-zero schedule
  std::string describe;              // describe() once the options are set
};

class KernelLibrary {
 public:
  // dlopen(path), resolve PB_KERNEL_TABLE_SYMBOL, check the ABI. Throws
  // InputError "--kernels PATH: ..." for a missing file, a file that is not a
  // shared library, a missing symbol, another ABI version, a broken table.
  static std::unique_ptr<KernelLibrary> open(const std::string& path);
  // One of ours, linked in.
  static std::unique_ptr<KernelLibrary> builtin(const pb_kernel_table* table);
  ~KernelLibrary();
  KernelLibrary(const KernelLibrary&) = delete;
  KernelLibrary& operator=(const KernelLibrary&) = delete;

  // Creates the context (after the harness made the device current). Throws
  // InputError with the library's message when init fails.
  void init();
  const pb_kernel_table& table() const { return *table_; }
  void* context() const { return ctx_; }
  bool cuda() const { return table_->device == PB_DEVICE_CUDA; }
  // The info with describe() as it stands now.
  KernelLibraryInfo info() const;
  // "name" or "name (path)" for messages.
  std::string label() const;

  // set_option; returns "" on success, else the library's reason (it refused).
  std::string set_option(const std::string& key, const std::string& value);
  // "" when the library runs this layer shape, else its reason.
  std::string unsupported(const pb_layer_shape& shape) const;
  uint64_t workspace_bytes(const pb_layer_shape& shape, const pb_batched_attn_metadata& meta) const;
  // The arithmetic the library declares for `kernel` at this shape (its optional
  // `precision` entry); "fp32" when it has none.
  std::string precision(const pb_layer_shape& shape, const char* kernel) const;
  // Throws KernelFailure "<library>: <what>: <status>: <message>" unless st is PB_OK.
  void check(pb_status st, const char* what, const char* msg) const;

 private:
  KernelLibrary() = default;
  void validate();  // the table's version, size, device and required entries
  void* handle_ = nullptr;
  const pb_kernel_table* table_ = nullptr;
  void* ctx_ = nullptr;
  bool live_ = false;
  std::string path_;
  std::string sha256_;
};

const char* status_name(pb_status st);

// Our CUDA kernel library's table; nullptr in a build without CUDA.
const pb_kernel_table* cuda_kernel_table();
// Our host kernel library's table (lib/host_kernels/).
const pb_kernel_table* host_kernel_table();

}  // namespace pb
