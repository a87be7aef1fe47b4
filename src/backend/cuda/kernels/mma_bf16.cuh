// Warp-level bf16 products on tensor cores: mma.sync m16n8k16 (row.col, bf16 in, f32 out). With
// g = lane / 4 and c = lane % 4, a thread holds of A rows g and g + 8, columns 2c, 2c + 1 and
// 2c + 8, 2c + 9 (registers: (g, 2c), (g + 8, 2c), (g, 2c + 8), (g + 8, 2c + 8), each a pair);
// of B rows 2c, 2c + 1 and 2c + 8, 2c + 9 of column g; of C (g, 2c), (g, 2c + 1), (g + 8, 2c),
// (g + 8, 2c + 1).
#pragma once

#include <cuda_bf16.h>

#include <cstdint>

namespace kiln::cuda {

// Two floats rounded to bf16 (nearest even) as one fragment register: lo in the low half, the
// lower column (or k).
__device__ __forceinline__ uint32_t pack_bf16(float lo, float hi) {
  const __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
  return *reinterpret_cast<const uint32_t*>(&v);
}

// c += a b for a 16x16 bf16 A (row-major), a 16x8 bf16 B (column-major) and a 16x8 f32 C.
__device__ __forceinline__ void mma_bf16(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
      "{%0, %1, %2, %3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// Four 8x8 bf16 matrices: lanes 8i..8i+7 give the row addresses of matrix i, and each thread
// receives, of every matrix, row g, columns 2c and 2c + 1 (an A or B fragment register); with
// kTrans, rows 2c and 2c + 1 of column g.
template <bool kTrans>
__device__ __forceinline__ void ldmatrix_x4(uint32_t (&r)[4], const __nv_bfloat16* row) {
  const uint32_t addr = static_cast<uint32_t>(__cvta_generic_to_shared(row));
  if constexpr (kTrans)
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(addr) : "memory");
  else
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(addr) : "memory");
}

}  // namespace kiln::cuda
