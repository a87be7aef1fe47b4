// LoRA adapters: PEFT's files load (and bad ones are refused naming the fault); the CPU forward
// with an adapter matches transformers + peft (tests/fixtures/lora_reference, made by
// tools/make_lora_reference.py); a zero-B adapter changes nothing; rows with different adapters
// batch; stacked adapters equal merged weights; save -> load is bit-exact.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>

#include "backend/registry.h"
#include "model/lora_adapter.h"
#include "model/qwen35.h"
#include "model/random_adapter.h"
#include "test_util.h"

namespace kiln {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

constexpr double kTol = 1e-4;       // against the transformers oracle, as tests/model/reference_test.cc
constexpr double kFormsTol = 5e-5;  // batched against separate runs, as tests/model/consistency_test.cc

std::string base_dir(const std::string& name) { return std::string(KILN_FIXTURES_DIR) + "/reference/" + name; }
std::string lora_dir(const std::string& name) { return std::string(KILN_FIXTURES_DIR) + "/lora_reference/" + name; }

using testing::read_file;

void write_file(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << bytes;
}

bool bit_equal(const Tensor& a, const Tensor& b) {
  return a.dtype() == b.dtype() && a.shape() == b.shape() && std::memcmp(a.raw(), b.raw(), a.nbytes()) == 0;
}

double worst(const Tensor& got, const Tensor& want) {
  EXPECT_EQ(got.shape(), want.shape());
  return testing::max_abs_diff(got.data<float>(), want.data<float>(), std::min(got.numel(), want.numel()));
}

struct LoraModel {
  std::unique_ptr<Backend> backend = std::move(create_backend("cpu").value());
  std::unique_ptr<Qwen35Model> model;
  std::vector<int32_t> ids;

