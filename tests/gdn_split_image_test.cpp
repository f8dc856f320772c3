// gdn_split_image_test.cpp: the operand images the split's prep writes for the Hopper
// scan (kernels/gdn_split_image.cuh), checked against the two contracts they serve,
// written out here independently: wgmma's 128-byte swizzle (16-byte piece XOR row % 8
// inside 32-value slab rows, slabs of `rows` rows one after another) and the perm8 order
// (position t of each 8 holds index 2t, position t + 4 index 2t + 1: where a thread's
// accumulator pair lands in its tf32 A fragment).
#include <gtest/gtest.h>

#include <vector>

#include "kernels/gdn_split_image.cuh"

namespace {

using pb::kernels::gdn_image_index;
using pb::kernels::gdn_kp_of;

// The position along the reduction index and the row that float index `idx` of an image
// of `rows` rows holds, by the swizzle's definition.
struct Slot {
  int row, pos;
};
Slot decode(int rows, int idx) {
  const int slab = idx / (rows * 32), rem = idx % (rows * 32);
  const int row = rem / 32, piece = ((rem % 32) / 4) ^ (row % 8);
  return {row, slab * 32 + piece * 4 + idx % 4};
}

TEST(GdnSplitImage, PaddedWidths) {
  EXPECT_EQ(gdn_kp_of(8), 32);
  EXPECT_EQ(gdn_kp_of(32), 32);
  EXPECT_EQ(gdn_kp_of(40), 64);
  EXPECT_EQ(gdn_kp_of(64), 64);
  EXPECT_EQ(gdn_kp_of(96), 128);
  EXPECT_EQ(gdn_kp_of(128), 128);
}

// Every (row, index) of a W / Q image (32 rows) and a K^T image (kp rows, 32 tokens) has
// its own slot, inside the image, at the row it names and the perm8 position of its index.
TEST(GdnSplitImage, SwizzledPerm8Bijection) {
  for (const int kp : {32, 64, 128}) {
    for (const auto [rows, width] : {std::pair{32, kp}, std::pair{kp, 32}}) {
      std::vector<int> seen(static_cast<size_t>(rows) * width, 0);
      for (int r = 0; r < rows; ++r)
        for (int i = 0; i < width; ++i) {
          const int idx = static_cast<int>(gdn_image_index(rows, r, i));
          ASSERT_GE(idx, 0);
          ASSERT_LT(idx, rows * width) << "rows " << rows << " width " << width;
          ++seen[static_cast<size_t>(idx)];
          const Slot s = decode(rows, idx);
          EXPECT_EQ(s.row, r);
          const int p = s.pos % 8, want = p < 4 ? 2 * p : 2 * (p - 4) + 1;
          EXPECT_EQ(s.pos / 8, i / 8);
          EXPECT_EQ(want, i % 8) << "position " << s.pos << " holds index " << i;
        }
      for (const int n : seen) ASSERT_EQ(n, 1);
    }
  }
}

}  // namespace
