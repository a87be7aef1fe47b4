#include "model/tiled_prefill.h"

#include <algorithm>
#include <string>
#include <vector>

#include "model/state.h"

namespace kiln {

Result<PrefillTiling> resolve_prefill_tiling(const BackendCapabilities::StreamingPrefill& policy,
                                             int64_t forced_tile) {
  constexpr int64_t kAlign = ModelState::kBlockSize;
  if (forced_tile > 0) {
    if (forced_tile % kAlign != 0)
      return invalid_argument("forward: ForwardOptions::prefill_tile is " + std::to_string(forced_tile) +
                              ", not a multiple of " + std::to_string(kAlign) +
                              " (the K/V block and GDN chunk); 0 runs untiled, -1 follows the backend's policy");
    // A row of at most one tile runs in one pass either way.
    return PrefillTiling{forced_tile + 1, forced_tile};
  }
  if (forced_tile < -1)
    return invalid_argument("forward: ForwardOptions::prefill_tile is " + std::to_string(forced_tile) +
                            "; expected -1 (the backend's policy), 0 (untiled) or a positive multiple of " +
                            std::to_string(kAlign));
  if (forced_tile == 0 || !policy.tiled) return PrefillTiling{};
  if (policy.tile_tokens <= 0 || policy.tile_tokens % kAlign != 0)
    return invalid_argument("forward: the backend's streaming_prefill.tile_tokens is " +
                            std::to_string(policy.tile_tokens) + ", not a positive multiple of " +
                            std::to_string(kAlign));
  return PrefillTiling{policy.auto_threshold_tokens, policy.tile_tokens};
}

int64_t prefill_tile_for(std::span<const SequenceInput> rows, const PrefillTiling& t) {
  if (t.tile <= 0) return 0;
  for (const auto& r : rows) {
    const auto n = static_cast<int64_t>(r.tokens.size());
    if (n >= t.threshold && n > t.tile) return t.tile;
  }
  return 0;
}

Result<Tensor> tiled_prefill(std::span<const SequenceInput> rows, LogitsMode mode, int64_t tile, int64_t vocab,
                             StorageFacet& storage, const PrefillPassFn& pass) {
  if (tile <= 0) return invalid_argument("tiled_prefill: tile " + std::to_string(tile) + " is not positive");
  const auto R = static_cast<int64_t>(rows.size());
  // first[r]: where row r's tokens start in the untiled token order (kAll's output rows).
  std::vector<int64_t> first(static_cast<size_t>(R)), done(static_cast<size_t>(R), 0);
  int64_t total = 0;
  for (int64_t r = 0; r < R; ++r) {
    if (rows[r].tokens.empty()) return invalid_argument("forward: a row has no tokens");
    first[r] = total;
    total += static_cast<int64_t>(rows[r].tokens.size());
  }
  KILN_ASSIGN_OR_RETURN(Tensor out, storage.allocate({mode == LogitsMode::kLast ? R : total, vocab}, DType::kF32));
  std::vector<SequenceInput> part;
  std::vector<int64_t> source;  // the input row of each row of `part`
  for (;;) {
    part.clear();
    source.clear();
    for (int64_t r = 0; r < R; ++r) {
      const auto left = static_cast<int64_t>(rows[r].tokens.size()) - done[r];
      if (left == 0) continue;
      const auto n = static_cast<size_t>(std::min(tile, left));
      const auto at = static_cast<size_t>(done[r]);
      SequenceInput in{rows[r].seq, rows[r].tokens.subspan(at, n), rows[r].lora};
      if (!rows[r].score_targets.empty()) {  // the scores of this pass's tokens
        in.score_targets = rows[r].score_targets.subspan(at, n);
        in.scores = rows[r].scores.subspan(at, n);
      }
      part.push_back(in);
      source.push_back(r);
    }
    if (part.empty()) break;
    KILN_ASSIGN_OR_RETURN(Tensor logits, pass(part, mode));
    // Each row's slice of this pass goes where the untiled forward would have put it.
    int64_t t = 0;
    for (size_t i = 0; i < part.size(); ++i) {
      const int64_t r = source[i], n = static_cast<int64_t>(part[i].tokens.size());
      if (mode == LogitsMode::kAll) {
        const int64_t at = first[r] + done[r];
        KILN_RETURN_IF_ERROR(storage.copy(logits.slice(0, t, t + n), out.slice(0, at, at + n)));
      } else if (done[r] + n == static_cast<int64_t>(rows[r].tokens.size())) {
        const auto p = static_cast<int64_t>(i);
        KILN_RETURN_IF_ERROR(storage.copy(logits.slice(0, p, p + 1), out.slice(0, r, r + 1)));
      }
      t += n;
      done[r] += n;
    }
  }
  return out;
}

}  // namespace kiln
