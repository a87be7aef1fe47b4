// Streaming (tiled) prefill (docs/ARCHITECTURE.md, "One forward"): a forward whose batch holds a
// long prompt runs as successive passes of at most a tile of each row's tokens, so its activations
// scale with the tile, not the prompt. Each pass continues the rows' state as the engine's chunked
// prefill does.
#pragma once

#include <cstdint>
#include <functional>
#include <span>

#include "backend/capabilities.h"
#include "backend/facets.h"
#include "model/qwen35.h"

namespace kiln {

struct PrefillTiling {
  int64_t threshold = 0;  // a row of at least this many new tokens makes the forward tiled
  int64_t tile = 0;       // new tokens of each row per pass; 0: never tiled
};

// The tiling a forward uses: the backend's policy, or the forced `ForwardOptions::prefill_tile`
// (0: never; N > 0: passes of N tokens for any batch with a row longer than N). Tiles must be
// multiples of the 64-token K/V block, which is also the GDN chunk, so that passes end on the
// boundaries an untiled forward has.
Result<PrefillTiling> resolve_prefill_tiling(const BackendCapabilities::StreamingPrefill& policy,
                                             int64_t forced_tile);

// The tile the passes of `rows` use under `t`, or 0 when the batch runs in one pass.
int64_t prefill_tile_for(std::span<const SequenceInput> rows, const PrefillTiling& t);

// One pass of a tiled forward: an untiled forward of `rows` (each row the next <= tile tokens of
// an unfinished row of the batch), advancing their sequences; logits as forward_on_device's.
using PrefillPassFn = std::function<Result<Tensor>(std::span<const SequenceInput> rows, LogitsMode mode)>;

// Runs `rows` as passes of at most `tile` tokens a row through `pass` and returns logits laid out
// as one untiled forward's: kLast one row per input row (from its final pass), kAll every token in
// input order; a row's score_targets and scores are split with its tokens. The result is
// allocated through `storage` (where the passes' logits live). A pass that fails leaves the rows
// advanced by the passes before it.
Result<Tensor> tiled_prefill(std::span<const SequenceInput> rows, LogitsMode mode, int64_t tile, int64_t vocab,
                             StorageFacet& storage, const PrefillPassFn& pass);

}  // namespace kiln
