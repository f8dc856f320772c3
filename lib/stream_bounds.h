// stream_bounds.h: decoding a stream's bounds and addresses from metadata read
// back from scratch, which a staging bug or an injected fault may have corrupted
// (docs/DESIGN.md "Metadata read back is untrusted"). Invariant: whatever the
// bytes, a row these return lies in [0, total_tokens) and an address range lies
// inside the buffer given. kernels/common.cuh decodes the same way on the GPU.
#pragma once
#include <algorithm>
#include <cstddef>
#include <cstdint>

namespace pb {

// A stream's packed rows [begin, end).
struct StreamRows {
  int begin = 0, end = 0;
  int count() const { return end - begin; }
};

// Stream b's rows from cu_seqlens[b] and cu_seqlens[b + 1]: both clamped to
// [0, total_tokens], and end >= begin. Exact for a well-formed cu_seqlens.
inline StreamRows decode_stream_rows(const int32_t* cu_seqlens, int b, int total_tokens) {
  StreamRows s;
  s.begin = std::clamp(cu_seqlens[b], 0, total_tokens);
  s.end = std::clamp(cu_seqlens[b + 1], s.begin, total_tokens);
  return s;
}

// The stream that owns packed row r: the largest b < num_streams whose decoded
// begin is <= r, provided r is also before its decoded end; -1 otherwise (the
// row belongs to no stream and stays poisoned). Exact for a well-formed
// cu_seqlens; for any other it still returns a stream with begin <= r < end.
inline int decode_stream_of_row(const int32_t* cu_seqlens, int num_streams, int total_tokens, int r,
                                StreamRows* rows) {
  int lo = 0, hi = num_streams - 1, b = -1;
  while (lo <= hi) {
    const int mid = lo + (hi - lo) / 2;
    if (std::clamp(cu_seqlens[mid], 0, total_tokens) <= r) {
      b = mid;
      lo = mid + 1;
    } else {
      hi = mid - 1;
    }
  }
  if (b < 0) return -1;
  *rows = decode_stream_rows(cu_seqlens, b, total_tokens);
  return r < rows->end ? b : -1;
}

// Address `a` (a u64 read from metadata) as a pointer to `count` elements of T
// when they all lie inside [base, base + bytes) and `a` is aligned for T;
// nullptr otherwise. Written so that no sum can wrap, since `a` may be any u64.
template <typename T>
const T* bounded_address(uint64_t a, const void* base, size_t bytes, size_t count) {
  const uint64_t b = reinterpret_cast<uint64_t>(base);
  if (a < b || a % alignof(T) != 0 || a - b > bytes || count > (bytes - (a - b)) / sizeof(T))
    return nullptr;
  return reinterpret_cast<const T*>(a);
}

}  // namespace pb
