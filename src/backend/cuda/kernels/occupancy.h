// How many blocks of a kernel the device holds at once: the occupancy API, asked once per
// (kernel, block size, shared memory, cluster size) and cached. Persistent kernels size their grid
// by it (gdn_decode.cu); split choices compare against it (skinny_gemm.cu).
#pragma once

#include <cstddef>

namespace kiln::cuda {

// Blocks of `kernel` (`threads` a block, `smem` bytes of dynamic shared memory) resident on the
// current device at once, launched in clusters of `cluster` blocks; 0 where none fits (or the
// query fails: that shape is then just not taken).
int resident_blocks(const void* kernel, int threads, size_t smem, int cluster = 1);

}  // namespace kiln::cuda