  explicit LoraModel(const std::string& name = "gqa_untied") {
    auto m = Qwen35Model::load(base_dir(name), *backend);
    if (!m.ok()) ADD_FAILURE() << m.status().to_string();
    else model = std::move(m).value();
    for (int i = 0; i < 150; ++i) ids.push_back((i * 37 + 11) % 300);
  }
  StorageFacet& storage() { return backend->storage(); }
  LoraAdapter peft(const std::string& name = "gqa_untied") {
    auto a = LoraAdapter::load(lora_dir(name), model->config(), storage());
    EXPECT_TRUE(a.ok()) << a.status().to_string();
    return std::move(a).value();
  }
  // A second adapter: fresh (B zero), then B drawn at random so that it changes the output.
  LoraAdapter random_adapter(uint64_t seed, int64_t rank = 8, double alpha = 16) {
    return testing::random_adapter(model->config(), storage(), seed, rank, alpha,
                                   0.25f / std::sqrt(static_cast<float>(rank)));
  }
  // Logits of one fresh sequence over `n` ids (every position, or the last).
  Tensor run(Qwen35Model& m, const int32_t* tokens, int64_t n, std::span<const LoraTerm> lora,
             LogitsMode mode = LogitsMode::kAll) {
    auto state = m.create_state({1, 8}).value();
    auto seq = state.new_sequence().value();
    SequenceInput row{&seq, {tokens, static_cast<size_t>(n)}, lora};
    auto logits = m.forward({&row, 1}, mode, state);
    EXPECT_TRUE(logits.ok()) << logits.status().to_string();
    return logits.ok() ? std::move(logits).value() : Tensor();
  }
};

// ---------------------------------------------------------------- files

TEST(LoraAdapter, LoadsPeftFiles) {
  LoraModel s;
  LoraAdapter a = s.peft();
  const LoraConfig& c = a.config();
  EXPECT_EQ(c.rank, 4);
  EXPECT_EQ(c.alpha, 8.0);
  EXPECT_FALSE(c.use_rslora);
  EXPECT_FLOAT_EQ(a.scale(), 2.f);
  EXPECT_EQ(c.targets.size(), 10u);
  EXPECT_EQ(c.base_model, "tests/fixtures/reference/gqa_untied");
  EXPECT_EQ(a.tensor_prefix(), LoraAdapter::kFlatPrefix);
  ASSERT_EQ(a.num_layers(), 4);
  // Layers 0-2 are GDN, 3 full attention: each has only its own mixer's projections.
  EXPECT_TRUE(a.factors(0, LoraTarget::kInProjQkv).defined());
  EXPECT_FALSE(a.factors(0, LoraTarget::kQProj).defined());
  EXPECT_FALSE(a.factors(3, LoraTarget::kInProjZ).defined());
  EXPECT_EQ(a.factors(0, LoraTarget::kInProjQkv).a.shape(), (Shape{4, 64}));
  EXPECT_EQ(a.factors(0, LoraTarget::kInProjQkv).b.shape(), (Shape{128, 4}));
  EXPECT_EQ(a.factors(3, LoraTarget::kQProj).b.shape(), (Shape{256, 4}));  // 4 heads x 32 x 2 (gate)
  EXPECT_EQ(a.factors(3, LoraTarget::kOProj).a.shape(), (Shape{4, 128}));
  EXPECT_EQ(a.factors(2, LoraTarget::kDownProj).a.shape(), (Shape{4, 128}));
  // The values are the file's, bit for bit.
  auto file = Checkpoint::open_file(lora_dir("gqa_untied") + "/adapter_model.safetensors").value();
  int defined = 0;
  for (int64_t l = 0; l < a.num_layers(); ++l)
    for (int t = 0; t < kLoraTargetCount; ++t) {
      const LoraFactors& f = a.factors(l, static_cast<LoraTarget>(t));
      if (!f.defined()) continue;
      ++defined;
      EXPECT_TRUE(bit_equal(f.a, file.find(a.tensor_name(l, static_cast<LoraTarget>(t), false))->tensor));
      EXPECT_TRUE(bit_equal(f.b, file.find(a.tensor_name(l, static_cast<LoraTarget>(t), true))->tensor));
    }
  EXPECT_EQ(2 * defined, static_cast<int>(file.tensors().size()));  // 3 GDN x 6 + 1 attention x 7 = 25 pairs
  EXPECT_EQ(defined, 25);
}

TEST(LoraConfig, ScaleIsAlphaOverRankOrOverItsRootWithRsLora) {
  LoraConfig c;
  c.rank = 4;
  c.alpha = 8;
  EXPECT_FLOAT_EQ(c.scale(), 2.f);
  c.use_rslora = true;
  EXPECT_FLOAT_EQ(c.scale(), 4.f);
}

// A copy of the gqa_untied adapter in a temporary directory, to be spoiled one way per case.
class BadAdapter : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = testing::temp_dir("lora");
    ASSERT_FALSE(dir_.empty());
    for (const char* f : {"adapter_config.json", "adapter_model.safetensors"})
      fs::copy_file(lora_dir("gqa_untied") + "/" + f, dir_ + "/" + f, fs::copy_options::overwrite_existing);
  }
  void TearDown() override { fs::remove_all(dir_); }

  json config() { return json::parse(read_file(dir_ + "/adapter_config.json")); }
  void set_config(const json& j) { write_file(dir_ + "/adapter_config.json", j.dump(2)); }
  // Rewrites adapter_model.safetensors through `edit` (which may drop, replace or add tensors).
  template <typename F>
  void rewrite(F edit) {
    std::vector<std::pair<std::string, Tensor>> tensors;
    {
      auto ck = Checkpoint::open_file(dir_ + "/adapter_model.safetensors").value();
      for (const auto& [name, e] : ck.tensors()) {
        Tensor copy = Tensor::empty(e.tensor.shape(), e.tensor.dtype());
        std::memcpy(copy.raw(), e.tensor.raw(), e.tensor.nbytes());
        tensors.push_back({name, copy});
      }
    }
    edit(tensors);
    ASSERT_TRUE(write_safetensors(dir_ + "/adapter_model.safetensors", tensors, {{"format", "pt"}}).ok());
  }
  Status load() { return LoraAdapter::load(dir_, s_.model->config(), s_.storage()).status(); }

  LoraModel s_;
  std::string dir_;
};

