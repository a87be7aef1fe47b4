// The released Qwen3.5 dense checkpoints' layout, made at test time from the `tiny` model:
// Qwen3_5ForConditionalGeneration, the text config under text_config, text weights under
// model.language_model.*, a vision tower under model.visual.* in a shard of its own, MTP tensors
// (mtp.*) beside the text weights, all behind model.safetensors.index.json. The text model loads
// from it with the same logits as from the plain layout, never opens the vision-only shard (it is
// left unreadable here), and skips the vision and MTP tensors unchecked (one has a dtype Kiln does
// not know). And the real thing: a checkpoint transformers itself wrote.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "backend/registry.h"
#include "model/init.h"
#include "model/model_files.h"
#include "model/backend_model_checks.h"
#include "model/qwen35.h"
#include "test_util.h"

namespace kiln {
namespace {

namespace fs = std::filesystem;

Tensor copy_of(const Tensor& t) {
  Tensor c = Tensor::empty(t.shape(), t.dtype());
  std::memcpy(c.raw(), t.raw(), t.nbytes());
  return c;
}

// A safetensors file holding one tensor of an unknown dtype ("F8_E5M2") beside `tensors`.
void write_with_foreign_tensor(const std::string& path, const std::vector<std::pair<std::string, Tensor>>& tensors,
                               const std::string& foreign) {
  ASSERT_TRUE(write_safetensors(path, tensors).ok());
  std::ifstream in(path, std::ios::binary);
  uint64_t len = 0;
  in.read(reinterpret_cast<char*>(&len), 8);
  std::string header(len, ' ');
  in.read(header.data(), static_cast<std::streamsize>(len));
  std::string data((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  nlohmann::json h = nlohmann::json::parse(header);
  h[foreign] = {{"dtype", "F8_E5M2"}, {"shape", {4}}, {"data_offsets", {data.size(), data.size() + 4}}};
  data += std::string(4, '\x11');
  std::string text = h.dump();
  while ((text.size() + 8) % 8) text.push_back(' ');
  len = text.size();
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(&len), 8);
  out << text << data;
}

struct Layouts {
  std::string plain, multimodal;
};

Layouts make_layouts() {
  Layouts l{testing::temp_dir("plain"), testing::temp_dir("multimodal")};
  const ModelConfig config = preset_config("tiny").value();
  EXPECT_TRUE(write_random_checkpoint(config, l.plain, {.seed = 5, .dtype = DType::kF32, .quiet = true}).ok());
  Checkpoint ck = Checkpoint::open(l.plain).value();

  nlohmann::json text = config.to_json();
  text.erase("architectures");
  text["model_type"] = "qwen3_5_text";
  const nlohmann::json mm = {{"architectures", {"Qwen3_5ForConditionalGeneration"}},
                             {"model_type", "qwen3_5"},
                             {"tie_word_embeddings", config.tie_word_embeddings},
                             {"text_config", text},
                             {"vision_config", {{"depth", 1}, {"hidden_size", 8}, {"out_hidden_size", config.hidden_size}}},
                             {"image_token_id", 7}};
  std::ofstream(l.multimodal + "/config.json") << mm.dump(2);

  std::vector<std::pair<std::string, Tensor>> text_a, text_b;
  nlohmann::json map = nlohmann::json::object();
  size_t i = 0;
  for (const auto& [name, e] : ck.tensors()) {
    const std::string renamed = name.rfind("model.", 0) == 0 ? "model.language_model." + name.substr(6) : name;
    const bool a = i++ % 2 == 0;
    (a ? text_a : text_b).push_back({renamed, copy_of(e.tensor)});
    map[renamed] = a ? "model-00001-of-00003.safetensors" : "model-00002-of-00003.safetensors";
  }
  const Tensor mtp = testing::random_tensor({config.hidden_size, 2 * config.hidden_size}, 9);
  text_a.push_back({"mtp.fc.weight", mtp});
  map["mtp.fc.weight"] = "model-00001-of-00003.safetensors";
  map["mtp.layers.0.mlp.weird"] = "model-00001-of-00003.safetensors";
  write_with_foreign_tensor(l.multimodal + "/model-00001-of-00003.safetensors", text_a, "mtp.layers.0.mlp.weird");
  EXPECT_TRUE(write_safetensors(l.multimodal + "/model-00002-of-00003.safetensors", text_b).ok());
  for (const char* v : {"model.visual.patch_embed.proj.weight", "model.visual.blocks.0.attn.qkv.weight",
                        "model.visual.merger.linear_fc1.weight"})
    map[v] = "model-00003-of-00003.safetensors";
  // The vision-only shard: present (a download has it) but not a readable safetensors file.
  std::ofstream(l.multimodal + "/model-00003-of-00003.safetensors") << "xx";
  std::ofstream(l.multimodal + "/model.safetensors.index.json") << nlohmann::json({{"weight_map", map}}).dump();
  std::ofstream(l.multimodal + "/tokenizer.json") << "{}";
  return l;
}

Tensor logits(Qwen35Model& m) {
  auto state = m.create_state({1, 4}).value();
  auto seq = state.new_sequence().value();
  std::vector<int32_t> ids = {3, 1, 4, 1, 5, 9, 2, 6, 5, 3, 5, 8, 9, 7};
  SequenceInput row{&seq, {ids.data(), ids.size()}};
  return m.forward({&row, 1}, LogitsMode::kAll, state).value();
}

TEST(MultimodalLayout, TheTextModelLoadsAsFromThePlainLayoutAndSkipsTheRestUnread) {
  const Layouts l = make_layouts();
  auto backend = std::move(create_backend("cpu").value());
  auto plain = Qwen35Model::load(l.plain, *backend);
  ASSERT_TRUE(plain.ok()) << plain.status().to_string();
  auto mm = Qwen35Model::load(l.multimodal, *backend);
  ASSERT_TRUE(mm.ok()) << mm.status().to_string();
  EXPECT_EQ((*plain)->unused_tensors(), 0u);
  EXPECT_EQ((*mm)->unused_tensors(), 5u);  // three vision tensors, two MTP tensors
  EXPECT_EQ((*mm)->config().num_layers, (*plain)->config().num_layers);
  const Tensor a = logits(**plain), b = logits(**mm);
  ASSERT_EQ(a.numel(), b.numel());
  EXPECT_EQ(std::memcmp(a.raw(), b.raw(), a.nbytes()), 0);  // the same weights: the same bits
  const ServableCheck c = check_servable(l.multimodal);
  EXPECT_TRUE(c.servable) << c.problem;
  EXPECT_EQ(c.architecture, "Qwen3_5ForConditionalGeneration");
}

TEST(MultimodalLayout, AMissingTextShardIsStillNamed) {
  const Layouts l = make_layouts();
  fs::remove(l.multimodal + "/model-00002-of-00003.safetensors");
  auto backend = std::move(create_backend("cpu").value());
  auto mm = Qwen35Model::load(l.multimodal, *backend);
  ASSERT_FALSE(mm.ok());
  EXPECT_NE(mm.status().message().find("model-00002-of-00003.safetensors"), std::string::npos) << mm.status().message();
  const ServableCheck c = check_servable(l.multimodal);
  EXPECT_FALSE(c.servable);
  EXPECT_EQ(c.missing, std::vector<std::string>{"model-00002-of-00003.safetensors"});
}

// tests/fixtures/qwen35_multimodal: a tiny random Qwen3_5ForConditionalGeneration (vision tower
// included, f32) that transformers 5.17 built and saved in eight shards, MTP tensors added as the
// releases carry them (tools/make_qwen35_multimodal.py, seed 0); expected.json holds transformers'
// own greedy continuation of its prompt. Kiln's text model reads the text weights and lm_head,
// skips every vision and MTP tensor, and continues the prompt with transformers' tokens.
TEST(MultimodalLayout, ACheckpointTransformersWroteGivesTransformersGreedyTokens) {
  const std::string dir = std::string(KILN_FIXTURES_DIR) + "/qwen35_multimodal";
  std::ifstream ef(dir + "/expected.json"), xf(dir + "/model.safetensors.index.json");
  const nlohmann::json expected = nlohmann::json::parse(ef), index = nlohmann::json::parse(xf);
  size_t skipped = 0;
  for (const auto& [name, file] : index["weight_map"].items())
    skipped += name.rfind("model.visual.", 0) == 0 || name.rfind("mtp.", 0) == 0;
  ASSERT_EQ(skipped, 35u);  // 33 vision tensors, 2 MTP tensors
  auto backend = std::move(create_backend("cpu").value());
  auto model = Qwen35Model::load(dir, *backend);
  ASSERT_TRUE(model.ok()) << model.status().to_string();
  EXPECT_EQ((*model)->unused_tensors(), skipped);
  const auto want = expected["greedy"].get<std::vector<int32_t>>();
  const std::vector<int32_t> got = testing::greedy_tokens(*backend, dir, static_cast<int>(want.size()),
                                                          expected["prompt_ids"].get<std::vector<int32_t>>());
  EXPECT_EQ(got, want);
  // The fixture carries no tokenizer: the servability check names that and nothing else.
  const ServableCheck c = check_servable(dir);
  EXPECT_EQ(c.architecture, "Qwen3_5ForConditionalGeneration");
  EXPECT_EQ(c.missing, std::vector<std::string>{"tokenizer.json"}) << c.problem;
}

}  // namespace
}  // namespace kiln
