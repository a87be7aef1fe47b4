// The training and optimizer facets of a backend that cannot train yet: every request declined,
// and every call refused with kUnsupported, naming the request and `why`. Under a strict
// fallback policy a training job on such a backend fails at its first op instead of running
// anywhere else.
#pragma once

#include <string>

#include "backend/training_facets.h"

namespace kiln {

class DecliningTraining final : public TrainingFacet {
 public:
  explicit DecliningTraining(std::string why) : why_(std::move(why)) {}
  Support supports(const TrainRequest&) const override { return Support::declined(why_); }
  Status gemm(const GemmArgs& a) override { return refuse(a); }
  Status norm_backward(const NormBackwardArgs& a) override { return refuse(a); }
  Status silu_mul_backward(const SiluMulBackwardArgs& a) override { return refuse(a); }
  Status rope_backward(const RopeBackwardArgs& a) override { return refuse(a); }
  Status attention_backward(const AttentionBackwardArgs& a) override { return refuse(a); }
  Status conv_backward(const ConvBackwardArgs& a) override { return refuse(a); }
  Status gdn_backward(const GdnBackwardArgs& a) override { return refuse(a); }
  Status token_logprobs(const TokenLogprobArgs& a) override { return refuse(a); }
  Status token_logprobs_backward(const TokenLogprobBackwardArgs& a) override { return refuse(a); }

 private:
  template <class Args>
  Status refuse(const Args& a) const { return unsupported("declined " + describe(a).describe() + ": " + why_); }
  std::string why_;
};

class DecliningOptimizer final : public OptimizerFacet {
 public:
  explicit DecliningOptimizer(std::string why) : why_(std::move(why)) {}
  Support supports(const OptimizerRequest&) const override { return Support::declined(why_); }
  Status step(const OptimizerStepArgs& a) override {
    return unsupported("declined " + describe(a).describe() + ": " + why_);
  }
  Result<double> sum_squares(std::span<const Tensor> tensors) override {
    return unsupported("declined the sum of squares of " + std::to_string(tensors.size()) + " tensors: " + why_);
  }

 private:
  std::string why_;
};

}  // namespace kiln
