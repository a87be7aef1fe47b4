// The checkpoint loader refuses each kind of bad checkpoint with a message naming the fault,
// and accepts sharded checkpoints.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "backend/registry.h"
#include "model/init.h"
#include "model/qwen35.h"
#include "test_util.h"

namespace kiln {
namespace {

namespace fs = std::filesystem;

class Loader : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = testing::temp_dir("loader");
    ASSERT_FALSE(dir_.empty());
    InitOptions o;
    o.dtype = DType::kF32;
    o.quiet = true;
    ASSERT_TRUE(write_random_checkpoint(preset_config("tiny").value(), dir_, o).ok());
  }
  void TearDown() override { fs::remove_all(dir_); }

  Status load() {
    auto be = std::move(create_backend("cpu").value());
    auto m = Qwen35Model::load(dir_, *be);
    return m.status();
  }
  // Rewrites model.safetensors through `edit` (which may drop, replace or add tensors).
  template <typename F>
  void rewrite(F edit) {
    std::vector<std::pair<std::string, Tensor>> tensors;
    {
      auto ck = Checkpoint::open(dir_).value();
      for (const auto& [name, e] : ck.tensors()) {
        Tensor copy = Tensor::empty(e.tensor.shape(), e.tensor.dtype());
        std::memcpy(copy.raw(), e.tensor.raw(), e.tensor.nbytes());
        tensors.push_back({name, copy});
      }
    }
    edit(tensors);
    ASSERT_TRUE(write_safetensors(dir_ + "/model.safetensors", tensors).ok());
  }
  std::string read(const std::string& f) {
    std::ifstream in(dir_ + "/" + f, std::ios::binary);
    std::stringstream ss;
    ss << in.rdbuf();
    return ss.str();
  }
  void write(const std::string& f, const std::string& bytes) {
    std::ofstream out(dir_ + "/" + f, std::ios::binary | std::ios::trunc);
    out << bytes;
  }
  std::string dir_;
};

void expect_error(const Status& s, ErrorCode code, std::initializer_list<const char*> parts) {
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.code(), code) << s.to_string();
  for (const char* p : parts) EXPECT_NE(s.message().find(p), std::string::npos) << "'" << p << "' not in: " << s.message();
}

TEST_F(Loader, AcceptsTheFreshCheckpoint) { EXPECT_TRUE(load().ok()) << load().to_string(); }

TEST_F(Loader, MissingTensor) {
  rewrite([](auto& t) { std::erase_if(t, [](auto& p) { return p.first == "model.layers.3.self_attn.k_norm.weight"; }); });
  expect_error(load(), ErrorCode::kNotFound, {"missing tensor 'model.layers.3.self_attn.k_norm.weight'", "[32]"});
}

TEST_F(Loader, WrongShape) {
  rewrite([](auto& t) {
    for (auto& [n, x] : t)
      if (n == "model.layers.1.linear_attn.in_proj_z.weight") x = Tensor::empty({63, 64}, DType::kF32);
  });
  expect_error(load(), ErrorCode::kInvalidArgument,
               {"'model.layers.1.linear_attn.in_proj_z.weight'", "[63, 64]", "expected [64, 64]", "model.safetensors"});
}

TEST_F(Loader, UnexpectedTensor) {
  rewrite([](auto& t) { t.push_back({"model.layers.0.mystery.weight", Tensor::empty({2}, DType::kF32)}); });
  expect_error(load(), ErrorCode::kInvalidArgument, {"unexpected tensor 'model.layers.0.mystery.weight'"});
}

TEST_F(Loader, IgnoresVisionAndMtpTensors) {
  rewrite([](auto& t) {
    t.push_back({"model.visual.blocks.0.weight", Tensor::empty({2}, DType::kF32)});
    t.push_back({"mtp.fc.weight", Tensor::empty({2}, DType::kF32)});
  });
  EXPECT_TRUE(load().ok()) << load().to_string();
}

TEST_F(Loader, TruncatedFile) {
  std::string bytes = read("model.safetensors");
  write("model.safetensors", bytes.substr(0, bytes.size() - 100));
  expect_error(load(), ErrorCode::kFormatError, {"truncated file", "model.safetensors"});
  write("model.safetensors", bytes.substr(0, 5));
  expect_error(load(), ErrorCode::kFormatError, {"truncated file"});
  write("model.safetensors", bytes.substr(0, 200));  // cut inside the header
  expect_error(load(), ErrorCode::kFormatError, {"truncated file", "header claims"});
}