TEST_F(BadAdapter, UnsupportedConfigKeysAreRefusedByName) {
  struct Case {
    const char* key;
    json value;
    const char* named;  // what the message must contain
  };
  const Case cases[] = {
      {"use_dora", true, "use_dora"},
      {"bias", "all", "bias"},
      {"modules_to_save", json::array({"lm_head"}), "modules_to_save"},
      {"rank_pattern", json{{"q_proj", 8}}, "rank_pattern"},
      {"alpha_pattern", json{{"q_proj", 16}}, "alpha_pattern"},
      {"fan_in_fan_out", true, "fan_in_fan_out"},
      {"lora_bias", true, "lora_bias"},
      {"loftq_config", json{{"loftq_bits", 4}}, "loftq_config"},
      {"init_lora_weights", "pissa", "init_lora_weights"},
      {"peft_type", "LOHA", "peft_type"},
      {"target_modules", "all-linear", "target_modules"},
      {"target_modules", json::array({"q_proj", "lm_head"}), "lm_head"},
      {"r", 0, "r must be positive"},
      {"r", "four", "r must be an integer"},
      {"lora_alpha", nullptr, "lora_alpha"},
      {"layers_to_transform", json::array({0, 9}), "layers_to_transform"},
  };
  const json good = config();
  for (const Case& c : cases) {
    json j = good;
    j[c.key] = c.value;
    set_config(j);
    Status st = load();
    EXPECT_FALSE(st.ok()) << c.key << " = " << c.value.dump();
    EXPECT_NE(st.message().find(c.named), std::string::npos) << st.message();
  }
  json j = good;
  j.erase("r");
  set_config(j);
  EXPECT_NE(load().message().find("missing r"), std::string::npos) << load().message();
  set_config(good);
  EXPECT_TRUE(load().ok()) << load().to_string();
}

TEST_F(BadAdapter, MisshapedTensorIsNamedWithBothShapes) {
  const std::string name = "base_model.model.model.layers.0.linear_attn.in_proj_qkv.lora_B.weight";
  rewrite([&](auto& ts) {
    for (auto& [n, t] : ts)
      if (n == name) t = Tensor::empty({127, 4}, DType::kF32);
  });
  Status st = load();
  EXPECT_EQ(st.code(), ErrorCode::kInvalidArgument);
  EXPECT_NE(st.message().find(name), std::string::npos) << st.message();
  EXPECT_NE(st.message().find("[127, 4]"), std::string::npos) << st.message();
  EXPECT_NE(st.message().find("[128, 4]"), std::string::npos) << st.message();
}

TEST_F(BadAdapter, UnknownTensorIsNamed) {
  // in_proj_a is a projection, but not a LoRA target.
  const std::string name = "base_model.model.model.layers.0.linear_attn.in_proj_a.lora_A.weight";
  rewrite([&](auto& ts) { ts.push_back({name, Tensor::empty({4, 64}, DType::kF32)}); });
  Status st = load();
  EXPECT_EQ(st.code(), ErrorCode::kInvalidArgument);
  EXPECT_NE(st.message().find(name), std::string::npos) << st.message();
}

TEST_F(BadAdapter, MissingFactorIsNamed) {
  const std::string name = "base_model.model.model.layers.3.self_attn.o_proj.lora_B.weight";
  rewrite([&](auto& ts) { std::erase_if(ts, [&](const auto& p) { return p.first == name; }); });
  Status st = load();
  EXPECT_EQ(st.code(), ErrorCode::kNotFound);
  EXPECT_NE(st.message().find(name), std::string::npos) << st.message();
}

TEST_F(BadAdapter, FactorsOfAnotherModelAreRefused) {
  Status st = LoraAdapter::load(lora_dir("tied_dk_ne_dv"), s_.model->config(), s_.storage()).status();
  EXPECT_FALSE(st.ok());
  EXPECT_NE(st.message().find("layers."), std::string::npos) << st.message();
}

