// The batch plan (train/train_plan.h): accumulation groups an epoch's micro-batches into steps
// without changing them, the held-out items never train, packing fills sequences from the
// shuffled order, and a split that leaves nothing to train is refused.
#include <gtest/gtest.h>

#include <algorithm>
#include <set>

#include "train/train_plan.h"
#include "train/train_run.h"

namespace kiln {
namespace {

std::vector<PlanItem> items(std::vector<int64_t> tokens) {
  std::vector<PlanItem> out;
  for (int64_t t : tokens) out.push_back({1, t});
  return out;
}

TrainSpec spec_of(int64_t epochs, int64_t batch, int64_t accumulation) {
  TrainSpec s;
  s.epochs = epochs;
  s.batch_sequences = batch;
  s.accumulation_steps = accumulation;
  s.seed = 5;
  return s;
}

// The micro-batches of every step, one after another.
std::vector<TrainPlan::MicroBatch> micro_batches(const TrainPlan& p) {
  std::vector<TrainPlan::MicroBatch> out;
  for (const auto& step : p.steps) out.insert(out.end(), step.begin(), step.end());
  return out;
}

TEST(TrainPlan, AccumulationGroupsAnEpochsMicroBatchesIntoStepsWithoutChangingThem) {
  const auto its = items({4, 4, 4, 4, 4, 4, 4});
  const TrainPlan one = plan_training(its, spec_of(2, 2, 1)).value();
  const TrainPlan three = plan_training(its, spec_of(2, 2, 3)).value();
  // 7 items in batches of 2: 4 micro-batches an epoch; 3 a step: steps of 3 and 1 micro-batches.
  ASSERT_EQ(one.steps.size(), 8u);
  ASSERT_EQ(three.steps.size(), 4u);
  std::vector<size_t> sizes;
  for (const auto& s : three.steps) sizes.push_back(s.size());
  EXPECT_EQ(sizes, (std::vector<size_t>{3, 1, 3, 1}));
  EXPECT_EQ(micro_batches(three), micro_batches(one));
  // One batch of k: the items of a step of k micro-batches of 1 are the batch of k, in order.
  const TrainPlan k1 = plan_training(its, spec_of(1, 1, 3)).value(), one_of_3 = plan_training(its, spec_of(1, 3, 1)).value();
  ASSERT_EQ(k1.steps.size(), one_of_3.steps.size());
  for (size_t s = 0; s < k1.steps.size(); ++s) {
    TrainPlan::MicroBatch joined;
    for (const auto& mb : k1.steps[s]) joined.insert(joined.end(), mb.begin(), mb.end());
    EXPECT_EQ(joined, one_of_3.steps[s][0]) << "step " << s + 1;
  }
}

TEST(TrainPlan, HeldOutItemsAreTheCeilingOfTheFractionAndNeverTrain) {
  const auto its = items(std::vector<int64_t>(10, 4));
  TrainSpec spec = spec_of(3, 2, 1);
  spec.eval_fraction = 0.25;
  const TrainPlan p = plan_training(its, spec).value();
  EXPECT_EQ(p.held_out, 3);  // ceil(2.5)
  std::set<size_t> held;
  for (const auto& mb : p.eval)
    for (const auto& u : mb) held.insert(u.begin(), u.end());
  EXPECT_EQ(held.size(), 3u);
  std::vector<std::multiset<size_t>> epochs(3);
  size_t at = 0;
  for (const auto& mb : micro_batches(p)) {  // 7 items in batches of 2: 4 steps an epoch
    for (const auto& u : mb)
      for (size_t i : u) {
        EXPECT_EQ(held.count(i), 0u) << "held-out item " << i << " trained";
        epochs[at / 4].insert(i);
      }
    ++at;
  }
  for (const auto& e : epochs) EXPECT_EQ(e.size(), 7u);  // every other item once an epoch
  for (const auto& e : epochs) EXPECT_EQ(std::set<size_t>(e.begin(), e.end()).size(), 7u);
  // Another seed holds out others (the split is seeded, not the first items).
  TrainSpec other = spec;
  other.seed = 6;
  std::set<size_t> held6;
  const TrainPlan p6 = plan_training(its, other).value();
  for (const auto& mb : p6.eval)
    for (const auto& u : mb) held6.insert(u.begin(), u.end());
  EXPECT_NE(held6, held);
}

TEST(TrainPlan, PackingFillsSequencesUpToTheLimitFromTheShuffledOrder) {
  const auto its = items({5, 3, 4, 2, 6, 7, 1, 3});
  TrainSpec spec = spec_of(2, 1, 1);
  spec.pack_tokens = 10;
  const TrainPlan p = plan_training(its, spec).value();
  const TrainPlan unpacked = plan_training(its, spec_of(2, 1, 1)).value();
  // The same shuffle, cut where the next item would pass 10 tokens.
  size_t step = 0;
  for (int64_t e = 0; e < 2; ++e) {
    std::vector<size_t> order;
    for (size_t i = 0; i < its.size(); ++i) order.push_back(unpacked.steps[e * its.size() + i][0][0][0]);
    std::vector<size_t> seen;
    int64_t used = 0;
    for (; step < p.steps.size() && seen.size() < its.size(); ++step) {
      ASSERT_EQ(p.steps[step].size(), 1u);
      ASSERT_EQ(p.steps[step][0].size(), 1u);  // batch 1: one packed sequence a step
      const auto& unit = p.steps[step][0][0];
      used = 0;
      for (size_t i : unit) used += its[i].tokens, seen.push_back(i);
      EXPECT_LE(used, 10);
      if (seen.size() < order.size()) {
        EXPECT_GT(used + its[order[seen.size()]].tokens, 10) << "a run closed early";
      }
    }
    EXPECT_EQ(seen, order) << "epoch " << e;
  }
  EXPECT_EQ(step, p.steps.size());
}

// batch_sequences counts packed sequences, not the examples inside them.
TEST(TrainPlan, APackedSequenceCountsOneTowardTheBatch) {
  const auto its = items(std::vector<int64_t>(12, 10));
  TrainSpec spec = spec_of(1, 2, 1);
  spec.pack_tokens = 40;
  const TrainPlan p = plan_training(its, spec).value();
  ASSERT_EQ(p.steps.size(), 2u);  // 3 packed sequences of 4 examples: 2 and 1
  EXPECT_EQ(p.steps[0][0].size(), 2u);
  EXPECT_EQ(p.steps[0][0][0].size(), 4u);
  EXPECT_EQ(p.steps[1][0].size(), 1u);
}

TEST(TrainPlan, ASplitThatLeavesNothingToTrainIsRefused) {
  TrainSpec spec = spec_of(1, 1, 1);
  spec.eval_fraction = 0.5;
  auto r = plan_training(items({4, 4}), spec);  // ceil(1) = 1 of 2: fine
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->held_out, 1);
  r = plan_training(items({4}), spec);  // ceil(0.5) = 1 of 1
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("holds out 1 of the 1 sequences"), std::string::npos) << r.status().to_string();
}

}  // namespace
}  // namespace kiln
