// Greedy selection on the device: per row, the index of the largest logit (the first on ties;
// NaN never wins; a row of NaN yields 0), among the ids its mask allows where it has one, as the
// CPU reference. A row is split into chunks of
// kArgmaxChunk logits, one block each; the last block of a row to finish (counted in
// `counters`, which it resets to zero) reduces the row's partial results in chunk order, so the
// result does not depend on which block finishes when.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "backend/cuda/kernels/strided.h"
#include "core/status.h"

namespace kiln::cuda {

constexpr int64_t kArgmaxChunk = 8192;
inline int64_t argmax_chunks(int64_t vocab) { return (vocab + kArgmaxChunk - 1) / kArgmaxChunk; }

struct ArgmaxParams {
  int64_t rows = 0, vocab = 0;
  Rows<const float> logits;
  int32_t* ids = nullptr;  // [rows]
  // Structured output (null: none): per row, the offset into `masks` of its allowed-id bitmask
  // ((vocab + 31) / 32 words), or -1 for all ids.
  const int32_t* mask_offsets = nullptr;
  const uint32_t* masks = nullptr;
  // Where a row takes more than one chunk: [rows, argmax_chunks(vocab)] partial results, and
  // [rows] counters that are zero before the launch (and are again after it).
  float* part_values = nullptr;
  int32_t* part_indices = nullptr;
  unsigned* counters = nullptr;
};

Status argmax(const ArgmaxParams& p, cudaStream_t stream);

}  // namespace kiln::cuda
