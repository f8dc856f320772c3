// host_kernel_util.h: what every host kernel needs to read the ABI's arguments
// safely: typed views of u64 addresses, the stream boundaries made monotone
// inside [0, T], and the work order a `schedule` asks for.
#pragma once
#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "host_kernels.h"
#include "lib/parallel.h"

namespace pb::host_kernels {

template <class T>
T* at(uint64_t address) {
  return reinterpret_cast<T*>(address);
}

// Throws a KernelError(PB_ERR_INVALID) unless the tensor has the dtype and at
// least `elements` elements (shape product), and a non-null address when it has any.
void expect_tensor(const pb_tensor& t, pb_dtype dtype, uint64_t elements, const char* name);

// Stream b's packed rows [begin[b], begin[b + 1]) from the device cu_seqlens:
// each boundary clamped into [previous boundary, T], so rows never overlap and
// never leave the tensors, whatever the scratch holds.
struct StreamRows {
  std::vector<int> begin;  // [N + 1]
  int count(int b) const { return begin[b + 1] - begin[b]; }
};
StreamRows stream_rows(const pb_batched_attn_metadata& m, int total_tokens);

// Rows the kernels may touch: total_tokens, never more than the tensors hold.
int rows_of(const pb_batched_attn_metadata& m, const pb_tensor& t);

// parallel_for over n work items in the order `schedule` asks: 0 = 0..n-1,
// otherwise n-1..0 (another order of the same work, to expose races).
inline void for_work(int n, uint32_t schedule, const std::function<void(int)>& fn) {
  parallel_for(n, [&](int i) { fn(schedule ? n - 1 - i : i); });
}

}  // namespace pb::host_kernels
