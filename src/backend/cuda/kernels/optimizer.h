// The optimizer steps of docs/training.md ("Optimizers") on contiguous f32 device parameters, in
// place on param and its state, computing what cpu/optimizer.cc computes: SGD, AdamW (the bias
// corrections come in from the host, in double) and Muon, whose Newton-Schulz-5 runs in the Gram
// space of the smaller side s (<= kMuonMaxRank) with the Gram products, the polynomial and the
// update accumulated in double and the iterate rounded to f32 after each step, as the CPU does. The
// norm is reduced on the device: no host round trip. Each reads the gradient times `grad_scale`
// (rounded once, as the CPU rounds it; 1 is exact).
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "core/status.h"

namespace kiln::cuda {

constexpr int64_t kMuonMaxRank = 256;

// p = p * decay - lr * g.
struct SgdParams {
  int64_t n = 0;
  float* param = nullptr;
  const float* grad = nullptr;
  float lr = 0.f, decay = 1.f, grad_scale = 1.f;
};
Status sgd_step(const SgdParams& p, cudaStream_t stream);

// m = b1 m + (1 - b1) g, v = b2 v + (1 - b2) g^2, p = p * decay - lr (m / c1) / (sqrt(v / c2) + eps).
struct AdamWParams {
  int64_t n = 0;
  float* param = nullptr;
  const float* grad = nullptr;
  float* m = nullptr;
  float* v = nullptr;
  float lr = 0.f, decay = 1.f, beta1 = 0.9f, beta2 = 0.999f, eps = 1e-8f, grad_scale = 1.f;
  double c1 = 1.0, c2 = 1.0;  // 1 - beta^step
};
Status adamw_step(const AdamWParams& p, cudaStream_t stream);

// m = momentum m + g; b = nesterov ? g + momentum m : m; a matrix (rows, cols > 1) takes b
// through Newton-Schulz; p = p * decay - lr * gain * b.
struct MuonParams {
  int64_t rows = 0, cols = 0;
  float* param = nullptr;
  const float* grad = nullptr;
  float* m = nullptr;
  float lr = 0.f, decay = 1.f, momentum = 0.95f, gain = 1.f, grad_scale = 1.f;
  bool nesterov = true;
  int ns_steps = 5;
  void* scratch = nullptr;  // muon_scratch_bytes(rows, cols), 256-byte aligned
};
size_t muon_scratch_bytes(int64_t rows, int64_t cols);
Status muon_step(const MuonParams& p, cudaStream_t stream);

// The Muon steps of up to kMuonMaxGroup matrices (rows, cols > 1) of one shape and one set of
// scalars, one launch per kernel for them all; each matrix's arithmetic, and its order, is
// muon_step's. Scratch: count * muon_scratch_bytes(rows, cols), 256-byte aligned.
constexpr int kMuonMaxGroup = 64;
struct MuonGroup {
  MuonParams p;  // shape and scalars; its pointers are not read
  int count = 0;
  float* param[kMuonMaxGroup] = {};
  const float* grad[kMuonMaxGroup] = {};
  float* m[kMuonMaxGroup] = {};
  void* scratch = nullptr;
};
Status muon_step_group(const MuonGroup& g, cudaStream_t stream);

}  // namespace kiln::cuda
