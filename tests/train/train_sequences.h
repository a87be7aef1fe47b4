// What the trainer tests (CPU and CUDA) share: pseudo-random token sequences whose tokens from
// `first_target` on are targets, and SFT's loss coefficients for them.
#pragma once

#include <cstdint>
#include <vector>

#include "train/lora_trainer.h"

namespace kiln::testing {

inline std::vector<TrainSequence> random_sequences(int64_t vocab, const std::vector<int64_t>& lengths,
                                                   int64_t first_target, uint32_t seed) {
  std::vector<TrainSequence> out;
  uint32_t x = seed;
  for (int64_t n : lengths) {
    TrainSequence s;
    for (int64_t t = 0; t < n; ++t) {
      x = x * 1103515245u + 12345u;
      s.tokens.push_back(static_cast<int32_t>((x >> 8) % vocab));
      s.roles.push_back(t >= first_target ? TokenRole::kTarget : TokenRole::kContext);
    }
    out.push_back(std::move(s));
  }
  return out;
}

// SFT's coefficients: dLoss/dlogp = -1/n on each of the n target tokens.
inline std::vector<std::vector<float>> sft_coef(const std::vector<TrainSequence>& seqs) {
  int64_t n = 0;
  for (const auto& s : seqs)
    for (size_t t = 1; t < s.roles.size(); ++t) n += s.roles[t] == TokenRole::kTarget;
  std::vector<std::vector<float>> c;
  for (const auto& s : seqs) {
    c.emplace_back(s.tokens.size(), 0.f);
    for (size_t t = 1; t < s.roles.size(); ++t)
      if (s.roles[t] == TokenRole::kTarget) c.back()[t] = -1.f / static_cast<float>(n);
  }
  return c;
}

}  // namespace kiln::testing
