// The CPU implementations of each facet, one class per facet (each in its own .cc).
#pragma once

#include "backend/facets.h"
#include "backend/training_facets.h"

namespace kiln::cpu {

class Storage final : public StorageFacet {
 public:
  KILN_STORAGE_OVERRIDES
};

class Linear final : public LinearFacet {
 public:
  KILN_LINEAR_OVERRIDES
  Status lora_delta(const LoraDeltaArgs& a) override;  // lora_delta.cc
};

class Norm final : public NormFacet {
 public:
  KILN_NORM_OVERRIDES
};

class Attention final : public AttentionFacet {
 public:
  KILN_ATTENTION_OVERRIDES
};

class Conv final : public ConvFacet {
 public:
  KILN_CONV_OVERRIDES
};

class Gdn final : public GdnFacet {
 public:
  KILN_GDN_OVERRIDES
};

class Elementwise final : public ElementwiseFacet {
 public:
  KILN_ELEMENTWISE_OVERRIDES
};

class Sampling final : public SamplingFacet {
 public:
  KILN_SAMPLING_OVERRIDES
  Status sample(const SampleArgs& a) override;  // sample.cc
};

// The backward ops (training_*.cc).
class Training final : public TrainingFacet {
 public:
  KILN_TRAINING_OVERRIDES
};

class Optimizer final : public OptimizerFacet {
 public:
  KILN_OPTIMIZER_OVERRIDES
};

}  // namespace kiln::cpu
