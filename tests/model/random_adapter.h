// A LoRA adapter over every target projection whose B is drawn at random (LoraAdapter::init leaves
// B zero, so it would change nothing): the same factors, seed for seed, on whichever backend
// `storage` belongs to.
#pragma once

#include <gtest/gtest.h>

#include "model/lora_adapter.h"
#include "test_util.h"

namespace kiln::testing {

inline LoraAdapter random_adapter(const ModelConfig& config, StorageFacet& storage, uint64_t seed, int64_t rank = 4,
                                  double alpha = 8, float b_scale = 0.25f) {
  LoraConfig cfg;
  cfg.rank = rank;
  cfg.alpha = alpha;
  for (int t = 0; t < kLoraTargetCount; ++t) cfg.targets.push_back(static_cast<LoraTarget>(t));
  LoraAdapter ad = LoraAdapter::init(cfg, config, seed, storage).value();
  for (int64_t l = 0; l < ad.num_layers(); ++l)
    for (int t = 0; t < kLoraTargetCount; ++t) {
      LoraFactors& f = ad.factors(l, static_cast<LoraTarget>(t));
      if (!f.defined()) continue;
      Tensor b = random_tensor(f.b.shape(), static_cast<uint32_t>(seed * 100 + l * 10 + t), b_scale);
      EXPECT_TRUE(storage.copy_from_host(b, f.b).ok());
    }
  return ad;
}

}  // namespace kiln::testing
