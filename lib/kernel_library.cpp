// kernel_library.cpp: opening, validating and calling a kernel library
// (kernel_library.h). Every refusal is an InputError naming the path and why.
#include "kernel_library.h"

#include <dlfcn.h>
#include <fmt/format.h>
#include <sys/stat.h>

#include <cstring>
#include <stdexcept>

#include "input_error.h"
#include "sha256.h"

namespace pb {

const char* status_name(pb_status st) {
  switch (st) {
    case PB_OK: return "PB_OK";
    case PB_ERR_UNSUPPORTED: return "PB_ERR_UNSUPPORTED";
    case PB_ERR_INVALID: return "PB_ERR_INVALID";
    case PB_ERR_DEVICE: return "PB_ERR_DEVICE";
    case PB_ERR_INTERNAL: return "PB_ERR_INTERNAL";
  }
  return "unknown status";
}

namespace {
constexpr size_t kMsgLen = 1024;
// The table size of ABI version 1 as first published: a library built then
// must be accepted by every later harness of version 1.
constexpr size_t kTableSizeV1 = offsetof(pb_kernel_table, gdn) + sizeof(void*);
}  // namespace

std::unique_ptr<KernelLibrary> KernelLibrary::open(const std::string& path) {
  auto refuse = [&](const std::string& why) { return InputError(fmt::format("--kernels {}: {}", path, why)); };
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) throw refuse(fmt::format("cannot open: {}", std::strerror(errno)));
  if (!S_ISREG(st.st_mode)) throw refuse("not a regular file");
  std::unique_ptr<KernelLibrary> lib(new KernelLibrary());
  lib->path_ = path;
  // dlopen needs a slash to take the path as a file rather than search for it.
  const std::string file = path.find('/') == std::string::npos ? "./" + path : path;
  lib->handle_ = ::dlopen(file.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!lib->handle_) {
    const char* e = ::dlerror();
    throw refuse(fmt::format("not a loadable shared library ({})", e ? e : "dlopen failed"));
  }
  ::dlerror();
  void* sym = ::dlsym(lib->handle_, PB_KERNEL_TABLE_SYMBOL);
  if (!sym)
    throw refuse(fmt::format("no symbol {} (a kernel library exports it; see docs/KERNEL-ABI.md)",
                             PB_KERNEL_TABLE_SYMBOL));
  const auto get = reinterpret_cast<pb_kernel_table_get_fn>(sym);
  lib->table_ = get();
  if (!lib->table_) throw refuse(fmt::format("{}() returned NULL", PB_KERNEL_TABLE_SYMBOL));
  if (lib->table_->abi_version != PB_KERNEL_ABI_VERSION)
    throw refuse(fmt::format("kernel ABI version {} (built against another kernel_abi.h); this prefill-bench "
                             "speaks version {}", lib->table_->abi_version, PB_KERNEL_ABI_VERSION));
  lib->sha256_ = sha256_file(path);
  lib->validate();
  return lib;
}

std::unique_ptr<KernelLibrary> KernelLibrary::builtin(const pb_kernel_table* table) {
  std::unique_ptr<KernelLibrary> lib(new KernelLibrary());
  lib->table_ = table;
  lib->validate();
  return lib;
}

void KernelLibrary::validate() {
  const pb_kernel_table& t = *table_;
  auto refuse = [&](const std::string& why) {
    return InputError(fmt::format("--kernels {}: {}", path_.empty() ? "built-in" : path_, why));
  };
  if (t.struct_size < kTableSizeV1)
    throw refuse(fmt::format("table struct_size {} is smaller than version 1's {}", t.struct_size, kTableSizeV1));
  if (t.device != PB_DEVICE_HOST && t.device != PB_DEVICE_CUDA)
    throw refuse(fmt::format("unknown device {} (expected PB_DEVICE_HOST or PB_DEVICE_CUDA)", t.device));
  struct { const void* fn; const char* name; } required[] = {
      {reinterpret_cast<const void*>(t.init), "init"},
      {reinterpret_cast<const void*>(t.teardown), "teardown"},
      {reinterpret_cast<const void*>(t.supports), "supports"},
      {reinterpret_cast<const void*>(t.set_option), "set_option"},
      {reinterpret_cast<const void*>(t.describe), "describe"},
      {reinterpret_cast<const void*>(t.workspace_bytes), "workspace_bytes"},
      {reinterpret_cast<const void*>(t.attn_layer), "attn_layer"},
      {reinterpret_cast<const void*>(t.ssm_layer), "ssm_layer"},
  };
  for (const auto& r : required)
    if (!r.fn) throw refuse(fmt::format("the table has no {} entry (required)", r.name));
  if (!t.name || !*t.name) throw refuse("the table has no name");
}