TEST_F(Loader, CorruptHeaderJson) {
  std::string bytes = read("model.safetensors");
  bytes[8] = 'X';  // the header's opening brace
  write("model.safetensors", bytes);
  expect_error(load(), ErrorCode::kFormatError, {"corrupt header JSON", "model.safetensors"});
}

TEST_F(Loader, UnknownDtype) {
  std::string bytes = read("model.safetensors");
  auto at = bytes.find("\"F32\"");
  ASSERT_NE(at, std::string::npos);
  bytes.replace(at, 5, "\"F64\"");
  write("model.safetensors", bytes);
  expect_error(load(), ErrorCode::kFormatError, {"unknown dtype 'F64'"});
}

TEST_F(Loader, MissingConfigKey) {
  auto j = nlohmann::json::parse(read("config.json"));
  j.erase("hidden_size");
  write("config.json", j.dump());
  expect_error(load(), ErrorCode::kInvalidArgument, {"config.json", "missing key 'hidden_size'"});
}

TEST_F(Loader, MissingRopeThetaAndBadLayerType) {
  auto j = nlohmann::json::parse(read("config.json"));
  auto original = j;
  j.erase("rope_parameters");
  write("config.json", j.dump());
  expect_error(load(), ErrorCode::kInvalidArgument, {"rope_theta"});
  j = original;
  j["layer_types"][2] = "sliding_attention";
  write("config.json", j.dump());
  expect_error(load(), ErrorCode::kInvalidArgument, {"unknown layer type 'sliding_attention'"});
}

TEST_F(Loader, ShardedCheckpointLoadsAndMatches) {
  auto be = std::move(create_backend("cpu").value());
  auto whole = Checkpoint::open(dir_).value();
  std::vector<std::pair<std::string, Tensor>> a, b;
  nlohmann::json index = {{"metadata", {{"total_size", 0}}}, {"weight_map", nlohmann::json::object()}};
  int i = 0;
  for (const auto& [name, e] : whole.tensors()) {
    auto& dst = (i++ % 2) ? a : b;
    dst.push_back({name, e.tensor});
    index["weight_map"][name] = (&dst == &a) ? "model-00001-of-00002.safetensors" : "model-00002-of-00002.safetensors";
  }
  ASSERT_TRUE(write_safetensors(dir_ + "/model-00001-of-00002.safetensors", a).ok());
  ASSERT_TRUE(write_safetensors(dir_ + "/model-00002-of-00002.safetensors", b).ok());
  write("model.safetensors.index.json", index.dump());
  auto sharded = Checkpoint::open(dir_);
  ASSERT_TRUE(sharded.ok()) << sharded.status().to_string();
  EXPECT_EQ(sharded.value().tensors().size(), whole.tensors().size());
  EXPECT_TRUE(load().ok());
  // A weight_map entry pointing at a shard that lacks the tensor is refused.
  bool norm_in_a = false;
  for (auto& p : a) norm_in_a |= p.first == "model.norm.weight";
  index["weight_map"]["model.norm.weight"] = norm_in_a ? "model-00002-of-00002.safetensors" : "model-00001-of-00002.safetensors";
  write("model.safetensors.index.json", index.dump());
  expect_error(Checkpoint::open(dir_).status(), ErrorCode::kFormatError, {"'model.norm.weight'"});
}

// The CPU's storage with a weight arena of host memory, as a device backend keeps one.
class ArenaStorage final : public StorageFacet {
 public:
  explicit ArenaStorage(StorageFacet& inner) : inner_(inner) {}
  Result<Tensor> allocate(Shape shape, DType dtype) override { return inner_.allocate(shape, dtype); }
  Result<Tensor> upload(const Tensor& host) override {
    ++uploads;
    return inner_.upload(host);
  }
  Result<std::shared_ptr<Storage>> weight_arena(size_t bytes) override {
    arena = allocate_host(bytes);
    return arena;
  }
  Status copy_from_host(const Tensor& src, const Tensor& dst) override { return inner_.copy_from_host(src, dst); }
  Status copy_to_host(const Tensor& src, const Tensor& dst) override { return inner_.copy_to_host(src, dst); }
  Status zero(const Tensor& dst) override { return inner_.zero(dst); }
  Status copy(const Tensor& src, const Tensor& dst) override { return inner_.copy(src, dst); }
  Status synchronize() override { return inner_.synchronize(); }
  std::shared_ptr<Storage> arena;
  int uploads = 0;

 private:
  StorageFacet& inner_;
};

