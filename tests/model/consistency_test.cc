// Internal consistency of the forward: prefill n then decode 1 == prefill n+1; the GDN chunk size
// and a prefill split across calls do not change the result; batched rows equal separate runs.
#include <gtest/gtest.h>

#include <vector>

#include "backend/registry.h"
#include "model/qwen35.h"
#include "test_util.h"

namespace kiln {
namespace {

struct ModelUnderTest {
  std::unique_ptr<Backend> backend = std::move(create_backend("cpu").value());
  std::unique_ptr<Qwen35Model> model;
  std::vector<int32_t> ids;
  ModelUnderTest() {
    model = std::move(Qwen35Model::load(std::string(KILN_FIXTURES_DIR) + "/reference/gqa_untied", *backend).value());
    for (int i = 0; i < 150; ++i) ids.push_back((i * 37 + 11) % 300);
  }
  // Logits of the last token after feeding `pieces` consecutive slices of ids to one sequence.
  Tensor run(const std::vector<int64_t>& pieces, int chunk = 64) {
    model->options().gdn_chunk = chunk;
    auto state = model->create_state({1, 4}).value();
    auto seq = state.new_sequence().value();
    int64_t done = 0;
    Tensor last;
    for (int64_t len : pieces) {
      SequenceInput row{&seq, {ids.data() + done, static_cast<size_t>(len)}};
      last = model->forward({&row, 1}, LogitsMode::kLast, state).value();
      done += len;
    }
    model->options().gdn_chunk = 64;
    return last;
  }
};

double diff(const Tensor& a, const Tensor& b) {
  return testing::max_abs_diff(a.data<float>(), b.data<float>(), a.numel());
}

// Decode uses the recurrent GDN form, prefill the chunked one, and chunk sizes and batch shapes
// change the order of f32 sums (and the BLAS kernel): results agree to f32 rounding, which four
// layers amplify to ~1e-5 on logits of magnitude ~5 (seen up to 1.25e-5 on the accelerator
// machine's CPU); the bound leaves room for that.
constexpr double kFormsTol = 5e-5;

TEST(Consistency, PrefillThenDecodeEqualsLongerPrefill) {
  ModelUnderTest s;
  for (int64_t n : {1, 63, 64, 100}) EXPECT_LE(diff(s.run({n, 1}), s.run({n + 1})), kFormsTol) << n;
}

TEST(Consistency, ChunkSizeAndSplitsDoNotChangeResults) {
  ModelUnderTest s;
  Tensor base = s.run({150});
  for (int chunk : {16, 128}) EXPECT_LE(diff(s.run({150}, chunk), base), kFormsTol) << chunk;
  EXPECT_LE(diff(s.run({64, 64, 22}), base), kFormsTol);
  EXPECT_LE(diff(s.run({1, 70, 3, 76}), base), kFormsTol);
}

TEST(Consistency, BatchedRowsEqualSeparateRuns) {
  ModelUnderTest s;
  auto state = s.model->create_state({3, 12}).value();
  std::vector<SequenceState> seqs;
  for (int i = 0; i < 3; ++i) seqs.push_back(state.new_sequence().value());
  // One mixed forward: prefills of different lengths in one batch, then a batched decode step.
  std::vector<int64_t> lens = {70, 5, 33};
  std::vector<SequenceInput> rows;
  for (int i = 0; i < 3; ++i) rows.push_back(SequenceInput{&seqs[i], {s.ids.data(), static_cast<size_t>(lens[i])}});
  Tensor pre = s.model->forward(rows, LogitsMode::kLast, state).value();
  std::vector<SequenceInput> step;
  for (int i = 0; i < 3; ++i) step.push_back(SequenceInput{&seqs[i], {s.ids.data() + lens[i], 1}});
  Tensor dec = s.model->forward(step, LogitsMode::kLast, state).value();
  const int64_t V = pre.dim(1);
  for (int i = 0; i < 3; ++i) {
    Tensor a = s.run({lens[i]}), b = s.run({lens[i], 1});
    EXPECT_LE(testing::max_abs_diff(pre.data<float>() + i * V, a.data<float>(), V), kFormsTol) << i;
    EXPECT_LE(testing::max_abs_diff(dec.data<float>() + i * V, b.data<float>(), V), kFormsTol) << i;
  }
}

TEST(Consistency, StateIsReturnedOnRelease) {
  ModelUnderTest s;
  auto state = s.model->create_state({2, 3}).value();
  auto a = state.new_sequence().value();
  SequenceInput row{&a, {s.ids.data(), 130}};
  ASSERT_TRUE(s.model->forward({&row, 1}, LogitsMode::kLast, state).ok());
  EXPECT_EQ(state.free_blocks(), 0);
  SequenceInput more{&a, {s.ids.data(), 70}};
  auto full = s.model->forward({&more, 1}, LogitsMode::kLast, state);
  EXPECT_EQ(full.status().code(), ErrorCode::kResourceExhausted);
  state.release(a);
  EXPECT_EQ(state.free_blocks(), 3);
  EXPECT_EQ(state.free_slots(), 2);
}

TEST(Consistency, StateBytesMatchThePools) {
  ModelUnderTest s;
  auto state = s.model->create_state({2, 3}).value();
  const ModelConfig& c = s.model->config();
  int64_t block = 0, slot = 0;
  for (int64_t i = 0; i < c.num_layers; ++i) {
    if (c.layer_types[i] == LayerKind::kFullAttention)
      block += static_cast<int64_t>(state.k_cache(i).nbytes() + state.v_cache(i).nbytes()) / 3;
    else
      slot += static_cast<int64_t>(state.recurrent(i).nbytes() + state.conv(i).nbytes()) / 2;
  }
  EXPECT_GT(block, 0);
  EXPECT_GT(slot, 0);
  EXPECT_EQ(state.block_bytes(), block);
  EXPECT_EQ(state.slot_bytes(), slot);
  EXPECT_EQ(ModelState::block_bytes_for(c, s.model->kv_dtype()), block);
}

TEST(Consistency, ABf16KvCacheHoldsHalfTheBytesAnE4m3OneAQuarterAndOtherTypesAreRefused) {
  ModelUnderTest s;
  const ModelConfig& c = s.model->config();
  EXPECT_EQ(s.model->kv_dtype(), DType::kF32);  // an f32 checkpoint, and the cpu attends over f32 K/V only
  auto half = ModelState::create(c, s.model->backend().storage(), {2, 3, DType::kBF16}).value();
  int64_t attention_layers = 0;
  for (int64_t i = 0; i < c.num_layers; ++i) {
    if (c.layer_types[i] != LayerKind::kFullAttention) continue;
    ++attention_layers;
    EXPECT_EQ(half.k_cache(i).dtype(), DType::kBF16);
    EXPECT_EQ(half.v_cache(i).dtype(), DType::kBF16);
    EXPECT_EQ(half.k_cache(i).dim(0), 3);
  }
  EXPECT_GT(attention_layers, 0);
  EXPECT_EQ(half.block_bytes() * 2, ModelState::block_bytes_for(c, DType::kF32));
  auto quarter = ModelState::create(c, s.model->backend().storage(), {2, 3, DType::kF8E4M3}).value();
  EXPECT_EQ(quarter.block_bytes() * 4, ModelState::block_bytes_for(c, DType::kF32));
  auto bad = ModelState::create(c, s.model->backend().storage(), {2, 3, DType::kI32});
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("K/V cache dtype i32"), std::string::npos) << bad.status().message();
  // The model asks only for what the backend's attention takes: the cpu attends over f32 K/V.
  const Status fp8 = s.model->set_kv_dtype(DType::kF8E4M3);
  EXPECT_FALSE(fp8.ok());
  EXPECT_NE(fp8.message().find("K/V cache dtype f8e4m3: the cpu backend keeps K/V in f32 only"), std::string::npos)
      << fp8.message();
  EXPECT_EQ(s.model->kv_dtype(), DType::kF32);
  EXPECT_TRUE(s.model->set_kv_dtype(DType::kF32).ok());
}

}  // namespace
}  // namespace kiln
