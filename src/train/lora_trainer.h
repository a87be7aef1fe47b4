// Gradients of a LoRA adapter through the whole Qwen3.5 forward, written against the backend's
// training facet: forward() computes every token's log-probability and keeps what backward()
// needs (the first layers' internals within a memory budget, and the residual stream at the
// boundaries of the rest, which backward() recomputes layer by layer);
// backward() takes dLoss/dlogp per token, so one engine serves SFT, GRPO and ECHO alike
// (train/token_loss.h turns log-probabilities into a loss and those coefficients).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <vector>

#include "model/lora_adapter.h"
#include "model/qwen35.h"

namespace kiln {

// One training sequence: the tokens of a conversation and, per token, what its prediction is for.
enum class TokenRole : uint8_t {
  kContext = 0,      // no loss (system, user, template tokens)
  kTarget = 1,       // assistant turn / completion: the SFT and GRPO loss
  kObservation = 2,  // environment output inside a rollout: ECHO's term
};
struct TrainSequence {
  std::vector<int32_t> tokens;   // at least 2
  std::vector<TokenRole> roles;  // one per token; roles[0] is ignored (nothing predicts it)
  // Several examples packed into one sequence (train/packing.h): their lengths in order, summing
  // to tokens.size(), each at least 2; empty: one example. The trainer runs each example as its
  // own row from position 0 with a fresh GDN and conv state and its own K/V, so nothing passes
  // from one to the next, and nothing predicts an example's first token (its logp is 0, its
  // coefficient ignored, as token 0's).
  std::vector<int64_t> packed;
};

// What a forward is for: kTrain runs with the adapter and keeps what backward() needs; kEval runs
// with the adapter and keeps nothing (a held-out loss); kReference runs without the adapter and
// keeps nothing (GRPO's KL reference).
enum class ForwardPass : uint8_t { kTrain, kEval, kReference };

struct TrainerOptions {
  int gdn_chunk = 64;  // of the GDN backward; the forward keeps the model's ForwardOptions (shared with serving)
  int64_t checkpoint_every = 1;  // layers per activation-checkpoint segment
  // Bytes of layer traces (each layer's internals and input) the forward may keep, so that the
  // backward need not recompute those layers: the first layers are traced while their traces fit,
  // the rest checkpointed. 0: every layer is recomputed (the least memory). Unset:
  // trace_memory_fraction of the memory the backend reports free when the trainer is created
  // (Backend::memory_usage; 0 where it reports none), so a card with room trains without
  // recomputation and a small one as before.
  std::optional<int64_t> trace_budget_bytes;
  double trace_memory_fraction = 0.5;  // [0, 1]: the config's training.trace_memory_fraction
};

class LoraTrainer {
 public:
  // `adapter` holds the trainable f32 factors (LoraAdapter::init); it and `model` must outlive
  // the trainer. Gradients are allocated shaped as the adapter's factors.
  static Result<std::unique_ptr<LoraTrainer>> create(Qwen35Model& model, LoraAdapter& adapter, TrainerOptions opts = {});
  virtual ~LoraTrainer() = default;

  // logp[s][t] = log p(tokens[t] | tokens[<t] of its example) for t >= 1 (0 at t = 0 and at each
  // packed example's first token), as `pass` says: with the adapter or without, keeping what
  // backward needs or not.
  virtual Result<std::vector<std::vector<float>>> forward(std::span<const TrainSequence> seqs,
                                                          ForwardPass pass = ForwardPass::kTrain) = 0;
  // After forward(seqs, kTrain): adds d(sum_s,t coef[s][t] * logp[s][t]) / d(factor) into the
  // gradients (coef shaped as forward's result; coef[s][0] ignored). Gradients accumulate until
  // zero_grads(): backward() after each of several forwards sums their gradients.
  virtual Status backward(const std::vector<std::vector<float>>& coef) = 0;

  // Layers whose traces the last forward(kTrain) kept (the first ones; backward()
  // recomputes the rest from checkpoints): TrainerOptions::trace_budget_bytes.
  virtual int64_t traced_layers() const = 0;

  // Gradients, one per factor of the adapter: grads().factors(layer, target).a / .b, f32.
  virtual LoraAdapter& grads() = 0;
  virtual Status zero_grads() = 0;
};

}  // namespace kiln