void KernelLibrary::init() {
  if (live_) return;
  char msg[kMsgLen] = "";
  const pb_status st = table_->init(&ctx_, msg, sizeof msg);
  if (st != PB_OK)
    throw InputError(fmt::format("--kernels {}: init failed: {}: {}", path_.empty() ? "built-in" : path_,
                                 status_name(st), msg));
  live_ = true;
}

KernelLibrary::~KernelLibrary() {
  if (live_) {
    char msg[kMsgLen] = "";
    table_->teardown(ctx_, msg, sizeof msg);  // nothing to do with a failure here
  }
  // The handle stays open: a device library may have registered kernels and
  // callbacks with the CUDA runtime that must outlive this object.
}

KernelLibraryInfo KernelLibrary::info() const {
  KernelLibraryInfo i;
  const pb_kernel_table& t = *table_;
  i.name = t.name;
  i.version = t.version ? t.version : "";
  if (!path_.empty()) i.path = path_;
  i.sha256 = sha256_;
  i.device = cuda() ? "cuda" : "host";
  i.abi_version = t.abi_version;
  i.schedule = (t.capabilities & PB_CAP_SCHEDULE) != 0;
  struct { const void* fn; const char* name; } optional[] = {
      {reinterpret_cast<const void*>(t.prepare_attn), "prepare_attn"},
      {reinterpret_cast<const void*>(t.prepare_ssm), "prepare_ssm"},
      {reinterpret_cast<const void*>(t.rope), "rope"},
      {reinterpret_cast<const void*>(t.kv_write), "kv_write"},
      {reinterpret_cast<const void*>(t.attention), "attention"},
      {reinterpret_cast<const void*>(t.conv1d), "conv1d"},
      {reinterpret_cast<const void*>(t.gdn), "gdn"},
  };
  for (const auto& o : optional)
    if (o.fn) i.entries.push_back(o.name);
  if (t.struct_size >= offsetof(pb_kernel_table, precision) + sizeof(void*) && t.precision)
    i.entries.push_back("precision");
  char buf[kMsgLen] = "";
  if (t.describe(ctx_, buf, sizeof buf) == PB_OK) i.describe = buf;
  return i;
}

std::string KernelLibrary::label() const {
  return path_.empty() ? std::string(table_->name) : fmt::format("{} ({})", table_->name, path_);
}

std::string KernelLibrary::set_option(const std::string& key, const std::string& value) {
  char msg[kMsgLen] = "";
  const pb_status st = table_->set_option(ctx_, key.c_str(), value.c_str(), msg, sizeof msg);
  if (st == PB_OK) return "";
  return *msg ? std::string(msg) : std::string(status_name(st));
}

std::string KernelLibrary::unsupported(const pb_layer_shape& shape) const {
  char why[kMsgLen] = "";
  const pb_status st = table_->supports(ctx_, &shape, why, sizeof why);
  if (st == PB_OK) return "";
  return *why ? std::string(why) : std::string(status_name(st));
}

uint64_t KernelLibrary::workspace_bytes(const pb_layer_shape& shape, const pb_batched_attn_metadata& meta) const {
  uint64_t bytes = 0;
  char msg[kMsgLen] = "";
  check(table_->workspace_bytes(ctx_, &shape, &meta, &bytes, msg, sizeof msg), "workspace_bytes", msg);
  return bytes;
}

std::string KernelLibrary::precision(const pb_layer_shape& shape, const char* kernel) const {
  const bool has = table_->struct_size >= offsetof(pb_kernel_table, precision) + sizeof(void*) && table_->precision;
  if (!has) return "fp32";
  char buf[kMsgLen] = "";
  check(table_->precision(ctx_, &shape, kernel, buf, sizeof buf), "precision", buf);
  return buf;
}

void KernelLibrary::check(pb_status st, const char* what, const char* msg) const {
  if (st == PB_OK) return;
  throw KernelFailure(fmt::format("kernel library {}: {} returned {}: {}", label(), what, status_name(st),
                                       msg && *msg ? msg : "(no message)"));
}

}  // namespace pb
