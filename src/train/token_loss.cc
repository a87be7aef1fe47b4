// SFT, GRPO and ECHO losses from per-token log-probabilities (docs/training.md, "Losses").
#include "train/token_loss.h"

#include <algorithm>
#include <cmath>
#include <string>

namespace kiln {

namespace {

// Every sequence's log-probabilities present and as long as its tokens.
Status check_shapes(std::span<const TrainSequence* const> seqs, const TokenLogprobs& logp, const char* what) {
  if (logp.size() != seqs.size())
    return invalid_argument(std::string(what) + ": " + std::to_string(logp.size()) + " rows of log-probabilities for " +
                            std::to_string(seqs.size()) + " sequences");
  for (size_t s = 0; s < seqs.size(); ++s) {
    if (seqs[s]->roles.size() != seqs[s]->tokens.size())
      return invalid_argument("sequence " + std::to_string(s) + ": " + std::to_string(seqs[s]->roles.size()) +
                              " roles for " + std::to_string(seqs[s]->tokens.size()) + " tokens");
    if (logp[s].size() != seqs[s]->tokens.size())
      return invalid_argument(std::string(what) + " of sequence " + std::to_string(s) + ": " +
                              std::to_string(logp[s].size()) + " values for " + std::to_string(seqs[s]->tokens.size()) +
                              " tokens");
  }
  return {};
}

TokenLogprobs zeros_like(const TokenLogprobs& logp) {
  TokenLogprobs z(logp.size());
  for (size_t s = 0; s < logp.size(); ++s) z[s].assign(logp[s].size(), 0.f);
  return z;
}

// Tokens of `role` that something predicts (t >= 1).
int64_t count_role(const TrainSequence& q, TokenRole role) {
  int64_t n = 0;
  for (size_t t = 1; t < q.roles.size(); ++t) n += q.roles[t] == role;
  return n;
}

// A target token's weight in a loss over groups: 1 / (its group's completion tokens x the groups
// the loss is the mean over).
double group_token_weight(const GrpoGroup& g, int64_t groups) {
  int64_t n = 0;
  for (const auto& c : g.completions) n += count_role(c.sequence, TokenRole::kTarget);
  return 1.0 / (static_cast<double>(std::max<int64_t>(n, 1)) * static_cast<double>(std::max<int64_t>(groups, 1)));
}

}  // namespace

LossScale sft_loss_scale(std::span<const TrainSequence> seqs) {
  LossScale s;
  for (const TrainSequence& q : seqs) {
    s.target_tokens += count_role(q, TokenRole::kTarget);
    s.observation_tokens += count_role(q, TokenRole::kObservation);
  }
  return s;
}

LossScale grpo_loss_scale(std::span<const GrpoGroup> groups, AdvantageMode advantage) {
  LossScale s;
  for (const GrpoGroup& g : groups) {
    std::vector<double> rewards;
    for (const GrpoCompletion& c : g.completions) rewards.push_back(c.reward);
    if (!grpo_advantages(rewards, advantage)) continue;
    ++s.groups;
    for (const GrpoCompletion& c : g.completions) {
      s.target_tokens += count_role(c.sequence, TokenRole::kTarget);
      s.observation_tokens += count_role(c.sequence, TokenRole::kObservation);
    }
  }
  return s;
}

void add_echo_loss(std::span<const TrainSequence* const> seqs, const TokenLogprobs& logp, float lambda, TokenLoss& out,
                   std::optional<int64_t> observation_tokens) {
  int64_t here = 0;
  for (const TrainSequence* q : seqs)
    if (q) here += count_role(*q, TokenRole::kObservation);
  const int64_t n = observation_tokens.value_or(here);
  // No observation tokens (or lambda 0): the term is exactly zero, not a 0/0.
  if (here == 0 || n == 0 || lambda == 0.f) return;
  const double w = static_cast<double>(lambda) / static_cast<double>(n);
  double sum = 0;
  for (size_t s = 0; s < seqs.size(); ++s) {
    if (!seqs[s]) continue;
    for (size_t t = 1; t < seqs[s]->roles.size(); ++t) {
      if (seqs[s]->roles[t] != TokenRole::kObservation) continue;
      sum -= logp[s][t];
      out.coef[s][t] = static_cast<float>(out.coef[s][t] - w);
    }
  }
  out.echo = w * sum;
  out.loss += out.echo;
}

Result<TokenLoss> sft_loss(std::span<const TrainSequence> seqs, const TokenLogprobs& logp, float echo_lambda,
                           const std::optional<LossScale>& scale) {
  std::vector<const TrainSequence*> ptrs;
  for (const auto& q : seqs) ptrs.push_back(&q);
  KILN_RETURN_IF_ERROR(check_shapes(ptrs, logp, "logp"));
  TokenLoss out;
  out.coef = zeros_like(logp);
  for (const auto& q : seqs) out.tokens += count_role(q, TokenRole::kTarget);
  const int64_t mean_over = scale ? scale->target_tokens : out.tokens;
  if (out.tokens > 0 && mean_over > 0) {
    const double w = 1.0 / static_cast<double>(mean_over);
    double sum = 0;
    for (size_t s = 0; s < seqs.size(); ++s)
      for (size_t t = 1; t < seqs[s].roles.size(); ++t) {
        if (seqs[s].roles[t] != TokenRole::kTarget) continue;
        sum -= logp[s][t];
        out.coef[s][t] = static_cast<float>(-w);
      }
    out.loss = sum * w;
  }
  add_echo_loss(ptrs, logp, echo_lambda, out, scale ? std::optional(scale->observation_tokens) : std::nullopt);
  return out;
}

std::optional<std::vector<double>> grpo_advantages(std::span<const double> rewards, AdvantageMode mode) {
  if (rewards.empty()) return std::nullopt;
  if (std::all_of(rewards.begin(), rewards.end(), [&](double r) { return r == rewards[0]; })) return std::nullopt;
  const double n = static_cast<double>(rewards.size());
  double mean = 0;
  for (double r : rewards) mean += r;
  mean /= n;
  std::vector<double> adv;
  for (double r : rewards) adv.push_back(r - mean);
  if (mode == AdvantageMode::kVanilla) {
    double ss = 0;
    for (double a : adv) ss += a * a;
    const double sd = std::sqrt(ss / (n - 1));  // n >= 2 here: a single reward is all-equal
    for (double& a : adv) a /= sd + 1e-8;
  }
  return adv;
}

Result<TokenLoss> grpo_loss(std::span<const GrpoGroup> groups, const TokenLogprobs& logp, const TokenLogprobs& ref_logp,
                            const GrpoLossOptions& o, const std::optional<LossScale>& scale) {
  std::vector<const TrainSequence*> ptrs;
  for (const auto& g : groups)
    for (const auto& c : g.completions) ptrs.push_back(&c.sequence);
  KILN_RETURN_IF_ERROR(check_shapes(ptrs, logp, "logp"));
  if (o.kl != KlEstimator::kNone) KILN_RETURN_IF_ERROR(check_shapes(ptrs, ref_logp, "ref_logp"));
  if (!(o.clip_epsilon >= 0.f)) return invalid_argument("clip_epsilon must be >= 0, got " + std::to_string(o.clip_epsilon));

  TokenLoss out;
  out.coef = zeros_like(logp);
  // Advantages first: the batch's loss is the mean over the groups kept, so their count scales every token.
  std::vector<std::optional<std::vector<double>>> advs;
  for (const auto& g : groups) {
    std::vector<double> rewards;
    for (const auto& c : g.completions) rewards.push_back(c.reward);
    advs.push_back(grpo_advantages(rewards, o.advantage));
    out.groups_kept += advs.back().has_value();
  }
  const int64_t mean_over = scale ? scale->groups : out.groups_kept;
  std::vector<const TrainSequence*> echo_seqs(ptrs.size(), nullptr);
  const double lo = 1.0 - o.clip_epsilon, hi = 1.0 + o.clip_epsilon, beta = o.kl_coeff;
  double total = 0, total_kl = 0;
  size_t s = 0;  // index of the completion across groups
  for (size_t gi = 0; gi < groups.size(); ++gi) {
    const GrpoGroup& g = groups[gi];
    const auto& adv = advs[gi];
    if (!adv) {
      s += g.completions.size();
      continue;
    }
    // Token-level aggregation inside the group, then the mean over the kept groups.
    const double w = group_token_weight(g, mean_over);
    for (size_t ci = 0; ci < g.completions.size(); ++ci, ++s) {
      const GrpoCompletion& c = g.completions[ci];
      echo_seqs[s] = ptrs[s];
      if (!c.behavior_logp.empty() && c.behavior_logp.size() != c.sequence.tokens.size())
        return invalid_argument("group " + std::to_string(gi) + " completion " + std::to_string(ci) + ": " +
                                std::to_string(c.behavior_logp.size()) + " behaviour log-probabilities for " +
                                std::to_string(c.sequence.tokens.size()) + " tokens");
      const double A = (*adv)[ci];
      for (size_t t = 1; t < c.sequence.roles.size(); ++t) {
        if (c.sequence.roles[t] != TokenRole::kTarget) continue;
        const double lp = logp[s][t];
        // Without behaviour log-probabilities the policy is its own behaviour: rho = 1, drho/dlogp = 1.
        const double rho = c.behavior_logp.empty() ? 1.0 : std::exp(lp - static_cast<double>(c.behavior_logp[t]));
        const double clipped = std::clamp(rho, lo, hi);
        const double unclipped_term = rho * A, clipped_term = clipped * A;
        double l, dl;
        if (unclipped_term <= clipped_term) {  // the min is the unclipped term: the gradient flows
          l = -unclipped_term;
          dl = -A * rho;
        } else {  // the clip binds: constant in logp
          l = -clipped_term;
          dl = 0;
        }
        double kl = 0, dkl = 0;
        if (o.kl == KlEstimator::kK1) {
          const double d = lp - static_cast<double>(ref_logp[s][t]);
          kl = beta * d;
          dkl = beta;
        } else if (o.kl == KlEstimator::kK3) {
          const double d = lp - static_cast<double>(ref_logp[s][t]);
          kl = beta * (std::exp(-d) - 1.0 + d);
          dkl = beta * (1.0 - std::exp(-d));
        }
        total += (l + kl) * w;
        total_kl += kl * w;
        out.coef[s][t] = static_cast<float>((dl + dkl) * w);
        ++out.tokens;
      }
    }
  }
  out.loss = total;
  out.kl = total_kl;
  add_echo_loss(echo_seqs, logp, o.echo_lambda, out, scale ? std::optional(scale->observation_tokens) : std::nullopt);
  return out;
}

LossScale opd_loss_scale(std::span<const GrpoGroup> groups) {
  LossScale s;
  for (const GrpoGroup& g : groups) {
    ++s.groups;
    for (const GrpoCompletion& c : g.completions) s.target_tokens += count_role(c.sequence, TokenRole::kTarget);
  }
  return s;
}

Result<TokenLoss> opd_loss(std::span<const GrpoGroup> groups, const TokenLogprobs& logp, const OpdLossOptions& o,
                           const std::optional<LossScale>& scale) {
  std::vector<const TrainSequence*> ptrs;
  for (const auto& g : groups)
    for (const auto& c : g.completions) ptrs.push_back(&c.sequence);
  KILN_RETURN_IF_ERROR(check_shapes(ptrs, logp, "logp"));
  TokenLoss out;
  out.coef = zeros_like(logp);
  out.groups_kept = static_cast<int64_t>(groups.size());
  const int64_t mean_over = scale ? scale->groups : out.groups_kept;
  double total = 0, kl_sum = 0;
  size_t s = 0;
  for (size_t gi = 0; gi < groups.size(); ++gi) {
    const GrpoGroup& g = groups[gi];
    std::vector<double> rewards;
    for (const auto& c : g.completions) rewards.push_back(c.reward);
    const auto adv = o.reward_coeff != 0.f ? grpo_advantages(rewards, o.advantage) : std::nullopt;
    const double w = group_token_weight(g, mean_over);
    for (size_t ci = 0; ci < g.completions.size(); ++ci, ++s) {
      const GrpoCompletion& c = g.completions[ci];
      const size_t len = c.sequence.tokens.size();
      if (c.behavior_logp.size() != len || c.teacher_logp.size() != len)
        return invalid_argument("group " + std::to_string(gi) + " completion " + std::to_string(ci) + ": " +
                                std::to_string(c.behavior_logp.size()) + " behaviour and " +
                                std::to_string(c.teacher_logp.size()) + " teacher log-probabilities for " +
                                std::to_string(len) + " tokens");
      const double reward_adv = adv ? static_cast<double>(o.reward_coeff) * (*adv)[ci] : 0.0;
      for (size_t t = 1; t < len; ++t) {
        if (c.sequence.roles[t] != TokenRole::kTarget) continue;
        const double behaviour = c.behavior_logp[t], teacher = c.teacher_logp[t];
        const double a = teacher - behaviour + reward_adv;
        const double rho = std::exp(static_cast<double>(logp[s][t]) - behaviour);
        total += -rho * a * w;
        out.coef[s][t] = static_cast<float>(-rho * a * w);
        kl_sum += behaviour - teacher;
        ++out.tokens;
      }
    }
  }
  out.loss = total;
  out.kl = out.tokens > 0 ? kl_sum / static_cast<double>(out.tokens) : 0.0;
  return out;
}

}  // namespace kiln
