// What a LoRA training job holds on the device at its peak, estimated from the model's shape, the
// adapter, the optimizer and the sequences of its largest step: the one figure the server sizes
// its K/V pool around (a job of training.reserve_* shape) and admits a job against (docs/cuda.md,
// "Memory limit"). Each part follows what LoraTrainer and run_training allocate; the weights,
// already resident, are not in it.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "backend/training_facets.h"
#include "model/config.h"
#include "model/lora_config.h"

namespace kiln {

struct TrainSpec;

struct TrainJobShape {
  std::vector<int64_t> sequence_tokens;  // the sequences of the job's largest step, each >= 2 tokens
  LoraConfig lora;                       // rank, targets (empty: every target) and layers
  OptimizerKind optimizer = OptimizerKind::kMuon;
  DType kv_dtype = DType::kBF16;         // of the pass's K/V blocks (Qwen35Model::kv_dtype)
  int64_t trace_budget_bytes = 0;        // TrainerOptions::trace_budget_bytes: traces kept on top
};

// Bytes, by part; total() is the job's peak.
struct TrainMemoryEstimate {
  int64_t adapter = 0;      // f32 factors, their gradients and the optimizer's state (Muon 1, AdamW 2, SGD 0 copies)
  int64_t state = 0;        // the pass's K/V blocks and GDN state slots, one of each a sequence
  int64_t residuals = 0;    // [tokens, hidden] f32: every layer's checkpoint, the last layer's output, the final norm's
  int64_t layer = 0;        // the largest layer's internals (LayerTrace), its recomputed output and its backward's scratch
  int64_t logits = 0;       // the LM head's vocabulary chunk (token log-probabilities and their backward)
  int64_t traces = 0;       // the trace budget
  int64_t total() const { return adapter + state + residuals + layer + logits + traces; }
  // "4.70 GiB (adapter 0.34, K/V and GDN state 0.17, residuals 1.30, one layer 2.63, logits 0.25, traces 0.00)"
  std::string describe() const;
};

TrainMemoryEstimate estimate_train_memory(const ModelConfig& config, const TrainJobShape& shape);

// The rows (examples) of the largest micro-batch `spec` can take: its batch_sequences longest
// sequences (GRPO: whole groups, so at least its largest group's completions), whatever order
// the seed gives them. Packed (pack_tokens), a shape no micro-batch of its plan exceeds in rows,
// tokens or longest example: as many rows as the fullest, then rows of the most tokens any holds.
std::vector<int64_t> largest_step_tokens(const TrainSpec& spec);

}  // namespace kiln
