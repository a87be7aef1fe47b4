// The LoRA deltas of one forward, unmerged: the batch's rows grouped into runs of consecutive
// tokens that share a stack of adapters, and per targeted projection
// y[run] += sum_j weight_j * scale_j * (x[run] A_j^T) B_j^T: one segment per (run, adapter) and
// one LinearFacet::lora_delta call for the whole batch (CUDA: two kernel launches for a decode
// batch, whatever the number of adapters).
#pragma once

#include <span>
#include <vector>

#include "backend/backend.h"
#include "model/lora_adapter.h"
#include "model/qwen35.h"

namespace kiln {

class LoraBatch {
 public:
  LoraBatch() = default;  // no adapters: apply() does nothing

  // Checks every row's stack (adapters present, made for this model's layer count, finite weights)
  // and groups the rows into runs.
  static Result<LoraBatch> create(std::span<const SequenceInput> rows, const ModelConfig& model, Backend& backend);

  bool empty() const { return runs_.empty(); }
  // out += the delta of projection `target` in `layer` for the tokens of every run whose stack
  // adapts it. `x` [tokens, in] is the projection's input, `out` [tokens, out] its output (rows
  // may be strided), both over the whole batch in row order. `keep_u`, where given, receives
  // x A^T when one adapter covers every token (a traced forward: the trainer's), else stays unset.
  Status apply(LoraTarget target, int64_t layer, const Tensor& x, const Tensor& out, Tensor* keep_u = nullptr);

 private:
  struct Run {
    int64_t begin = 0, end = 0;        // tokens [begin, end) of the batch
    std::span<const LoraTerm> stack;   // the rows' adapters
  };
  Backend* backend_ = nullptr;
  std::vector<Run> runs_;
  std::vector<LoraSegment> segments_;  // apply()'s, kept to reuse its capacity
};

}  // namespace kiln
