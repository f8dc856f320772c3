// no_cuda_memory.cpp: make_cuda_memory and cuda_kernel_table for a build without nvcc.
#include "lib/kernel_library.h"
#include "lib/memory.h"

namespace pb {

std::unique_ptr<Memory> make_cuda_memory(std::string* why) {
  if (why) *why = "this build has no CUDA support (nvcc was not found at configure time)";
  return nullptr;
}

const pb_kernel_table* cuda_kernel_table() { return nullptr; }

double cuda_device_free_bytes() { return 0; }

}  // namespace pb
