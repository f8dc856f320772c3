// mma_bf16.cuh: the bf16 tensor-core pieces the mma.sync kernels share
// (attention_mma.cu, gdn_bf16.cu): ldmatrix of 8 x 8 b16 tiles (plain and
// transposed) and the m16n8k16 product with fp32 accumulators.
// Fragment layout (PTX ISA, m16n8k16 .bf16), g = lane / 4, t = lane % 4:
//   A [16][16] row-major: a0 (g, 2t..2t+1), a1 (g+8, 2t..), a2 (g, 2t+8..), a3 (g+8, 2t+8..);
//   B [16][8] (k x n):    b0 (k 2t..2t+1, n g), b1 (k 2t+8..2t+9, n g);
//   C/D [16][8]:          d0, d1 (g, 2t..2t+1), d2, d3 (g+8, 2t..2t+1).
// So the accumulators of two adjacent n-tiles, packed to bf16, are the A fragment of
// one k-step of a following product (d of tile 2s -> a0, a1; of tile 2s+1 -> a2, a3).
#pragma once
#include <cstdint>

namespace pb::kernels::detail {

__device__ __forceinline__ void ldmatrix_x4(uint32_t addr, uint32_t& r0, uint32_t& r1, uint32_t& r2,
                                            uint32_t& r3) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r0), "=r"(r1), "=r"(r2), "=r"(r3)
               : "r"(addr));
}
__device__ __forceinline__ void ldmatrix_x4_trans(uint32_t addr, uint32_t& r0, uint32_t& r1, uint32_t& r2,
                                                  uint32_t& r3) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r0), "=r"(r1), "=r"(r2), "=r"(r3)
               : "r"(addr));
}
// d += a * b: bf16 inputs, fp32 accumulators (m16n8k16, A row-major, B column-major).
__device__ __forceinline__ void mma_bf16(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
      "{%0, %1, %2, %3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

}  // namespace pb::kernels::detail