TEST_F(BadAdapter, MultimodalPrefixLoadsTheSameFactors) {
  rewrite([&](auto& ts) {
    for (auto& [n, t] : ts) n = LoraAdapter::kNestedPrefix + n.substr(std::strlen(LoraAdapter::kFlatPrefix));
  });
  auto nested = LoraAdapter::load(dir_, s_.model->config(), s_.storage());
  ASSERT_TRUE(nested.ok()) << nested.status().to_string();
  EXPECT_EQ(nested->tensor_prefix(), LoraAdapter::kNestedPrefix);
  LoraAdapter flat = s_.peft();
  for (int64_t l = 0; l < flat.num_layers(); ++l)
    for (int t = 0; t < kLoraTargetCount; ++t) {
      const LoraFactors& f = flat.factors(l, static_cast<LoraTarget>(t));
      if (!f.defined()) continue;
      EXPECT_TRUE(bit_equal(f.a, nested->factors(l, static_cast<LoraTarget>(t)).a));
      EXPECT_TRUE(bit_equal(f.b, nested->factors(l, static_cast<LoraTarget>(t)).b));
    }
  // save() keeps the layout it was loaded with.
  const std::string out = dir_ + "/saved";
  ASSERT_TRUE(nested->save(out, s_.storage()).ok());
  auto file = Checkpoint::open_file(out + "/adapter_model.safetensors").value();
  EXPECT_NE(file.find("base_model.model.model.language_model.layers.3.self_attn.q_proj.lora_A.weight"), nullptr);
}

// ---------------------------------------------------------------- the forward

TEST(LoraReference, FixtureIsForTheCommittedBaseModels) {
  // The LoRA fixture recorded the base logits it saw; a regenerated base fixture makes it stale.
  for (const char* name : {"gqa_untied", "tied_dk_ne_dv"}) {
    auto lora = Checkpoint::open_file(lora_dir(name) + "/reference.safetensors").value();
    auto base = Checkpoint::open_file(base_dir(name) + "/reference.safetensors").value();
    EXPECT_TRUE(bit_equal(lora.find("base_65")->tensor, base.find("prefill_65")->tensor))
        << name << ": rerun tools/make_lora_reference.py after make_reference.py";
  }
}

TEST(LoraReference, LogitsMatchTransformersPeftAtEveryPosition) {
  for (const char* name : {"gqa_untied", "tied_dk_ne_dv"}) {
    LoraModel s(name);
    ASSERT_TRUE(s.model);
    LoraAdapter a = s.peft(name);
    auto ref = Checkpoint::open_file(lora_dir(name) + "/reference.safetensors").value();
    const Tensor& ids = ref.find("ids")->tensor;
    ASSERT_EQ(ids.numel(), 65);
    const LoraTerm stack[] = {{&a, 1.f}};
    Tensor got = s.run(*s.model, ids.data<int32_t>(), 65, stack);
    EXPECT_LE(worst(got, ref.find("lora_65")->tensor), kTol) << name;
    EXPECT_LE(worst(got, ref.find("lora_65_f64")->tensor), kTol) << name << " (float64 merged spec)";
    // The adapter matters: far from the base logits.
    EXPECT_GT(worst(got, ref.find("base_65")->tensor), 1.0) << name;

    // Prefill 64 then decode the 65th token: the one-row (decode) path with the adapter.
    auto state = s.model->create_state({1, 8}).value();
    auto seq = state.new_sequence().value();
    SequenceInput pre{&seq, {ids.data<int32_t>(), 64}, stack};
    ASSERT_TRUE(s.model->forward({&pre, 1}, LogitsMode::kLast, state).ok());
    SequenceInput step{&seq, {ids.data<int32_t>() + 64, 1}, stack};
    Tensor dec = s.model->forward({&step, 1}, LogitsMode::kLast, state).value();
    const Tensor& want = ref.find("lora_65")->tensor;
    EXPECT_LE(testing::max_abs_diff(dec.data<float>(), want.data<float>() + 64 * want.dim(1), want.dim(1)), kTol)
        << name << " decode";
  }
}

