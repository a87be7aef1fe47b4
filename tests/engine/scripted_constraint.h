// A token constraint for engine tests: it allows, at the k-th token, the ids of
// allowed[min(k, last)], refuses any other id in accept(), and records what it was told.
#pragma once

#include <algorithm>
#include <set>
#include <span>
#include <string>
#include <vector>

#include "engine/token_constraint.h"

namespace kiln::testing {

class ScriptedConstraint final : public TokenConstraint {
 public:
  ScriptedConstraint(std::vector<std::set<int32_t>> allowed, bool cheap = true)
      : allowed_(std::move(allowed)), cheap_(cheap) {}
  Status fill_mask(std::span<uint32_t> words) override {
    std::fill(words.begin(), words.end(), 0u);
    for (int32_t id : current()) words[static_cast<size_t>(id) >> 5] |= 1u << (id & 31);
    ++fills;
    return {};
  }
  Status accept(int32_t token) override {
    if (!current().count(token)) return invalid_argument("token " + std::to_string(token) + " was not allowed");
    accepted.push_back(token);
    return {};
  }
  bool mask_is_cheap() const override { return cheap_; }

  std::vector<int32_t> accepted;
  int fills = 0;

 private:
  const std::set<int32_t>& current() const { return allowed_[std::min(accepted.size(), allowed_.size() - 1)]; }
  std::vector<std::set<int32_t>> allowed_;
  bool cheap_;
};

}  // namespace kiln::testing
