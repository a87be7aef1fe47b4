// POST /v1/adapters/merge: several LoRA adapters of one model combined into one (docs/training-api.md).
// - concat: the factors stacked along the rank, each source's B scaled by weight * its scale:
//   the merged delta is exactly sum_k weight_k * delta_k (rank = sum of the sources' ranks).
// - weighted_average: concat with the weights divided by their sum (an exact weighted mean).
// - ties: per projection, the dense deltas weight_k * delta_k are trimmed to their largest
//   `density` fraction by magnitude, a sign is elected per element (the sign of the trimmed sum),
//   the entries agreeing with it are averaged, and the result is factored back to `rank` by a
//   truncated SVD (randomised range finder + exact eigen-decomposition of the small Gram matrix):
//   approximate, the best rank-r fit of the TIES delta.
// The merged adapter has lora_alpha = rank (scale 1), f32 factors, the union of the targets and layers.
// Host work only (HostLoraAdapter in, HostLoraAdapter out): a server runs it on the request's thread.
#pragma once

#include <string>
#include <vector>

#include "core/status.h"
#include "model/host_lora_adapter.h"

namespace kiln {

enum class MergeMethod : uint8_t { kConcat, kWeightedAverage, kTies };

struct MergeSource {
  const HostLoraAdapter* adapter = nullptr;
  std::string name;  // for errors
  double weight = 1.0;
};

struct MergeOptions {
  MergeMethod method = MergeMethod::kConcat;
  double density = 0.2;  // ties: the fraction of each delta's entries kept
  int64_t rank = 0;      // ties: the merged rank; 0: the largest source rank
};

Result<HostLoraAdapter> merge_adapters(const std::vector<MergeSource>& sources, const MergeOptions& options,
                                       const ModelConfig& model);

}  // namespace kiln
