// The CUDA training and optimizer facets (backend/training_facets.h): every backward op and the
// optimizer step run on the device, in order on the Context's stream. One .cc per concept:
//   training.cc            supports(): the per-op predicates below, dispatched by op
//   training_gemm.cc       gemm (cuBLAS; a bf16/f16 weight meets its f32 operand rounded to the
//                          weight's dtype, f32 x f32 stays f32) on Context::blas()
//   training_pointwise.cc  norm, silu-mul and RoPE backward (kernels/training_pointwise.cu)
//   training_conv.cc       conv1d backward (kernels/conv_backward.cu)
//   training_attention.cc  attention backward (kernels/attention_backward.cu + cuBLAS; the flash
//                          form in kernels/flash_backward.cu)
//   training_gdn.cc        gated delta rule backward (kernels/gdn_backward.cu)
//   training_logprobs.cc   fused linear log-probs and their backward (kernels/token_logprobs.cu + cuBLAS)
//   optimizer.cc           Muon, AdamW, SGD (kernels/optimizer.cu); the gradients' sum of squares
//                          (kernels/sum_squares.cu)
#pragma once

#include <cublas_v2.h>

#include <memory>
#include <mutex>

#include "backend/cuda/context.h"
#include "backend/cuda/kernels/optimizer.h"
#include "backend/training_facets.h"

namespace kiln::cuda {

class Training final : public TrainingFacet {
 public:
  explicit Training(std::shared_ptr<Context> ctx) : ctx_(std::move(ctx)) {}
  KILN_TRAINING_OVERRIDES

  // The per-op predicates supports() dispatches to, each defined beside its op.
  static Support supports_gemm(const TrainRequest& r);
  static Support supports_pointwise(const TrainRequest& r);  // norm, silu-mul, RoPE backward
  static Support supports_conv(const TrainRequest& r);
  static Support supports_attention(const TrainRequest& r);
  static Support supports_gdn(const TrainRequest& r);
  static Support supports_logprobs(const TrainRequest& r);    // both directions

 private:
  std::shared_ptr<Context> ctx_;
};

class Optimizer final : public OptimizerFacet {
 public:
  explicit Optimizer(std::shared_ptr<Context> ctx) : ctx_(std::move(ctx)) {}
  KILN_OPTIMIZER_OVERRIDES
  // Muon matrices grouped by shape and scalars (kernels/optimizer.h, MuonGroup); the rest one by one.
  Status step_many(std::span<const OptimizerStepArgs> args) override;

 private:
  // The checks of step(): the predicate, then validate_optimizer_step. Returns the request's text.
  Result<std::string> checked(const OptimizerStepArgs& a) const;
  MuonParams muon_params(const OptimizerStepArgs& a) const;
  std::shared_ptr<Context> ctx_;
};

}  // namespace kiln::cuda
