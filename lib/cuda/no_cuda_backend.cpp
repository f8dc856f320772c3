// no_cuda_backend.cpp: make_cuda_backend for a build without nvcc.
#include "lib/backend.h"

namespace pb {

std::unique_ptr<Backend> make_cuda_backend(FaultSet, std::string* why) {
  if (why) *why = "this build has no CUDA backend (nvcc was not found at configure time)";
  return nullptr;
}

}  // namespace pb
