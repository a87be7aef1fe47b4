// Warp-level f32 products on tensor cores in 3xTF32: each operand is split into a tf32 high part
// and a tf32 remainder, and lo*hi + hi*lo + hi*hi (the small products first) keeps f32-level
// accuracy. Or in one tf32 pass (warp_mma<1>), where the caller allows reduced precision. Fragments are those of mma.sync m16n8k8 (row.col): with g = lane / 4 and q = lane %
// 4, a thread holds A (g, q), (g + 8, q), (g, q + 4), (g + 8, q + 4); B (q, g), (q + 4, g); and
// C (g, 2q), (g, 2q + 1), (g + 8, 2q), (g + 8, 2q + 1) of each 16x8 tile.
#pragma once

#include <cstdint>

namespace kiln::cuda {

// tf32(x) to nearest, ties away from zero, for an mma operand: the bits of cvt.rna.tf32.f32 above
// the 13 that the tensor cores ignore. cvt.rna is no single instruction on sm_90 (ptxas emits four:
// the rounding add and mask, and a NaN/Inf guard); this is one add, and ptxas itself drops the mask
// where a cvt.rna result only feeds an mma. For finite x the mma sees the same operand.
__device__ __forceinline__ uint32_t tf32_operand(float x) { return __float_as_uint(x) + 0x1000u; }

// x = hi + lo with hi = tf32(x) and lo = tf32(x - hi) (lo as an mma operand, see tf32_operand).
// hi is masked: x - hi must be exact.
__device__ __forceinline__ void split_tf32(float x, uint32_t& hi, uint32_t& lo) {
  hi = tf32_operand(x) & 0xffffe000u;
  lo = tf32_operand(x - __uint_as_float(hi));
}

// An operand split ahead (into shared memory, once for every warp that reads it): split_tf32
// passes its halves through, so warp_mma3's accessors may return either a float or this.
struct Tf32Pair {
  uint32_t hi, lo;
};

__device__ __forceinline__ void split_tf32(Tf32Pair x, uint32_t& hi, uint32_t& lo) {
  hi = x.hi;
  lo = x.lo;
}

// Stores x's split into hi[at] and lo[at].
__device__ __forceinline__ void store_split(float x, uint32_t* hi, uint32_t* lo, int at) {
  split_tf32(x, hi[at], lo[at]);
}

// c += a b for a 16x8 tf32 A, an 8x8 tf32 B and a 16x8 f32 C.
__device__ __forceinline__ void mma_tf32(float (&c)[4], const uint32_t (&a)[4], const uint32_t (&b)[2]) {
  asm volatile(
      "mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
      "{%0, %1, %2, %3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

// tf32(x): the high part alone (one-pass products).
__device__ __forceinline__ uint32_t tf32_hi(float x) { return tf32_operand(x); }
__device__ __forceinline__ uint32_t tf32_hi(Tf32Pair x) { return x.hi; }

// acc[nt] += sum over k in [k_begin, k_end) of a(r, k) b(k, 8 nt + n), for the warp's 16 x 8NT
// tile, in steps of 8 (k_end - k_begin a multiple of 8): a(r, k) reads A at tile row r (0..15),
// b(k, n) reads B at tile column n (0..8NT-1); both read any layout (transposed or not) and
// return a float or a Tf32Pair. P = 3: 3xTF32 (f32-level accuracy); P = 1: one tf32 product
// (operands rounded to tf32, ~2^-11 relative each; a third of the tensor-core work). UNROLL: the
// k-steps unrolled; a kernel with many products at its call sites (each an inlined copy) keeps
// its code small with 1, which matters once it outgrows the instruction cache.
template <int P, int NT, int UNROLL = 4, typename FA, typename FB>
__device__ __forceinline__ void warp_mma(float (&acc)[NT][4], int k_begin, int k_end, FA a, FB b) {
  static_assert(P == 1 || P == 3, "3xTF32 or one tf32 pass");
  const int lane = threadIdx.x & 31, g = lane >> 2, q = lane & 3;
#pragma unroll UNROLL
  for (int k0 = k_begin; k0 < k_end; k0 += 8) {
    uint32_t ah[4], al[4];
    if constexpr (P == 3) {
      split_tf32(a(g, k0 + q), ah[0], al[0]);
      split_tf32(a(g + 8, k0 + q), ah[1], al[1]);
      split_tf32(a(g, k0 + q + 4), ah[2], al[2]);
      split_tf32(a(g + 8, k0 + q + 4), ah[3], al[3]);
    } else {
      ah[0] = tf32_hi(a(g, k0 + q));
      ah[1] = tf32_hi(a(g + 8, k0 + q));
      ah[2] = tf32_hi(a(g, k0 + q + 4));
      ah[3] = tf32_hi(a(g + 8, k0 + q + 4));
    }
#pragma unroll
    for (int nt = 0; nt < NT; ++nt) {
      uint32_t bh[2], bl[2];
      if constexpr (P == 3) {
        split_tf32(b(k0 + q, nt * 8 + g), bh[0], bl[0]);
        split_tf32(b(k0 + q + 4, nt * 8 + g), bh[1], bl[1]);
        mma_tf32(acc[nt], al, bh);
        mma_tf32(acc[nt], ah, bl);
      } else {
        bh[0] = tf32_hi(b(k0 + q, nt * 8 + g));
        bh[1] = tf32_hi(b(k0 + q + 4, nt * 8 + g));
      }
      mma_tf32(acc[nt], ah, bh);
    }
  }
}

template <int NT, int UNROLL = 4, typename FA, typename FB>
__device__ __forceinline__ void warp_mma3(float (&acc)[NT][4], int k_begin, int k_end, FA a, FB b) {
  warp_mma<3, NT, UNROLL>(acc, k_begin, k_end, a, b);
}

// f(r, n, v) for every accumulator of the warp's tile: tile row r (0..15), tile column n
// (0..8NT-1), v the accumulator (a reference).
template <int NT, typename F>
__device__ __forceinline__ void warp_tile_each(float (&acc)[NT][4], F f) {
  const int lane = threadIdx.x & 31, g = lane >> 2, q = lane & 3;
#pragma unroll
  for (int nt = 0; nt < NT; ++nt)
#pragma unroll
    for (int e = 0; e < 4; ++e) f(g + 8 * (e >> 1), nt * 8 + 2 * q + (e & 1), acc[nt][e]);
}

// The 8 warps of a block update a [ROWS][32] f32 matrix X (row stride STRIDE) in place, 16 rows
// and 8 NT columns a warp: X = scale X + the products that products(acc, r0, n0) adds into the
// warp's tile (rows r0.., columns n0..), keeping X's tf32 split (Xh, Xl) current.
template <int ROWS, int STRIDE, typename F>
__device__ __forceinline__ void block_update_32(float* X, uint32_t* Xh, uint32_t* Xl, float scale, F products) {
  constexpr int NT = ROWS >= 32 ? ROWS / 32 : 1;  // 4 * ROWS / 16 tiles over 8 warps
  const int tile = (threadIdx.x >> 5) * NT, r0 = 16 * (tile / 4), n0 = 8 * (tile % 4);
  if (r0 >= ROWS) return;
  float acc[NT][4];
  warp_tile_each(acc, [&](int r, int j, float& v) { v = scale * X[(r0 + r) * STRIDE + n0 + j]; });
  products(acc, r0, n0);
  warp_tile_each(acc, [&](int r, int j, float v) {
    X[(r0 + r) * STRIDE + n0 + j] = v;
    store_split(v, Xh, Xl, (r0 + r) * STRIDE + n0 + j);
  });
}

}  // namespace kiln::cuda
