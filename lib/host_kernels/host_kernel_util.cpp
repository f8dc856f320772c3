// host_kernel_util.cpp: argument checks and bounded stream rows for the host kernels.
#include "host_kernel_util.h"

#include <fmt/format.h>

namespace pb::host_kernels {

void expect_tensor(const pb_tensor& t, pb_dtype dtype, uint64_t elements, const char* name) {
  if (t.dtype != static_cast<uint32_t>(dtype))
    throw KernelError{PB_ERR_INVALID, fmt::format("{}: dtype {} where {} belongs", name, t.dtype,
                                                  static_cast<int>(dtype))};
  if (t.ndim > PB_TENSOR_MAX_DIMS)
    throw KernelError{PB_ERR_INVALID, fmt::format("{}: ndim {} > {}", name, t.ndim, PB_TENSOR_MAX_DIMS)};
  uint64_t n = 1;
  for (uint32_t i = 0; i < t.ndim; ++i) n *= t.shape[i] > 0 ? static_cast<uint64_t>(t.shape[i]) : 0;
  if (n < elements)
    throw KernelError{PB_ERR_INVALID, fmt::format("{}: {} elements, at least {} needed", name, n, elements)};
  if (n && !t.data) throw KernelError{PB_ERR_INVALID, fmt::format("{}: null address", name)};
}

StreamRows stream_rows(const pb_batched_attn_metadata& m, int total_tokens) {
  StreamRows r;
  r.begin.assign(m.batch_size + 1, 0);
  const int32_t* cu = at<const int32_t>(m.cu_seqlens);
  if (!cu) return r;  // every stream empty
  int prev = 0;
  for (uint32_t b = 0; b <= m.batch_size; ++b) {
    prev = std::clamp(cu[b], prev, total_tokens);
    r.begin[b] = prev;
  }
  return r;
}

int rows_of(const pb_batched_attn_metadata& m, const pb_tensor& t) {
  const int64_t rows = t.ndim ? t.shape[0] : 0;
  return static_cast<int>(std::clamp<int64_t>(m.total_tokens, 0, rows));
}

}  // namespace pb::host_kernels
