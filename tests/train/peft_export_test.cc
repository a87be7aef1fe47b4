// Kiln's half of the PEFT round trip ("the published adapter loads in PEFT and gives the
// same logits there"). A few SFT steps on a random f32 `tiny` checkpoint, the adapter published
// the way a job publishes it (train/adapter_publish.h), then the logits of a fixed token sequence
// through the published files. Here the test asserts that the published directory serves exactly
// the adapter that was trained (logits bit for bit) and that the adapter moves the logits well
// beyond f32 noise (else agreeing with PEFT would prove nothing). With KILN_PEFT_EXPORT_DIR set it
// leaves base/, adapter/ and kiln_logits.{json,f32} there for tools/check_peft_adapter.py, which
// loads them with transformers + PEFT on the accelerator machine (docs/training.md has the run).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "backend/registry.h"
#include "model/init.h"
#include "model/qwen35.h"
#include "test_util.h"
#include "train/adapter_publish.h"
#include "train/train_run.h"

namespace kiln {
namespace {

namespace fs = std::filesystem;

// The sequence whose logits are compared: 48 tokens (a 64-token block is not needed; GDN chunks
// of the reference path are crossed at 16 / 32) spread over the 512-token vocabulary.
std::vector<int32_t> probe_tokens() {
  std::vector<int32_t> t;
  for (int32_t i = 0; i < 48; ++i) t.push_back((7 + 101 * i + 13 * i * i) % 512);
  return t;
}

Result<Tensor> logits_of(Qwen35Model& m, const std::vector<int32_t>& tokens, const LoraAdapter* ad) {
  KILN_ASSIGN_OR_RETURN(ModelState state, m.create_state({1, 4}));
  KILN_ASSIGN_OR_RETURN(SequenceState seq, state.new_sequence());
  const LoraTerm term{ad, 1.f};
  SequenceInput row{&seq, tokens, ad ? std::span<const LoraTerm>(&term, 1) : std::span<const LoraTerm>()};
  return m.forward({&row, 1}, LogitsMode::kAll, state);
}

void write_f32(const std::string& path, const Tensor& t) {
  std::ofstream out(path, std::ios::binary);
  out.write(reinterpret_cast<const char*>(t.data<float>()), static_cast<std::streamsize>(t.numel() * sizeof(float)));
  ASSERT_TRUE(out.good()) << path;
}

TEST(PeftExport, PublishedAdapterServesTheTrainedFactorsAndMovesTheLogits) {
  const char* env = std::getenv("KILN_PEFT_EXPORT_DIR");
  const bool keep = env != nullptr && *env != '\0';
  const std::string root = keep ? std::string(env) : testing::temp_dir("peft-export");
  fs::remove_all(root);
  fs::create_directories(root);
  const std::string base_dir = root + "/base";
  // f32 weights: the comparison with PEFT is then not blurred by bf16 rounding on either side.
  ASSERT_TRUE(write_random_checkpoint(preset_config("tiny").value(), base_dir,
                                      {.seed = 11, .dtype = DType::kF32, .quiet = true}).ok());
  auto backend = create_backend("cpu").value();
  auto model = Qwen35Model::load(base_dir, *backend);
  ASSERT_TRUE(model.ok()) << model.status().to_string();
  Qwen35Model& m = **model;

  TrainSpec spec;
  spec.lora.rank = 4;
  spec.lora.alpha = 8;
  spec.optimizer = OptimizerKind::kAdamW;
  spec.hyper.lr = 1e-2f;
  spec.epochs = 3;
  spec.seed = 4;
  for (int32_t i = 0; i < 2; ++i) {
    TrainSequence s;
    for (int32_t k = 0; k < 10; ++k) s.tokens.push_back((31 + 57 * i + 89 * k) % 512);
    s.roles.assign(4, TokenRole::kContext);
    s.roles.resize(s.tokens.size(), TokenRole::kTarget);
    spec.sft.push_back(s);
  }
  std::atomic<bool> cancel{false};
  auto trained = run_training(m, spec, {}, cancel);
  ASSERT_TRUE(trained.ok()) << trained.status().to_string();

  const nlohmann::json receipt = {{"kind", "kiln.train_receipt"}, {"loss_curve", trained->losses}};
  auto published = publish_adapter(trained->adapter.download(backend->storage()).value(), receipt, m.config(), root,
                                   "adapter");
  ASSERT_TRUE(published.ok()) << published.status().to_string();
  auto loaded = LoraAdapter::load(*published, m.config(), backend->storage());
  ASSERT_TRUE(loaded.ok()) << loaded.status().to_string();

  const std::vector<int32_t> tokens = probe_tokens();
  auto base = logits_of(m, tokens, nullptr);
  auto in_memory = logits_of(m, tokens, &trained->adapter);
  auto from_files = logits_of(m, tokens, &*loaded);
  ASSERT_TRUE(base.ok() && in_memory.ok() && from_files.ok());
  const int64_t n = from_files->numel();
  // The files hold the trained f32 factors exactly: the same logits bit for bit.
  EXPECT_EQ(testing::max_abs_diff(in_memory->data<float>(), from_files->data<float>(), n), 0.0);
  // The adapter moves the logits by far more than f32 noise of a forward (~1e-5 of the largest).
  double peak = 0;
  for (int64_t i = 0; i < n; ++i) peak = std::max(peak, std::fabs(static_cast<double>(base->data<float>()[i])));
  const double moved = testing::max_abs_diff(base->data<float>(), from_files->data<float>(), n);
  EXPECT_GT(moved, 1e-2 * peak) << "the trained adapter barely changes the logits";

  if (!keep) {
    fs::remove_all(root);
    return;
  }
  write_f32(root + "/kiln_logits.f32", *from_files);
  write_f32(root + "/kiln_base_logits.f32", *base);
  const nlohmann::json manifest = {
      {"generator", "tests/train/peft_export_test.cc (train_peft_export_tests, KILN_PEFT_EXPORT_DIR)"},
      {"base", "base"},
      {"adapter", "adapter"},
      {"tokens", tokens},
      {"shape", {from_files->dim(0), from_files->dim(1)}},
      {"logits", "kiln_logits.f32"},
      {"base_logits", "kiln_base_logits.f32"},
      {"dtype", "float32 little-endian, row-major [tokens, vocab]; row t: logits after tokens[0..t]"},
      {"loss_curve", trained->losses},
      {"adapter_moves_logits_by", moved}};
  std::ofstream(root + "/kiln_logits.json") << manifest.dump(2) << "\n";
}

}  // namespace
}  // namespace kiln