TEST(LoraForward, ZeroBAdapterGivesTheBaseLogitsExactly) {
  LoraModel s;
  LoraConfig cfg;
  cfg.rank = 16;
  cfg.alpha = 32;
  for (int t = 0; t < kLoraTargetCount; ++t) cfg.targets.push_back(static_cast<LoraTarget>(t));
  LoraAdapter fresh = LoraAdapter::init(cfg, s.model->config(), 7, s.storage()).value();
  // docs/training.md, "The adapter": A uniform in +-sqrt(1/in), B zero.
  const Tensor& a = fresh.factors(3, LoraTarget::kOProj).a;
  ASSERT_EQ(a.shape(), (Shape{16, 128}));
  float amax = 0;
  for (int64_t i = 0; i < a.numel(); ++i) amax = std::max(amax, std::fabs(a.data<float>()[i]));
  EXPECT_GT(amax, 0.8f / std::sqrt(128.f));
  EXPECT_LE(amax, 1.f / std::sqrt(128.f));
  const LoraTerm stack[] = {{&fresh, 1.f}};
  for (int64_t n : {1, 70}) {
    Tensor base = s.run(*s.model, s.ids.data(), n, {});
    Tensor with = s.run(*s.model, s.ids.data(), n, stack);
    EXPECT_TRUE(bit_equal(base, with)) << n;
  }
}

TEST(LoraForward, BatchedRowsWithDifferentAdaptersEqualSeparateRuns) {
  LoraModel s;
  LoraAdapter a = s.peft();
  LoraAdapter b = s.random_adapter(11);
  const LoraTerm use_a[] = {{&a, 1.f}}, use_b[] = {{&b, 1.f}};
  // Rows: A, A (one run of two rows), none, B; prefills of different lengths, then a decode step.
  const std::vector<std::span<const LoraTerm>> stacks = {use_a, use_a, {}, use_b};
  const std::vector<int64_t> lens = {70, 9, 5, 33};
  auto state = s.model->create_state({4, 16}).value();
  std::vector<SequenceState> seqs;
  for (size_t i = 0; i < lens.size(); ++i) seqs.push_back(state.new_sequence().value());
  std::vector<SequenceInput> rows, step;
  for (size_t i = 0; i < lens.size(); ++i) {
    rows.push_back({&seqs[i], {s.ids.data() + i, static_cast<size_t>(lens[i])}, stacks[i]});
    step.push_back({&seqs[i], {s.ids.data() + i + lens[i], 1}, stacks[i]});
  }
  Tensor pre = s.model->forward(rows, LogitsMode::kLast, state).value();
  Tensor dec = s.model->forward(step, LogitsMode::kLast, state).value();
  const int64_t V = pre.dim(1);
  for (size_t i = 0; i < lens.size(); ++i) {
    Tensor alone = s.run(*s.model, s.ids.data() + i, lens[i] + 1, stacks[i]);
    EXPECT_LE(testing::max_abs_diff(pre.data<float>() + i * V, alone.data<float>() + (lens[i] - 1) * V, V), kFormsTol)
        << "prefill row " << i;
    EXPECT_LE(testing::max_abs_diff(dec.data<float>() + i * V, alone.data<float>() + lens[i] * V, V), kFormsTol)
        << "decode row " << i;
  }
  // And the rows really differ: adapter B's row is not the base model's.
  Tensor base = s.run(*s.model, s.ids.data() + 3, lens[3], {}, LogitsMode::kLast);
  EXPECT_GT(testing::max_abs_diff(pre.data<float>() + 3 * V, base.data<float>(), V), 0.1);
}

// The base weight a target adapts.
Tensor& base_weight(LayerWeights& L, LoraTarget t) {
  switch (t) {
    case LoraTarget::kQProj: return L.attn.q_proj;
    case LoraTarget::kKProj: return L.attn.k_proj;
    case LoraTarget::kVProj: return L.attn.v_proj;
    case LoraTarget::kOProj: return L.attn.o_proj;
    case LoraTarget::kInProjQkv: return L.gdn.in_proj_qkv;
    case LoraTarget::kInProjZ: return L.gdn.in_proj_z;
    case LoraTarget::kOutProj: return L.gdn.out_proj;
    case LoraTarget::kGateProj: return L.gate_proj;
    case LoraTarget::kUpProj: return L.up_proj;
    case LoraTarget::kDownProj: return L.down_proj;
  }
  return L.gate_proj;
}

