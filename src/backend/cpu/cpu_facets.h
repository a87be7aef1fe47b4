// The CPU implementations of each facet, one class per facet (each in its own .cc).
#pragma once

#include "backend/facets.h"
#include "backend/training_facets.h"

namespace kiln::cpu {

class Storage final : public StorageFacet {
 public:
  Result<Tensor> allocate(Shape shape, DType dtype) override;
  Result<Tensor> upload(const Tensor& host) override;
  Status copy_from_host(const Tensor& host_src, const Tensor& dst) override;
  Status copy_to_host(const Tensor& src, const Tensor& host_dst) override;
  Status zero(const Tensor& dst) override;
  Status copy(const Tensor& src, const Tensor& dst) override;
  Status synchronize() override { return {}; }
};

class Linear final : public LinearFacet {
 public:
  Support supports(const MatmulRequest& r) const override;
  Status matmul(const MatmulArgs& a) override;
  Status lora_delta(const LoraDeltaArgs& a) override;  // lora_delta.cc
};

class Norm final : public NormFacet {
 public:
  Support supports(const NormRequest& r) const override;
  Status rms_norm(const NormArgs& a) override;
};

class Attention final : public AttentionFacet {
 public:
  Support supports(const RopeRequest& r) const override;
  Support supports(const KvWriteRequest& r) const override;
  Support supports(const AttentionRequest& r) const override;
  Status rope(const RopeArgs& a) override;
  Status write_kv(const KvWriteArgs& a) override;
  Status attend(const AttentionArgs& a) override;
};

class Conv final : public ConvFacet {
 public:
  Support supports(const ConvRequest& r) const override;
  Status causal_conv1d(const ConvArgs& a) override;
};

class Gdn final : public GdnFacet {
 public:
  Support supports(const GdnRequest& r) const override;
  Status delta_rule(const GdnArgs& a) override;
};

class Elementwise final : public ElementwiseFacet {
 public:
  Support supports(const ElementwiseRequest& r) const override;
  Status embed(const EmbedArgs& a) override;
  Status binary(const BinaryArgs& a) override;
};

class Sampling final : public SamplingFacet {
 public:
  Support supports(const SampleRequest& r) const override;
  Status argmax(const ArgmaxArgs& a) override;
  Status sample(const SampleArgs& a) override;  // sample.cc
};

// The backward ops (training_*.cc).
class Training final : public TrainingFacet {
 public:
  Support supports(const TrainRequest& r) const override;
  Status gemm(const GemmArgs& a) override;
  Status norm_backward(const NormBackwardArgs& a) override;
  Status silu_mul_backward(const SiluMulBackwardArgs& a) override;
  Status rope_backward(const RopeBackwardArgs& a) override;
  Status attention_backward(const AttentionBackwardArgs& a) override;
  Status conv_backward(const ConvBackwardArgs& a) override;
  Status gdn_backward(const GdnBackwardArgs& a) override;
  Status token_logprobs(const TokenLogprobArgs& a) override;
  Status token_logprobs_backward(const TokenLogprobBackwardArgs& a) override;
};

class Optimizer final : public OptimizerFacet {
 public:
  Support supports(const OptimizerRequest& r) const override;
  Status step(const OptimizerStepArgs& a) override;
};

}  // namespace kiln::cpu
