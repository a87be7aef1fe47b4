// The elementwise and row-wise steps of the attention backward (the GEMMs between them are
// cuBLAS calls in training_attention.cc). One call works on a chunk of one row of the layout:
// kv heads [j0, j0 + hb), query heads [i0, i0 + gi) of each kv head's group, query positions
// [t0, t0 + tq) (keys 0 .. t0 + tq - 1). The chunk's scratch rows are ordered (kv head, query
// head, position): the `gi * tq` rows of one kv head are adjacent, so one GEMM against that kv
// head's K or V serves its whole group, and dK = dS^T Q sums over the group by itself.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "backend/cuda/kernels/strided.h"
#include "core/status.h"

namespace kiln::cuda {

// Scratch row r of a chunk <-> (token, head) of the call's [tokens, heads, head_dim] tensors:
// r = ((jj * gi) + ii) * tq + tt  is  head (j0 + jj) * group + i0 + ii  at token begin + t0 + tt.
// With group = 1, gi = 1, i0 = 0, t0 = 0 it maps a whole row's [heads, tokens] (K and V).
struct AttnRowMap {
  int64_t begin = 0;      // the row's first token
  int64_t t0 = 0, tq = 1; // positions [t0, t0 + tq) of the row
  int64_t j0 = 0, group = 1, i0 = 0, gi = 1;
};

// dst[r, :] = src(token(r), head(r), :) for rows r < rows; dst contiguous [rows, head_dim].
Status attention_gather(Heads<float> src, const AttnRowMap& map, int64_t rows, int64_t head_dim, float* dst,
                        cudaStream_t stream);
// dst(token(r), head(r), :) = src[r, :]: the inverse.
Status attention_scatter(const float* src, const AttnRowMap& map, int64_t rows, int64_t head_dim, Heads<float> dst,
                         cudaStream_t stream);

struct AttnChunkParams {
  AttnRowMap map;
  int64_t rows = 0;      // hb * gi * tq
  int64_t keys = 0;      // t0 + tq: the width of the score matrices
  int64_t head_dim = 0;
  float scale = 1.f;
  float* p = nullptr;    // [rows, keys]: scale * q k^T in, causal softmax out
  float* ds = nullptr;   // [rows, keys]: dP = dO v^T in, dS = P (dP - Di) * scale out
  const float* o = nullptr;  // [rows, head_dim]: the ungated attention output
  float* dout = nullptr;     // [rows, head_dim]: the gradient of the gated output in, dO out
  float* di = nullptr;       // [rows]: rowsum(dO * O)
  Heads<float> gate, dgate;  // gate.ptr null: no gate
};

// P = softmax over keys 0..t of each row (t = the row's position), zero beyond t.
Status attention_causal_softmax(const AttnChunkParams& p, cudaStream_t stream);
// With a gate: dgate = dout * o * s (1 - s), dO = dout * s, s = sigmoid(gate); Di = rowsum(dO * o).
Status attention_output_grad(const AttnChunkParams& p, cudaStream_t stream);
// dS = P * (dP - Di) * scale, in place over dP.
Status attention_score_grad(const AttnChunkParams& p, cudaStream_t stream);

}  // namespace kiln::cuda
