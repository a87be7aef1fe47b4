// The CPU forward against HF transformers' Qwen3.5 (tests/fixtures/reference, made by
// tools/make_reference.py): every prefill position of every fixture length, and step-by-step
// decode continuing after a prefill. Tolerance: max abs error 1e-4 (f32).
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "backend/registry.h"
#include "model/qwen35.h"
#include "test_util.h"

namespace kiln {
namespace {

constexpr double kTol = 1e-4;
const char* kConfigs[] = {"gqa_untied", "tied_dk_ne_dv", "nested_mha"};

struct Fixture {
  std::unique_ptr<Backend> backend;
  std::unique_ptr<Qwen35Model> model;
  Checkpoint ref;
  std::vector<int32_t> ids;

  explicit Fixture(const std::string& name) : backend(std::move(create_backend("cpu").value())) {
    const std::string dir = std::string(KILN_FIXTURES_DIR) + "/reference/" + name;
    auto m = Qwen35Model::load(dir, *backend);
    if (!m.ok()) ADD_FAILURE() << m.status().to_string();
    else model = std::move(m).value();
    auto r = Checkpoint::open_file(dir + "/reference.safetensors");
    if (!r.ok()) ADD_FAILURE() << r.status().to_string();
    else ref = std::move(r).value();
    if (const TensorEntry* e = ref.find("ids")) ids.assign(e->tensor.data<int32_t>(), e->tensor.data<int32_t>() + e->tensor.numel());
  }
  const Tensor& expected(const std::string& name) {
    const TensorEntry* e = ref.find(name);
    EXPECT_NE(e, nullptr) << name;
    return e->tensor;
  }
};

double worst(const Tensor& got, const Tensor& want) {
  EXPECT_EQ(got.shape(), want.shape());
  return testing::max_abs_diff(got.data<float>(), want.data<float>(), std::min(got.numel(), want.numel()));
}

TEST(Reference, PrefillLogitsMatchTransformers) {
  for (const char* name : kConfigs) {
    Fixture f(name);
    ASSERT_TRUE(f.model);
    ASSERT_EQ(f.ids.size(), 200u);
    for (int64_t n : {1, 63, 64, 65, 200}) {
      auto state = f.model->create_state({1, 4}).value();
      auto seq = state.new_sequence().value();
      SequenceInput row{&seq, {f.ids.data(), static_cast<size_t>(n)}};
      auto logits = f.model->forward({&row, 1}, LogitsMode::kAll, state);
      ASSERT_TRUE(logits.ok()) << logits.status().to_string();
      EXPECT_LE(worst(logits.value(), f.expected("prefill_" + std::to_string(n))), kTol) << name << " n=" << n;
    }
  }
}

// The same logits against a float64 evaluation of docs/model.md on the same weights (a
// second oracle, free of transformers' own f32 rounding; the generator keeps only draws where
// transformers itself is within 4e-5 of it).
TEST(Reference, PrefillLogitsMatchFloat64Spec) {
  for (const char* name : kConfigs) {
    Fixture f(name);
    ASSERT_TRUE(f.model);
    auto state = f.model->create_state({1, 4}).value();
    auto seq = state.new_sequence().value();
    SequenceInput row{&seq, {f.ids.data(), f.ids.size()}};
    auto logits = f.model->forward({&row, 1}, LogitsMode::kAll, state);
    ASSERT_TRUE(logits.ok()) << logits.status().to_string();
    EXPECT_LE(worst(logits.value(), f.expected("prefill_200_f64")), kTol) << name;
  }
}

TEST(Reference, DecodeAfterPrefillMatchesTransformers) {
  for (const char* name : kConfigs) {
    Fixture f(name);
    ASSERT_TRUE(f.model);
    for (int64_t n : {1, 63, 64, 65}) {
      auto state = f.model->create_state({1, 4}).value();
      auto seq = state.new_sequence().value();
      SequenceInput prefill{&seq, {f.ids.data(), static_cast<size_t>(n)}};
      ASSERT_TRUE(f.model->forward({&prefill, 1}, LogitsMode::kLast, state).ok());
      const Tensor& want = f.expected("decode_after_" + std::to_string(n));
      for (int64_t j = 0; j < want.dim(0); ++j) {
        SequenceInput step{&seq, {f.ids.data() + n + j, 1}};
        auto logits = f.model->forward({&step, 1}, LogitsMode::kLast, state);
        ASSERT_TRUE(logits.ok()) << logits.status().to_string();
        const float* w = want.data<float>() + j * want.dim(1);
        EXPECT_LE(testing::max_abs_diff(logits.value().data<float>(), w, want.dim(1)), kTol)
            << name << " after " << n << " step " << j;
      }
    }
  }
}

}  // namespace
}  // namespace kiln
