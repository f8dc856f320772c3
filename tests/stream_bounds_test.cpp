// stream_bounds_test.cpp: lib/stream_bounds.h decodes well-formed metadata
// exactly and corrupted metadata (any i32 in cu_seqlens, any u64 as an address)
// into rows inside the batch and addresses inside their buffer, or refuses it.
// The sanitizer job runs these and the fault matrix under ASan + UBSan.
#include <gtest/gtest.h>

#include <climits>
#include <cstdint>
#include <random>
#include <vector>

#include "lib/stream_bounds.h"

namespace pb {
namespace {

TEST(StreamBounds, WellFormedCuSeqlensDecodeExactly) {
  const std::vector<int32_t> cu = {0, 5, 5, 12, 20};  // stream 1 is empty
  const int N = 4, T = 20;
  const StreamRows s3 = decode_stream_rows(cu.data(), 3, T);
  EXPECT_EQ(s3.begin, 12);
  EXPECT_EQ(s3.end, 20);
  EXPECT_EQ(decode_stream_rows(cu.data(), 1, T).count(), 0);
  for (int r = 0; r < T; ++r) {
    StreamRows rows;
    const int b = decode_stream_of_row(cu.data(), N, T, r, &rows);
    const int want = r < 5 ? 0 : r < 12 ? 2 : 3;
    EXPECT_EQ(b, want) << "row " << r;
    EXPECT_EQ(rows.begin, cu[want]);
    EXPECT_EQ(rows.end, cu[want + 1]);
  }
}

TEST(StreamBounds, CorruptedCuSeqlensStayInsideTheBatch) {
  const int T = 20;
  // A negative begin (the conv1d overflow under staged-bytes-undercount): clamped to 0.
  std::vector<int32_t> cu = {-1000, 5, 12, 20};
  StreamRows rows;
  EXPECT_EQ(decode_stream_of_row(cu.data(), 3, T, 0, &rows), 0);
  EXPECT_EQ(rows.begin, 0);
  // An end before its begin is an empty stream; ends past total_tokens are clamped.
  cu = {7, 3, INT_MAX, INT_MIN};
  EXPECT_EQ(decode_stream_rows(cu.data(), 0, T).count(), 0);
  EXPECT_EQ(decode_stream_rows(cu.data(), 1, T).end, T);
  EXPECT_EQ(decode_stream_rows(cu.data(), 2, T).begin, T);
  EXPECT_EQ(decode_stream_rows(cu.data(), 2, T).count(), 0);
  // Rows no decoded stream owns: -1.
  cu = {INT_MIN, INT_MIN, INT_MIN};
  EXPECT_EQ(decode_stream_of_row(cu.data(), 2, T, 0, &rows), -1);
  cu = {INT_MAX, INT_MAX, INT_MAX};
  EXPECT_EQ(decode_stream_of_row(cu.data(), 2, T, T - 1, &rows), -1);
  // Any bytes at all: a stream that is returned owns the row, inside [0, T).
  std::mt19937 rng(12);
  std::uniform_int_distribution<int32_t> any(INT_MIN, INT_MAX), near(-3, T + 3);
  for (int trial = 0; trial < 2000; ++trial) {
    const int N = 1 + trial % 7;
    cu.resize(N + 1);
    for (int32_t& v : cu) v = trial % 2 ? any(rng) : near(rng);
    for (int r = 0; r < T; ++r) {
      const int b = decode_stream_of_row(cu.data(), N, T, r, &rows);
      if (b < 0) continue;
      ASSERT_LT(b, N);
      ASSERT_LE(0, rows.begin);
      ASSERT_LE(rows.begin, r);
      ASSERT_LT(r, rows.end);
      ASSERT_LE(rows.end, T);
    }
  }
}

TEST(StreamBounds, AddressesInsideTheirBufferOnly) {
  alignas(8) static int32_t buf[16];
  const uint64_t base = reinterpret_cast<uint64_t>(buf);
  const size_t bytes = sizeof(buf);
  EXPECT_EQ(bounded_address<int32_t>(base, buf, bytes, 16), buf);
  EXPECT_EQ(bounded_address<int32_t>(base + 12 * 4, buf, bytes, 4), buf + 12);
  EXPECT_EQ(bounded_address<int32_t>(base + 12 * 4, buf, bytes, 5), nullptr);  // one past the end
  EXPECT_EQ(bounded_address<int32_t>(base + bytes, buf, bytes, 0), buf + 16);  // empty range at the end
  EXPECT_EQ(bounded_address<int32_t>(base + bytes + 4, buf, bytes, 0), nullptr);
  EXPECT_EQ(bounded_address<int32_t>(base - 4, buf, bytes, 1), nullptr);       // before the buffer
  EXPECT_EQ(bounded_address<int32_t>(base + 2, buf, bytes, 1), nullptr);       // misaligned
  EXPECT_EQ(bounded_address<uint64_t>(base + 4, buf, bytes, 1), nullptr);      // misaligned for u64
  EXPECT_EQ(bounded_address<int32_t>(0, buf, bytes, 1), nullptr);
  // Sums that would wrap around 2^64 if the check added them.
  EXPECT_EQ(bounded_address<int32_t>(UINT64_MAX - 3, buf, bytes, 1), nullptr);
  EXPECT_EQ(bounded_address<int32_t>(base, buf, bytes, SIZE_MAX / 2), nullptr);
}

}  // namespace
}  // namespace pb
