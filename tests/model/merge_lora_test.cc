// merge_lora_into_checkpoint: the merged checkpoint served without an adapter gives the logits the
// base model gives with it (the adapter path of the forward is the oracle: a separate computation,
// itself held to transformers + PEFT by lora_test.cc); a 16-bit checkpoint keeps its dtype, its
// untouched tensors their bytes, and each merged element is W + scale * B A rounded to the dtype;
// refusals name what is wrong and write nothing.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>

#include "backend/registry.h"
#include "core/dtype.h"
#include "model/merge_lora.h"
#include "model/qwen35.h"
#include "model/random_adapter.h"
#include "model/safetensors.h"
#include "model/tiny_checkpoint.h"
#include "test_util.h"

namespace kiln {
namespace {

namespace fs = std::filesystem;

std::string fixture(const std::string& path) { return std::string(KILN_FIXTURES_DIR) + "/" + path; }

Tensor logits(Qwen35Model& m, const std::vector<int32_t>& ids, std::span<const LoraTerm> lora) {
  auto state = m.create_state({1, 8}).value();
  auto seq = state.new_sequence().value();
  SequenceInput row{&seq, {ids.data(), ids.size()}, lora};
  auto out = m.forward({&row, 1}, LogitsMode::kAll, state);
  EXPECT_TRUE(out.ok()) << out.status().to_string();
  return out.ok() ? std::move(out).value() : Tensor();
}

TEST(MergeLora, MergedCheckpointGivesTheLogitsOfTheBaseWithTheAdapter) {
  auto backend = create_backend("cpu").value();
  const std::string base = fixture("reference/gqa_untied"), adapter_dir = fixture("lora_reference/gqa_untied");
  const std::string out = testing::temp_dir("merge") + "/merged";
  ASSERT_TRUE(merge_lora_into_checkpoint(base, adapter_dir, out).ok());
  EXPECT_EQ(testing::read_file(out + "/config.json"), testing::read_file(base + "/config.json"));
  EXPECT_TRUE(fs::exists(out + "/reference.safetensors"));  // not the checkpoint's: copied as any file

  auto base_model = Qwen35Model::load(base, *backend).value();
  auto merged = Qwen35Model::load(out, *backend).value();
  LoraAdapter adapter = LoraAdapter::load(adapter_dir, base_model->config(), backend->storage()).value();
  std::vector<int32_t> ids;
  for (int i = 0; i < 40; ++i) ids.push_back((i * 37 + 11) % 300);
  const LoraTerm with[] = {{&adapter, 1.f}};
  const Tensor want = logits(*base_model, ids, with), got = logits(*merged, ids, {});
  const Tensor plain = logits(*base_model, ids, {});
  ASSERT_EQ(got.shape(), want.shape());
  // f32 weights: the only difference is the order of the sums, as in LoraForward's merged stack.
  EXPECT_LE(testing::max_abs_diff(got.data<float>(), want.data<float>(), got.numel()), 1e-4);
  EXPECT_GT(testing::max_abs_diff(plain.data<float>(), want.data<float>(), got.numel()), 0.1);  // the adapter matters
}

TEST(MergeLora, SixteenBitCheckpointKeepsItsDtypeAndRoundsEachMergedElementToIt) {
  auto backend = create_backend("cpu").value();
  const std::string base = testing::tiny_checkpoint("merge-bf16", 3, DType::kBF16);
  ASSERT_FALSE(base.empty());
  const ModelConfig mc = ModelConfig::load(base).value();
  LoraAdapter ad = testing::random_adapter(mc, backend->storage(), 5, /*rank=*/4, /*alpha=*/8);
  const std::string adapter_dir = testing::temp_dir("merge-bf16-adapter");
  ASSERT_TRUE(ad.save(adapter_dir, backend->storage()).ok());
  const std::string out = testing::temp_dir("merge-bf16-out") + "/merged";
  const Status st = merge_lora_into_checkpoint(base, adapter_dir, out);
  ASSERT_TRUE(st.ok()) << st.to_string();

  Checkpoint before = Checkpoint::open(base).value(), after = Checkpoint::open(out).value();
  ASSERT_EQ(before.tensors().size(), after.tensors().size());
  int merged = 0;
  for (const auto& [name, e] : before.tensors()) {
    const TensorEntry* m = after.find(name);
    ASSERT_NE(m, nullptr) << name;
    ASSERT_EQ(m->tensor.dtype(), e.tensor.dtype()) << name;
    ASSERT_EQ(m->tensor.shape(), e.tensor.shape()) << name;
    if (std::memcmp(m->tensor.raw(), e.tensor.raw(), e.tensor.nbytes()) != 0) ++merged;
  }
  // tiny: 3 GDN layers (in_proj_qkv, in_proj_z, out_proj) and 1 attention layer (q, k, v, o),
  // each with gate, up and down: 3 * 6 + 1 * 7 projections, every one moved by a random B.
  EXPECT_EQ(merged, 3 * 6 + 7);

  // One projection element by element: W + (alpha / r) * sum_k B[o,k] A[k,i], in double, then bf16.
  const LoraFactors& f = ad.factors(3, LoraTarget::kOProj);
  Tensor A = Tensor::empty(f.a.shape(), DType::kF32), B = Tensor::empty(f.b.shape(), DType::kF32);
  ASSERT_TRUE(backend->storage().copy_to_host(f.a, A).ok());
  ASSERT_TRUE(backend->storage().copy_to_host(f.b, B).ok());
  const Tensor& w = before.find("model.layers.3.self_attn.o_proj.weight")->tensor;
  const Tensor& wm = after.find("model.layers.3.self_attn.o_proj.weight")->tensor;
  const int64_t out_dim = w.dim(0), in = w.dim(1), r = A.dim(0);
  int64_t wrong = 0;
  for (int64_t o = 0; o < out_dim; ++o)
    for (int64_t i = 0; i < in; ++i) {
      double ba = 0;
      for (int64_t k = 0; k < r; ++k) ba += static_cast<double>(B.data<float>()[o * r + k]) * A.data<float>()[k * in + i];
      const double want = bf16_to_f32(w.data<uint16_t>()[o * in + i]) + 2.0 * ba;
      wrong += wm.data<uint16_t>()[o * in + i] != f32_to_bf16(static_cast<float>(want));
    }
  EXPECT_EQ(wrong, 0);
}

TEST(MergeLora, RefusalsNameTheFaultAndWriteNothing) {
  const std::string base = fixture("reference/gqa_untied");
  const std::string dir = testing::temp_dir("merge-refused");
  // An adapter of another model (6 layers, other shapes).
  const Status foreign = merge_lora_into_checkpoint(base, fixture("lora_reference/tied_dk_ne_dv"), dir + "/a");
  EXPECT_FALSE(foreign.ok());
  EXPECT_NE(foreign.message().find("lora_reference/tied_dk_ne_dv/adapter_model.safetensors"), std::string::npos)
      << foreign.to_string();
  EXPECT_FALSE(fs::exists(dir + "/a"));
  // An existing destination.
  fs::create_directories(dir + "/b");
  const Status exists = merge_lora_into_checkpoint(base, fixture("lora_reference/gqa_untied"), dir + "/b");
  EXPECT_EQ(exists.code(), ErrorCode::kFailedPrecondition);
  EXPECT_NE(exists.message().find(dir + "/b"), std::string::npos) << exists.to_string();
  EXPECT_TRUE(fs::is_empty(dir + "/b"));
  // Nothing staged is left behind.
  for (const auto& e : fs::directory_iterator(dir)) EXPECT_TRUE(e.path().filename() == "b") << e.path();
}

}  // namespace
}  // namespace kiln
