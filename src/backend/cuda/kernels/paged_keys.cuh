// Where a row's key j lives in the paged K/V cache: the row's block table names the cache block
// of keys j / block_size. Every attention kernel that reads the cache finds its keys here, in
// 32-bit arithmetic (a shift for the power-of-two block sizes the engine uses): 64-bit divisions
// once per key were a third of the decode kernel's non-FMA instructions.
#pragma once

#include <cstdint>

namespace kiln::cuda {

#ifdef __CUDACC__
// log2(n) where n is a power of two, else -1.
__device__ __forceinline__ int log2_if_pow2(uint32_t n) { return (n & (n - 1)) == 0 ? __ffs(static_cast<int>(n)) - 1 : -1; }

struct PagedKeys {
  const int32_t* table;
  int64_t cache_blocks;
  uint32_t block_size;  // a row's keys are far below 2^32
  int shift;            // log2(block_size) where it is a power of two, else -1

  // Params: any launch parameters with block_tables, max_blocks, cache_blocks and block_size
  // (PagedAttentionParams, FlashPrefillParams).
  template <typename Params>
  __device__ PagedKeys(const Params& p, int64_t row)
      : table(p.block_tables + row * p.max_blocks),
        cache_blocks(p.cache_blocks),
        block_size(static_cast<uint32_t>(p.block_size)),
        shift(log2_if_pow2(block_size)) {}

  // The cache token slot of key j (its block * block_size + j % block_size), or -1 where the
  // table names no block of the cache.
  __device__ __forceinline__ int64_t slot(int64_t j) const {
    const uint32_t jj = static_cast<uint32_t>(j);
    const uint32_t b = shift >= 0 ? jj >> shift : jj / block_size, within = jj - b * block_size;
    const int64_t block = table[b];
    return block >= 0 && block < cache_blocks ? block * block_size + within : -1;
  }
};
#endif

}  // namespace kiln::cuda
