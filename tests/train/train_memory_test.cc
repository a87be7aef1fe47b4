// The estimate of a training job's device memory (train/train_memory.h), part by part on the
// Qwen3.5-4B shape, each number worked out here from the shape; against the pool peak measured on
// the device; and the largest step a job can take.
#include <gtest/gtest.h>

#include <algorithm>

#include "model/init.h"
#include "train/train_memory.h"
#include "train/train_run.h"

namespace kiln {
namespace {

// The 4B shape (model/init.cc): 32 layers, every 4th full attention (8), the rest GDN (24).
constexpr int64_t V = 248320, H = 2560, I = 9216, L = 32, A = 8, G = 24;
constexpr int64_t Hq = 16, Hkv = 4, D = 256, Q = 2 * Hq * D /* query + gate */, KV = Hkv * D, O = Hq * D;
constexpr int64_t Hk = 16, dk = 128, Hv = 32, dv = 128, C = 2 * Hk * dk + Hv * dv, Vd = Hv * dv;
// Inputs plus outputs of every projection an adapter may target, summed over the layers.
constexpr int64_t kAdaptedDims = A * ((H + Q) + 2 * (H + KV) + (O + H)) + G * ((H + C) + 2 * (H + Vd)) + L * 3 * (H + I);

TrainJobShape sft(int64_t sequences, int64_t tokens) {
  TrainJobShape s;
  s.sequence_tokens.assign(static_cast<size_t>(sequences), tokens);
  return s;
}

TEST(TrainMemory, FourBSftOfTwoByTwoThousandFortyEight) {
  const ModelConfig c = preset_config("qwen3.5-4b").value();
  ASSERT_EQ(kAdaptedDims, 1904640);  // the figure server.max_adapter_bytes' help gives for the 4B
  const TrainMemoryEstimate e = estimate_train_memory(c, sft(2, 2048));
  const int64_t T = 4096, r = 16;
  // Factors, gradients, Muon's momentum: 3 f32 copies of r x (in + out) per projection.
  EXPECT_EQ(e.adapter, 3 * r * kAdaptedDims * 4);
  // 32 bf16 K/V blocks a sequence over 8 layers (2 x 64 x 4 x 256 x 2 bytes each); a GDN slot a
  // sequence over 24 layers: the f32 state (32 x 128 x 128) and 3 conv taps of 8192 channels.
  EXPECT_EQ(e.state, 2 * 32 * (A * 2 * 64 * KV * 2) + 2 * G * (Hv * dk * dv + 3 * C) * 4);
  // 32 checkpoints + the last output + the final norm's, [4096, 2560] f32; five [4096] vectors.
  EXPECT_EQ(e.residuals, (L + 2) * T * H * 4 + 5 * T * 4);
  // A GDN layer: per token, h_in, x_mid, h_post, output, dx, dh (6H); the MLP's 3 internals and
  // their 3 gradients (6I); one rounded operand of the widest (I); 2r for each of the 6 adapted
  // projections; mixed, conv, dconv, dmixed (4C); z, core, normed and their gradients (6Vd); a, b,
  // da, db (4Hv); q, k gradients per value head (2 Hv dk). Then what the delta rule keeps: per
  // sequence, 32 chunks and 32 value heads, a record of 3 x 64 x 128 + 64 x 128 + 64 x 64 + 64,
  // the chunk's entering state 128 x 128 and W 64 x 128, in f32.
  const int64_t gdn_token = 6 * H + 6 * I + I + 2 * r * 6 + 4 * C + 6 * Vd + 4 * Hv + 2 * Hv * dk;
  const int64_t kept = 2 * 32 * Hv * (3 * 64 * dk + 64 * dv + 64 * 64 + 64 + dk * dv + 64 * dv) * 4;
  EXPECT_EQ(e.layer, gdn_token * T * 4 + kept);
  EXPECT_EQ(e.logits, int64_t{256} << 20);  // the vocabulary chunk's cap (4096 x V floats is more)
  EXPECT_EQ(e.traces, 0);
  EXPECT_EQ(e.total(), e.adapter + e.state + e.residuals + e.layer + e.logits);
  EXPECT_EQ(e.total(), 5191319552);  // 4.83 GiB
  EXPECT_NE(e.describe().find("4.83 GiB (adapter 0.34,"), std::string::npos) << e.describe();
}

TEST(TrainMemory, OneByFourThousandNinetySixWithTheWeightsIsTheMeasuredPoolPeak) {
  // docs/cuda.md, "Memory limit": kiln bench train at 1 x 4,096 with no traces peaked at 13.4 GB of
  // pool on the H200, the bf16 weights (2 bytes x 4,205,751,296 parameters) included. The
  // estimate may exceed that by a little, never fall short by much.
  const ModelConfig c = preset_config("qwen3.5-4b").value();
  const double with_weights = static_cast<double>(estimate_train_memory(c, sft(1, 4096)).total() + 2 * int64_t{4205751296});
  EXPECT_GT(with_weights, 13.4e9 * 0.98);
  EXPECT_LT(with_weights, 13.4e9 * 1.05);
}

TEST(TrainMemory, OptimizerStateTargetsTracesAndSequencesEachAddTheirShare) {
  const ModelConfig c = preset_config("qwen3.5-4b").value();
  const int64_t muon = estimate_train_memory(c, sft(2, 2048)).total(), copy = 16 * kAdaptedDims * 4;
  TrainJobShape adam = sft(2, 2048), plain = sft(2, 2048), traced = sft(2, 2048), mlp = sft(2, 2048);
  adam.optimizer = OptimizerKind::kAdamW;
  plain.optimizer = OptimizerKind::kSgd;
  traced.trace_budget_bytes = int64_t{3} << 30;
  mlp.lora.targets = {LoraTarget::kGateProj, LoraTarget::kUpProj, LoraTarget::kDownProj};
  EXPECT_EQ(estimate_train_memory(c, adam).total(), muon + copy);
  EXPECT_EQ(estimate_train_memory(c, plain).total(), muon - copy);
  EXPECT_EQ(estimate_train_memory(c, traced).total(), muon + (int64_t{3} << 30));
  EXPECT_EQ(estimate_train_memory(c, mlp).adapter, 3 * 16 * L * 3 * (H + I) * 4);
  // Twice the tokens: more than the first, everything token-sized doubles.
  EXPECT_GT(estimate_train_memory(c, sft(4, 2048)).total(), muon + muon / 2);
}

TEST(TrainMemory, TheLargestStepIsTheLongestSequencesABatchCanHold) {
  auto seq = [](int64_t n) {
    TrainSequence s;
    s.tokens.assign(static_cast<size_t>(n), 1);
    s.roles.assign(static_cast<size_t>(n), TokenRole::kTarget);
    return s;
  };
  TrainSpec spec;
  for (int64_t n : {10, 500, 30, 700, 20}) spec.sft.push_back(seq(n));
  spec.batch_sequences = 2;
  EXPECT_EQ(largest_step_tokens(spec), (std::vector<int64_t>{700, 500}));
  spec.batch_sequences = 8;
  EXPECT_EQ(largest_step_tokens(spec), (std::vector<int64_t>{700, 500, 30, 20, 10}));
  // GRPO steps take whole groups: a group of 3 in a batch of 1 is a step of 3.
  TrainSpec grpo;
  grpo.kind = TrainSpec::Kind::kGrpo;
  grpo.batch_sequences = 1;
  grpo.grpo.resize(2);
  for (int64_t n : {40, 90, 60}) grpo.grpo[0].completions.push_back({seq(n), 0.0, {}, {}});
  grpo.grpo[1].completions.push_back({seq(300), 0.0, {}, {}});
  EXPECT_EQ(largest_step_tokens(grpo), (std::vector<int64_t>{300, 90, 60}));
}

// Packed, a micro-batch holds as many rows (each its own state) as its sequences hold examples:
// twelve 10-token examples in sequences of 40 tokens, 2 sequences a micro-batch, make micro-batches
// of 8 examples and 80 tokens, and the shape has 8 rows of 80 tokens or more, the longest 10; a
// shape of batch_sequences rows would count 2.
TEST(TrainMemory, APackedStepCountsARowForEveryExampleItHolds) {
  TrainSpec spec;
  for (int i = 0; i < 12; ++i) {
    TrainSequence s;
    s.tokens.assign(10, 1);
    s.roles.assign(10, TokenRole::kTarget);
    spec.sft.push_back(s);
  }
  spec.batch_sequences = 2;
  spec.pack_tokens = 40;
  const std::vector<int64_t> shape = largest_step_tokens(spec);
  ASSERT_EQ(shape.size(), 8u);
  int64_t tokens = 0;
  for (int64_t n : shape) tokens += n;
  EXPECT_GE(tokens, 80);
  EXPECT_EQ(*std::max_element(shape.begin(), shape.end()), 10);
  const ModelConfig c = preset_config("tiny").value();
  TrainJobShape packed, unpacked;
  packed.sequence_tokens = shape;
  unpacked.sequence_tokens = {40, 40};  // the same tokens as two rows: less state
  EXPECT_GT(estimate_train_memory(c, packed).state, estimate_train_memory(c, unpacked).state);
}

}  // namespace
}  // namespace kiln