// Where the backend keeps a weight arena, every weight lands in it (no upload of its own), at
// 256-byte aligned offsets that do not overlap, filling exactly the block asked for, and holds
// the bytes a plain load gives; the tied LM head is the embedding's view.
TEST_F(Loader, WeightsFillTheBackendsArenaAlignedAndWhole) {
  for (bool tied : {false, true}) {
    SCOPED_TRACE(tied ? "tied" : "untied");
    ModelConfig c = preset_config("tiny").value();
    c.tie_word_embeddings = tied;
    InitOptions o;
    o.dtype = DType::kBF16;  // projections stay bf16, small parameters become f32: two sizes placed
    o.quiet = true;
    fs::remove_all(dir_);
    ASSERT_TRUE(write_random_checkpoint(c, dir_, o).ok());
    const ModelConfig config = ModelConfig::load(dir_).value();
    const Checkpoint ckpt = Checkpoint::open(dir_).value();
    auto be = create_backend("cpu").value();
    const ModelWeights plain = load_weights(config, ckpt, be->storage()).value();
    EXPECT_EQ(plain.arena_bytes, 0u);
    ArenaStorage arena_storage(be->storage());
    auto placed = load_weights(config, ckpt, arena_storage);
    ASSERT_TRUE(placed.ok()) << placed.status().to_string();
    EXPECT_EQ(arena_storage.uploads, 0);
    ASSERT_TRUE(arena_storage.arena);
    EXPECT_EQ(placed->arena_bytes, arena_storage.arena->bytes());
    EXPECT_EQ(placed->tied, tied);
    if (tied) {
      EXPECT_EQ(placed->lm_head.raw(), placed->embed.raw());
    }
    const std::vector<const Tensor*> got = placed->tensors(), want = plain.tensors();
    ASSERT_EQ(got.size(), want.size());
    std::vector<std::pair<size_t, size_t>> spans;  // [offset, end) in the arena
    const char* base = static_cast<const char*>(arena_storage.arena->data());
    for (size_t i = 0; i < got.size(); ++i) {
      ASSERT_EQ(got[i]->storage(), arena_storage.arena) << got[i]->describe();
      const size_t at = static_cast<size_t>(static_cast<const char*>(got[i]->raw()) - base);
      EXPECT_EQ(at % 256, 0u) << got[i]->describe();
      ASSERT_EQ(got[i]->dtype(), want[i]->dtype());
      ASSERT_EQ(got[i]->shape(), want[i]->shape());
      EXPECT_EQ(std::memcmp(got[i]->raw(), want[i]->raw(), want[i]->nbytes()), 0) << got[i]->describe();
      spans.push_back({at, at + got[i]->nbytes()});
    }
    std::sort(spans.begin(), spans.end());
    size_t aligned = 0;
    for (size_t i = 0; i < spans.size(); ++i) {
      if (i + 1 < spans.size()) {
        EXPECT_LE(spans[i].second, spans[i + 1].first) << "tensors " << i << " and " << i + 1 << " overlap";
      }
      aligned += (spans[i].second - spans[i].first + 255) / 256 * 256;
    }
    EXPECT_EQ(aligned, placed->arena_bytes);
  }
}

TEST(ModelInit, SameSeedSameBytesOtherSeedDiffers) {
  auto d1 = testing::temp_dir("init1"), d2 = testing::temp_dir("init2"), d3 = testing::temp_dir("init3");
  InitOptions o;
  o.quiet = true;
  auto cfg = preset_config("tiny").value();
  ASSERT_TRUE(write_random_checkpoint(cfg, d1, o).ok());
  ASSERT_TRUE(write_random_checkpoint(cfg, d2, o).ok());
  o.seed = 1;
  ASSERT_TRUE(write_random_checkpoint(cfg, d3, o).ok());
  auto slurp = [](const std::string& p) {
    std::ifstream in(p, std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(in), {});
  };
  EXPECT_EQ(slurp(d1 + "/model.safetensors"), slurp(d2 + "/model.safetensors"));
  EXPECT_NE(slurp(d1 + "/model.safetensors"), slurp(d3 + "/model.safetensors"));
  auto ck = Checkpoint::open(d1).value();
  EXPECT_EQ(ck.find("model.embed_tokens.weight")->tensor.dtype(), DType::kBF16);
  EXPECT_EQ(ck.find("lm_head.weight"), nullptr);  // the tiny preset is tied
  EXPECT_EQ(preset_config("nope").status().code(), ErrorCode::kInvalidArgument);
  for (auto& d : {d1, d2, d3}) fs::remove_all(d);
}

}  // namespace
}  // namespace kiln