TEST(LoraForward, StackedAdaptersEqualMergedWeights) {
  LoraModel s;
  LoraAdapter a = s.peft();
  // Coefficients 0.5 * 2 = 1 (no scaling matmul) and 1 * 16 / 8 = 2 (with it).
  LoraAdapter b = s.random_adapter(23);
  const LoraTerm stack[] = {{&a, 0.5f}, {&b, 1.f}};

  // W' = W + sum_j weight_j * scale_j * B_j A_j, in double on the host, rounded once to f32.
  ModelWeights merged = s.model->weights();
  auto host = [&](const Tensor& t) {
    Tensor h = Tensor::empty(t.shape(), DType::kF32);
    EXPECT_EQ(t.dtype(), DType::kF32);
    EXPECT_TRUE(s.storage().copy_to_host(t, h).ok());
    return h;
  };
  for (int64_t l = 0; l < s.model->config().num_layers; ++l)
    for (int ti = 0; ti < kLoraTargetCount; ++ti) {
      const auto t = static_cast<LoraTarget>(ti);
      if (!a.factors(l, t).defined()) continue;
      Tensor& w = base_weight(merged.layers[l], t);
      Tensor W = host(w);
      const int64_t out = W.dim(0), in = W.dim(1);
      std::vector<double> acc(W.data<float>(), W.data<float>() + W.numel());
      for (const LoraTerm& term : stack) {
        const LoraFactors& f = term.adapter->factors(l, t);
        Tensor A = host(f.a), B = host(f.b);
        const int64_t r = A.dim(0);
        const double c = static_cast<double>(term.weight) * term.adapter->scale();
        for (int64_t o = 0; o < out; ++o)
          for (int64_t k = 0; k < r; ++k) {
            const double bk = c * B.data<float>()[o * r + k];
            for (int64_t i = 0; i < in; ++i) acc[o * in + i] += bk * A.data<float>()[k * in + i];
          }
      }
      Tensor Wm = Tensor::empty(W.shape(), DType::kF32);
      for (int64_t i = 0; i < Wm.numel(); ++i) Wm.data<float>()[i] = static_cast<float>(acc[i]);
      w = s.storage().upload(Wm).value();
    }
  Qwen35Model merged_model(s.model->config(), merged, *s.backend);

  Tensor unmerged = s.run(*s.model, s.ids.data(), 65, stack);
  Tensor want = s.run(merged_model, s.ids.data(), 65, {});
  EXPECT_LE(worst(unmerged, want), kTol);
  // Both terms count: A alone is far from it.
  const LoraTerm only_a[] = {{&a, 0.5f}};
  EXPECT_GT(worst(s.run(*s.model, s.ids.data(), 65, only_a), want), 0.1);
}

TEST(LoraForward, BadStacksAreRefused) {
  LoraModel s;
  LoraModel other("tied_dk_ne_dv");
  LoraAdapter foreign = other.peft("tied_dk_ne_dv");  // 6 layers; the model has 4
  auto state = s.model->create_state({1, 8}).value();
  auto seq = state.new_sequence().value();
  const LoraTerm null_term[] = {{nullptr, 1.f}}, foreign_term[] = {{&foreign, 1.f}};
  SequenceInput row{&seq, {s.ids.data(), 3}, null_term};
  auto r1 = s.model->forward({&row, 1}, LogitsMode::kLast, state);
  EXPECT_NE(r1.status().message().find("is null"), std::string::npos) << r1.status().to_string();
  row.lora = foreign_term;
  auto r2 = s.model->forward({&row, 1}, LogitsMode::kLast, state);
  EXPECT_NE(r2.status().message().find("6 layers"), std::string::npos) << r2.status().to_string();
}

// ---------------------------------------------------------------- saving

