// Warpgroup-level bf16 products on Hopper's tensor cores (wgmma, sm_90a): a warpgroup (4 warps,
// 128 threads) computes D (64 x N, f32, in registers) += A (64 x 16) B (16 x N), both operands read
// by the tensor cores from shared memory through matrix descriptors, asynchronously.
//
// Operand layout (the only one used here): K-major rows of 64 bf16 (128 bytes), swizzled in the
// 128-byte mode: within each 1024-byte atom of 8 rows, the 16-byte chunk c of row r lies at chunk
// c ^ (r % 8). Atoms follow each other (stride 1024 bytes), the tile starts 1024-byte aligned, and
// the k16 slice s of the 64 starts 32 s bytes into the row (the hardware applies the swizzle to
// the address it forms). `swizzled_chunk` says where a copy puts a chunk.
//
// Accumulator layout of m64nNk16: warp w of the warpgroup, lane l (g = l / 4, q = l % 4) holds
// rows 16 w + g and 16 w + g + 8, columns 8 i + 2 q and 8 i + 2 q + 1 of each 8-wide slice i:
// d[4 i] (row g, col), d[4 i + 1] (g, col + 1), d[4 i + 2] (g + 8, col), d[4 i + 3] (g + 8, col + 1)
// (the mma.sync m16n8 C layout, per warp and slice).
//
// Order: wgmma_fence() before the first product of a batch (after the accumulators or the shared
// operands were written by ordinary instructions; copies landed by cp.async also need
// fence_proxy_async() by the copying threads, then a barrier), wgmma_commit() after the batch,
// wgmma_wait<n>() before the accumulators are read or the operands overwritten.
#pragma once

#include <cstdint>

namespace kiln::cuda {

// Byte offset within a 128-byte-swizzled tile of 16-byte chunk c (0..7) of row r.
__host__ __device__ constexpr uint32_t swizzled_chunk(int r, int c) {
  return static_cast<uint32_t>(r) * 128u + (static_cast<uint32_t>(c ^ (r & 7)) << 4);
}

#ifdef __CUDACC__
// The descriptor of a K-major, 128-byte-swizzled operand starting at `tile` (shared memory): start
// address, leading byte offset 16 (unused in this mode), stride byte offset 1024 (one 8-row atom
// to the next), swizzle mode 1 (128 bytes).
__device__ __forceinline__ uint64_t wgmma_desc(const void* tile) {
  const uint64_t addr = static_cast<uint32_t>(__cvta_generic_to_shared(tile));
  return ((addr & 0x3FFFF) >> 4) | (uint64_t{16 >> 4} << 16) | (uint64_t{1024 >> 4} << 32) | (uint64_t{1} << 62);
}

__device__ __forceinline__ void wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
template <int N>
__device__ __forceinline__ void wgmma_wait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory");
}
// Makes this thread's generic-proxy writes to shared memory (stores, cp.async copies that have
// landed) visible to the tensor cores' reads (the async proxy).
__device__ __forceinline__ void fence_proxy_async() { asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory"); }

// Keeps the compiler from moving accesses of the accumulators across an asynchronous product
// (they are in flight between the wgmma and its wait).
template <int R>
__device__ __forceinline__ void wgmma_hold(float (&d)[R]) {
#pragma unroll
  for (int i = 0; i < R; ++i) asm volatile("" : "+f"(d[i])::"memory");
}

// d (+)= A B, m64nNk16 with N = 2 R (R accumulators a thread), A and B descriptors (wgmma_desc).
// The predicate keeps d (scale-d 1); the operands are neither negated nor transposed (K-major).
__device__ __forceinline__ void wgmma_bf16(float (&d)[8], uint64_t a, uint64_t b) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %10, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n16k16.f32.bf16.bf16 {"
      "%0, %1, %2, %3, %4, %5, %6, %7"
      "}, %8, %9, p, 1, 1, 0, 0;\n}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7])
      : "l"(a), "l"(b), "r"(1));
}

__device__ __forceinline__ void wgmma_bf16(float (&d)[16], uint64_t a, uint64_t b) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %18, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n32k16.f32.bf16.bf16 {"
      "%0, %1, %2, %3, %4, %5, %6, %7, "
      "%8, %9, %10, %11, %12, %13, %14, %15"
      "}, %16, %17, p, 1, 1, 0, 0;\n}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
        "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15])
      : "l"(a), "l"(b), "r"(1));
}

__device__ __forceinline__ void wgmma_bf16(float (&d)[32], uint64_t a, uint64_t b) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 {"
      "%0, %1, %2, %3, %4, %5, %6, %7, "
      "%8, %9, %10, %11, %12, %13, %14, %15, "
      "%16, %17, %18, %19, %20, %21, %22, %23, "
      "%24, %25, %26, %27, %28, %29, %30, %31"
      "}, %32, %33, p, 1, 1, 0, 0;\n}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
        "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
        "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
        "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
      : "l"(a), "l"(b), "r"(1));
}
#endif

}  // namespace kiln::cuda
