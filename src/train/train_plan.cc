#include "train/train_plan.h"

#include <algorithm>
#include <cmath>
#include <random>
#include <string>

#include "train/packing.h"
#include "train/train_run.h"

namespace kiln {

namespace {

// Units cut into batches whose weights sum to at most `most` (at least one unit each). A packed
// sequence weighs 1 whatever it holds; a GRPO group its completions.
std::vector<TrainPlan::MicroBatch> batch_units(std::vector<TrainPlan::Unit> units, std::span<const PlanItem> items,
                                               int64_t most, bool packed) {
  std::vector<TrainPlan::MicroBatch> batches;
  int64_t used = 0;
  for (TrainPlan::Unit& u : units) {
    int64_t w = packed ? 1 : 0;
    if (!packed)
      for (size_t i : u) w += items[i].weight;
    if (batches.empty() || used + w > most) {
      batches.emplace_back();
      used = 0;
    }
    batches.back().push_back(std::move(u));
    used += w;
  }
  return batches;
}

// The items `order` names as units: packed by tokens, or one each.
std::vector<TrainPlan::Unit> units_of(const std::vector<size_t>& order, std::span<const PlanItem> items,
                                      int64_t pack_tokens) {
  if (pack_tokens <= 0) {
    std::vector<TrainPlan::Unit> units;
    for (size_t i : order) units.push_back({i});
    return units;
  }
  std::vector<int64_t> tokens;
  for (const PlanItem& it : items) tokens.push_back(it.tokens);
  return pack_in_order(order, tokens, pack_tokens);
}

}  // namespace

int64_t held_out_items(int64_t items, double eval_fraction) {
  if (!(eval_fraction > 0)) return 0;
  return static_cast<int64_t>(std::ceil(eval_fraction * static_cast<double>(items)));
}

Result<TrainPlan> plan_training(std::span<const PlanItem> items, const TrainSpec& spec) {
  TrainPlan plan;
  const int64_t n = static_cast<int64_t>(items.size());
  plan.held_out = held_out_items(n, spec.eval_fraction);
  if (plan.held_out >= n) {
    const char* what = spec.kind == TrainSpec::Kind::kSft ? " sequences" : " groups kept";
    return invalid_argument("eval_fraction " + std::to_string(spec.eval_fraction) + " holds out " +
                            std::to_string(plan.held_out) + " of the " + std::to_string(n) + what +
                            ": none is left to train on");
  }
  // The split's stream is not the epochs' (nor the adapter init's): without a split the epochs
  // draw exactly what they drew before there was one.
  std::vector<size_t> train(items.size());
  for (size_t i = 0; i < train.size(); ++i) train[i] = i;
  std::vector<size_t> held;
  if (plan.held_out > 0) {
    std::mt19937_64 split(spec.seed ^ 0xe7a1'5b11'7ull);
    for (size_t i = train.size(); i > 1; --i) std::swap(train[i - 1], train[split() % i]);
    held.assign(train.begin(), train.begin() + plan.held_out);
    train.erase(train.begin(), train.begin() + plan.held_out);
    std::sort(held.begin(), held.end());
    std::sort(train.begin(), train.end());
    plan.eval = batch_units(units_of(held, items, spec.pack_tokens), items, spec.batch_sequences, spec.pack_tokens > 0);
  }
  std::mt19937_64 rng(spec.seed ^ 0x5eed'ba7c'4e5ull);  // not the adapter init's stream
  std::vector<size_t> order(train.size());
  const size_t per_step = static_cast<size_t>(std::max<int64_t>(spec.accumulation_steps, 1));
  for (int64_t e = 0; e < spec.epochs; ++e) {
    order = train;
    for (size_t i = order.size(); i > 1; --i) std::swap(order[i - 1], order[rng() % i]);
    auto batches = batch_units(units_of(order, items, spec.pack_tokens), items, spec.batch_sequences, spec.pack_tokens > 0);
    for (size_t b = 0; b < batches.size(); b += per_step) {
      const size_t end = std::min(batches.size(), b + per_step);
      plan.steps.emplace_back(std::make_move_iterator(batches.begin() + static_cast<std::ptrdiff_t>(b)),
                              std::make_move_iterator(batches.begin() + static_cast<std::ptrdiff_t>(end)));
    }
  }
  return plan;
}

}  // namespace kiln
