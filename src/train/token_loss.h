// The losses of docs/training.md ("Losses") as pure functions of per-token log-probabilities: each
// returns the loss and dLoss/dlogp per token (the `coef` LoraTrainer::backward takes), so one
// backward serves SFT, GRPO and ECHO. Sums run in double; the coefficients are rounded to f32 at
// the end.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <vector>

#include "core/status.h"
#include "train/train_run.h"

namespace kiln {

// Per sequence, per token: logp[s][t] = log p(tokens[t] | tokens[<t]) (t = 0 unused), as
// LoraTrainer::forward returns them.
using TokenLogprobs = std::vector<std::vector<float>>;

struct TokenLoss {
  double loss = 0;      // everything: the main term (SFT or GRPO, KL included) + ECHO
  double kl = 0;        // GRPO: the KL part of `loss`
  double echo = 0;      // ECHO's part of `loss`
  int64_t tokens = 0;   // tokens of the main term (kTarget tokens of the groups kept)
  int64_t groups_kept = 0;  // GRPO: groups whose rewards were not all equal
  TokenLogprobs coef;   // dLoss/dlogp, shaped as the log-probabilities given; coef[s][0] = 0
};

// The denominators of the losses' means, counted over everything one loss stands for: an
// optimizer step's micro-batches together, or the whole held-out set. Given to the loss of each
// part, they make the parts' losses and coefficients add up to those of one batch of everything;
// left out, each loss counts them over its own batch.
struct LossScale {
  int64_t target_tokens = 0;       // SFT: kTarget tokens
  int64_t observation_tokens = 0;  // ECHO: kObservation tokens (GRPO: of the groups kept)
  int64_t groups = 0;              // GRPO: groups kept (rewards not all equal)
  LossScale& operator+=(const LossScale& o) {
    target_tokens += o.target_tokens, observation_tokens += o.observation_tokens, groups += o.groups;
    return *this;
  }
};
LossScale sft_loss_scale(std::span<const TrainSequence> seqs);
LossScale grpo_loss_scale(std::span<const GrpoGroup> groups, AdvantageMode advantage);

// SFT: the mean next-token cross-entropy over every kTarget token of the batch (-mean logp), plus
// ECHO. A batch without targets has a main term of 0.
Result<TokenLoss> sft_loss(std::span<const TrainSequence> seqs, const TokenLogprobs& logp, float echo_lambda,
                           const std::optional<LossScale>& scale = std::nullopt);

// GRPO advantages of one group: r - mean(r) (kDrGrpo) or (r - mean) / (std + 1e-8) (kVanilla,
// std with Bessel's correction, as torch.std). nullopt when every reward is equal: the group is dropped.
std::optional<std::vector<double>> grpo_advantages(std::span<const double> rewards, AdvantageMode mode);

struct GrpoLossOptions {
  AdvantageMode advantage = AdvantageMode::kDrGrpo;
  float clip_epsilon = 0.2f;
  KlEstimator kl = KlEstimator::kNone;
  float kl_coeff = 0.1f;  // beta
  float echo_lambda = 0.05f;
};

// GRPO over whole groups. `logp` (and `ref_logp`, the model without the adapter, needed when a KL
// estimator is set) hold one entry per completion, group after group. Per kTarget token of a
// completion with advantage A, rho = exp(logp - behavior_logp) (1 in value, d rho/d logp = 1,
// when the completion has no behaviour log-probabilities):
//   l = -min(rho A, clip(rho, 1 - eps, 1 + eps) A) [+ beta k1 or k3 of d = logp - ref_logp];
// a group's loss is the sum of its tokens' l over its completion tokens; the batch's loss is the
// mean over the groups kept (uniform-reward groups contribute nothing), plus ECHO over the
// kObservation tokens of the kept groups.
Result<TokenLoss> grpo_loss(std::span<const GrpoGroup> groups, const TokenLogprobs& logp, const TokenLogprobs& ref_logp,
                            const GrpoLossOptions& opts, const std::optional<LossScale>& scale = std::nullopt);

// OPD (on-policy distillation) over whole groups, every group counted (LossScale::groups: all of
// them). Each completion needs its behaviour (student, as sampled) and teacher log-probabilities.
// Per kTarget token, the advantage a = teacher_logp - behavior_logp (the negative reverse KL of the
// token) + reward_coeff * the completion's GRPO advantage (0 for a group of equal rewards), and
// with rho = exp(logp - behavior_logp) the importance-weighted policy gradient
//   l = -rho a,  dl/dlogp = -rho a;
// a group's loss is the sum over its completion tokens divided by their number, the batch's the
// mean over its groups. `kl` of the result: the mean of behavior_logp - teacher_logp over the tokens.
struct OpdLossOptions {
  float reward_coeff = 0.f;
  AdvantageMode advantage = AdvantageMode::kDrGrpo;
};
LossScale opd_loss_scale(std::span<const GrpoGroup> groups);
Result<TokenLoss> opd_loss(std::span<const GrpoGroup> groups, const TokenLogprobs& logp, const OpdLossOptions& opts,
                           const std::optional<LossScale>& scale = std::nullopt);

// ECHO alone: lambda * mean cross-entropy over the kObservation tokens of the sequences (a null
// entry is skipped: a dropped group's), added into `out` (loss, echo, coef, which must be shaped
// as logp); exactly nothing without such tokens. The mean divides by `observation_tokens` where
// given (a LossScale's), else by the count in `seqs`.
void add_echo_loss(std::span<const TrainSequence* const> seqs, const TokenLogprobs& logp, float lambda, TokenLoss& out,
                   std::optional<int64_t> observation_tokens = std::nullopt);

}  // namespace kiln
