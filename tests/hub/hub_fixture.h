// What the Hub tests share: a mock Hub (HTTPS CDN) serving a tiny sharded checkpoint, a fresh
// Hugging Face cache, settings pointing at both, and file helpers.
#pragma once

#include <gtest/gtest.h>
#include <stdlib.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "hub/hub_settings.h"
#include "hub/mock_hub.h"
#include "hub/pull.h"
#include "model/init.h"
#include "model/safetensors.h"
#include "test_util.h"

namespace kiln::testing {

inline std::string read_all(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

inline void write_all(const std::string& path, const std::string& bytes) {
  std::filesystem::create_directories(std::filesystem::path(path).parent_path());
  std::ofstream(path, std::ios::binary) << bytes;
}

// A FILE* whose text the test reads back.
struct CapturedLog {
  std::FILE* f = std::tmpfile();
  ~CapturedLog() { std::fclose(f); }
  std::string text() {
    std::fflush(f);
    std::rewind(f);
    std::string s;
    char buf[4096];
    size_t n;
    while ((n = std::fread(buf, 1, sizeof buf, f)) > 0) s.append(buf, n);
    return s;
  }
};

// The `tiny` checkpoint as the Hub holds a sharded model: config, tokenizer files, an index and
// two shards; plus files serving does not need (other formats, a README, a stray safetensors
// file the index does not name, a subfolder).
inline MockRepo tiny_sharded_repo(const std::string& id, uint64_t seed = 1) {
  const std::string dir = temp_dir("hub-src");
  EXPECT_TRUE(write_random_checkpoint(preset_config("tiny").value(), dir, {.seed = seed, .quiet = true}).ok());
  Checkpoint ck = Checkpoint::open(dir).value();
  std::vector<std::pair<std::string, Tensor>> a, b;
  nlohmann::json map = nlohmann::json::object();
  size_t i = 0;
  for (const auto& [name, e] : ck.tensors()) {
    const bool first = i++ % 2 == 0;
    (first ? a : b).push_back({name, e.tensor});
    map[name] = first ? "model-00001-of-00002.safetensors" : "model-00002-of-00002.safetensors";
  }
  EXPECT_TRUE(write_safetensors(dir + "/model-00001-of-00002.safetensors", a).ok());
  EXPECT_TRUE(write_safetensors(dir + "/model-00002-of-00002.safetensors", b).ok());
  MockRepo r;
  r.id = id;
  r.files["config.json"] = read_all(dir + "/config.json");
  r.files["model.safetensors.index.json"] = nlohmann::json({{"metadata", {{"total_size", 0}}}, {"weight_map", map}}).dump();
  r.files["model-00001-of-00002.safetensors"] = read_all(dir + "/model-00001-of-00002.safetensors");
  r.files["model-00002-of-00002.safetensors"] = read_all(dir + "/model-00002-of-00002.safetensors");
  r.files["tokenizer.json"] = R"({"version":"1.0","model":{"type":"BPE","vocab":{},"merges":[]}})";
  r.files["tokenizer_config.json"] = R"({"chat_template":"{{ messages }}"})";
  r.files["generation_config.json"] = R"({"eos_token_id":[1,2]})";
  r.files["pytorch_model.bin"] = "not for Kiln";
  r.files["README.md"] = "# tiny";
  r.files["consolidated.safetensors"] = "not named by the index";
  r.files["onnx/model.onnx"] = "onnx";
  return r;
}

// The serving files a pull of tiny_sharded_repo fetches.
inline std::vector<std::string> tiny_serving_files() {
  return {"config.json", "generation_config.json", "model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors",
          "model.safetensors.index.json", "tokenizer.json", "tokenizer_config.json"};
}

struct HubEnv {
  std::unique_ptr<MockHub> hub;
  hub::HubSettings settings;
  std::string cache;

  explicit HubEnv(bool cdn_https = true) {
    MockHub::Options o;
    o.cdn_https = cdn_https;
    o.cert_dir = temp_dir("hub-cert");
    hub = MockHub::start(o);
    EXPECT_NE(hub, nullptr);
    if (cdn_https) setenv("SSL_CERT_FILE", hub->ca_file().c_str(), 1);  // OpenSSL's default trust store
    cache = temp_dir("hf-cache");
    settings.cache_dir = cache;
    settings.endpoint = hub->endpoint();
  }
  ~HubEnv() { unsetenv("SSL_CERT_FILE"); }

  // Quick, quiet pulls: short backoff, no log unless `log` is given.
  hub::PullOptions options(std::FILE* log = nullptr) const {
    hub::PullOptions o;
    o.backoff_s = 0.01;
    o.log = log;
    o.disk_reserve_bytes = 0;
    return o;
  }
};

}  // namespace kiln::testing
