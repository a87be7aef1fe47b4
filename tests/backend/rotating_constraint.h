// A token constraint for backend tests of structured-output sampling: it allows at the k-th token
// the 24 ids (k * 37 + j * 11) % vocab, j < 24 (a mask that changes every token), and accept()
// refuses any other id, so a token outside the mask fails its request.
#pragma once

#include <algorithm>
#include <cstdint>
#include <span>
#include <string>

#include "engine/token_constraint.h"

namespace kiln::testing {

class RotatingConstraint final : public TokenConstraint {
 public:
  explicit RotatingConstraint(int64_t vocab) : vocab_(vocab) {}
  Status fill_mask(std::span<uint32_t> words) override {
    std::fill(words.begin(), words.end(), 0u);
    for (int64_t j = 0; j < 24; ++j) {
      const int64_t id = allowed(j);
      words[static_cast<size_t>(id >> 5)] |= 1u << (id & 31);
    }
    return {};
  }
  Status accept(int32_t token) override {
    for (int64_t j = 0; j < 24; ++j)
      if (allowed(j) == token) {
        ++k_;
        return {};
      }
    return invalid_argument("token " + std::to_string(token) + " is outside the mask of step " + std::to_string(k_));
  }
  bool mask_is_cheap() const override { return true; }

 private:
  int64_t allowed(int64_t j) const { return (k_ * 37 + j * 11) % vocab_; }
  int64_t vocab_;
  int64_t k_ = 0;
};

}  // namespace kiln::testing
