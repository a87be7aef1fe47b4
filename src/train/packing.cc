#include "train/packing.h"

namespace kiln {

std::vector<std::vector<size_t>> pack_in_order(std::span<const size_t> order, std::span<const int64_t> lengths,
                                               int64_t max_tokens) {
  std::vector<std::vector<size_t>> runs;
  int64_t used = 0;
  for (size_t idx : order) {
    const int64_t n = lengths[idx];
    if (runs.empty() || used + n > max_tokens) {
      runs.emplace_back();
      used = 0;
    }
    runs.back().push_back(idx);
    used += n;
  }
  return runs;
}

TrainSequence pack_sequences(std::span<const TrainSequence* const> examples) {
  TrainSequence out;
  for (const TrainSequence* e : examples) {
    const size_t at = out.tokens.size();
    out.tokens.insert(out.tokens.end(), e->tokens.begin(), e->tokens.end());
    out.roles.insert(out.roles.end(), e->roles.begin(), e->roles.end());
    if (e->packed.empty()) {
      out.packed.push_back(static_cast<int64_t>(e->tokens.size()));
    } else {
      out.packed.insert(out.packed.end(), e->packed.begin(), e->packed.end());
    }
    size_t start = at;
    for (size_t k = out.packed.size() - (e->packed.empty() ? 1 : e->packed.size()); k < out.packed.size(); ++k) {
      out.roles[start] = TokenRole::kContext;
      start += static_cast<size_t>(out.packed[k]);
    }
  }
  return out;
}

}  // namespace kiln
