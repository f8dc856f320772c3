// gdn_split_image.cuh: the layout in which the split's prep writes the A operands of the
// Hopper scan (gdn_split_scan_st.cuh), so that one bulk copy per operand lands a wgmma-
// ready tile: per 32-token chunk, W [32 tokens][KP k] (per v head), Q [32][KP] and K^T
// [KP k][32 tokens] (per k head), tf32 values, zero past the chunk's end and past k_dim;
// and per (chunk, v head, v block) U and the decays (gdn_ue_floats, fp32).
// An image of `rows` rows is K-major with the 128-byte swizzle: KP / 32 slabs of
// [rows][32 values], 16-byte piece XOR (row % 8), as wgmma's descriptors read it from a
// 1024-byte aligned base. Along its reduction index the values sit in the perm8 order:
// position p of each 8 holds index 2p (p < 4) or 2 (p - 4) + 1. The scan writes its B
// operands (tf32 S and E Delta) by the same index, so each product's operands agree; the
// order itself is a leftover of an earlier scan whose accumulators became A fragments.
#pragma once
#include <cstdint>

#ifdef __CUDACC__
#define PB_SPLIT_IMAGE_FN __host__ __device__ inline
#else
#define PB_SPLIT_IMAGE_FN inline  // host tests (tests/gdn_split_image_test.cpp)
#endif

namespace pb::kernels {

// Floats of the decays E_j = e^{G_last - G_j} for a chunk's 32 tokens (1 past its end),
// then e^{G_last}, padded to 16 bytes.
constexpr int kGdnEImg = 36;

// Floats of one (chunk, v head, block of vb v rows)'s U | E image: U [32 tokens][vb] in
// fp32, then the chunk's decays: one bulk copy brings a scan stage both. U's rows past the
// chunk's end and columns past v_dim are left unwritten (the scan never reads them).
PB_SPLIT_IMAGE_FN constexpr int gdn_ue_floats(int vb) { return 32 * vb + kGdnEImg; }

// k_dim padded to the scan's widths.
PB_SPLIT_IMAGE_FN int gdn_kp_of(int dk) { return dk <= 32 ? 32 : dk <= 64 ? 64 : 128; }

// Float index, in an image of `rows` rows, of reduction index i of row `row`.
PB_SPLIT_IMAGE_FN uint32_t gdn_image_index(int rows, int row, int i) {
  const int pos = (i & ~7) + ((i & 1) ? 4 + ((i & 7) >> 1) : ((i & 7) >> 1));
  const int ch = pos >> 2;  // 16-byte piece of the 32-value slab row
  return static_cast<uint32_t>((ch >> 3) * (rows * 32) + row * 32 + (((ch & 7) ^ (row & 7)) << 2) + (pos & 3));
}

}  // namespace pb::kernels
