// fill.cu: fills a buffer with one 16-bit word (the NaN poison of outputs
// before every layer run), so an element no kernel wrote shows as NaN; and
// writes a few int32 values carried in the launch's own parameters (the
// graph-baked-kv-len fault: under a CUDA graph they stay the capture's).
#include "kernels/kernels.h"

namespace pb::kernels {

// Tuning knobs.
struct FillConfig {
  static constexpr int kThreads = 256;
  static constexpr int kMaxBlocks = 4096;  // grid-stride beyond this
};

namespace {

__global__ void fill_u16_kernel(uint16_t* dst, size_t count, uint16_t value) {
  const size_t stride = static_cast<size_t>(gridDim.x) * blockDim.x;
  for (size_t i = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < count; i += stride)
    dst[i] = value;
}

__global__ void write_i32_kernel(int32_t* dst, BakedI32 values) {
  for (int i = threadIdx.x; i < values.count; i += blockDim.x) dst[i] = values.v[i];
}

}  // namespace

cudaError_t launch_write_baked_i32(cudaStream_t stream, int32_t* dst, const int32_t* host, int count) {
  if (count < 0 || count > BakedI32::kMax) return cudaErrorInvalidValue;
  BakedI32 values{};
  values.count = count;
  for (int i = 0; i < count; ++i) values.v[i] = host[i];
  write_i32_kernel<<<1, FillConfig::kThreads, 0, stream>>>(dst, values);
  return cudaGetLastError();
}

cudaError_t launch_fill_u16(cudaStream_t stream, void* dst, size_t count, uint16_t value) {
  if (count == 0) return cudaSuccess;
  constexpr int kT = FillConfig::kThreads;
  size_t blocks = (count + kT - 1) / kT;
  if (blocks > FillConfig::kMaxBlocks) blocks = FillConfig::kMaxBlocks;
  fill_u16_kernel<<<static_cast<unsigned>(blocks), kT, 0, stream>>>(static_cast<uint16_t*>(dst), count, value);
  return cudaGetLastError();
}

}  // namespace pb::kernels