TEST(LoraAdapter, SaveLoadRoundTripIsBitExact) {
  LoraModel s;
  const std::string dir = testing::temp_dir("lora-save");
  ASSERT_FALSE(dir.empty());
  LoraAdapter peft = s.peft();
  LoraAdapter fresh = s.random_adapter(5);
  for (LoraAdapter* original : {&peft, &fresh}) {
    ASSERT_TRUE(original->save(dir + "/one", s.storage()).ok());
    auto back = LoraAdapter::load(dir + "/one", s.model->config(), s.storage());
    ASSERT_TRUE(back.ok()) << back.status().to_string();
    const LoraConfig &c0 = original->config(), &c1 = back->config();
    EXPECT_EQ(c1.rank, c0.rank);
    EXPECT_EQ(c1.alpha, c0.alpha);
    EXPECT_EQ(c1.use_rslora, c0.use_rslora);
    EXPECT_EQ(c1.targets, c0.targets);
    EXPECT_EQ(c1.base_model, c0.base_model);
    for (int64_t l = 0; l < original->num_layers(); ++l)
      for (int t = 0; t < kLoraTargetCount; ++t) {
        const LoraFactors& f0 = original->factors(l, static_cast<LoraTarget>(t));
        const LoraFactors& f1 = back->factors(l, static_cast<LoraTarget>(t));
        ASSERT_EQ(f0.defined(), f1.defined());
        if (!f0.defined()) continue;
        EXPECT_TRUE(bit_equal(f0.a, f1.a) && bit_equal(f0.b, f1.b))
            << back->tensor_name(l, static_cast<LoraTarget>(t), false);
      }
    // Saving what was loaded writes the same bytes again, over its own directory too.
    const std::string f1 = read_file(dir + "/one/adapter_config.json");
    const std::string w1 = read_file(dir + "/one/adapter_model.safetensors");
    ASSERT_TRUE(back->save(dir + "/two", s.storage()).ok());
    ASSERT_TRUE(back->save(dir + "/one", s.storage()).ok());
    for (const char* sub : {"/one/", "/two/"}) {
      EXPECT_EQ(read_file(dir + sub + "adapter_config.json"), f1) << sub;
      EXPECT_EQ(read_file(dir + sub + "adapter_model.safetensors"), w1) << sub;
      EXPECT_FALSE(fs::exists(dir + sub + "adapter_model.safetensors.tmp"));
    }
  }
  // PEFT's keys survive in what Kiln writes.
  json j = json::parse(read_file(dir + "/one/adapter_config.json"));
  EXPECT_EQ(j["peft_type"], "LORA");
  EXPECT_EQ(j["r"], 8);
  EXPECT_EQ(j["lora_alpha"], 16);
  EXPECT_EQ(j["bias"], "none");
  EXPECT_EQ(j["target_modules"].size(), 10u);
  fs::remove_all(dir);
}

TEST(LoraAdapter, Bf16FactorsKeepTheirDtypeThroughSaveAndLoad) {
  LoraModel s;
  const std::string dir = testing::temp_dir("lora-bf16");
  ASSERT_FALSE(dir.empty());
  fs::copy_file(lora_dir("gqa_untied") + "/adapter_config.json", dir + "/adapter_config.json");
  std::vector<std::pair<std::string, Tensor>> tensors;
  {
    auto ck = Checkpoint::open_file(lora_dir("gqa_untied") + "/adapter_model.safetensors").value();
    for (const auto& [name, e] : ck.tensors()) {
      Tensor h = Tensor::empty(e.tensor.shape(), DType::kBF16);
      f32_to_bf16(e.tensor.data<float>(), h.data<uint16_t>(), static_cast<size_t>(h.numel()));
      tensors.push_back({name, h});
    }
  }
  ASSERT_TRUE(write_safetensors(dir + "/adapter_model.safetensors", tensors, {{"format", "pt"}}).ok());
  auto a = LoraAdapter::load(dir, s.model->config(), s.storage());
  ASSERT_TRUE(a.ok()) << a.status().to_string();
  EXPECT_EQ(a->factors(3, LoraTarget::kQProj).b.dtype(), DType::kBF16);
  ASSERT_TRUE(a->save(dir + "/out", s.storage()).ok());
  auto back = Checkpoint::open_file(dir + "/out/adapter_model.safetensors").value();
  for (const auto& [name, t] : tensors) {
    const TensorEntry* e = back.find(name);
    ASSERT_NE(e, nullptr) << name;
    EXPECT_TRUE(bit_equal(e->tensor, t)) << name;
  }
  // And the forward runs with bf16 factors (converted per tile, as bf16 weights are).
  const LoraTerm stack[] = {{&a.value(), 1.f}};
  EXPECT_TRUE(s.run(*s.model, s.ids.data(), 9, stack).defined());
  fs::remove_all(dir);
}

}  // namespace
}  // namespace kiln
