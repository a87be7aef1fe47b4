#include "qualify/model_fingerprint.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "core/sha256.h"

namespace kiln::qualify {
namespace fs = std::filesystem;

bool ModelFingerprint::same_identity(const ModelFingerprint& o) const {
  if (weight_files.size() != o.weight_files.size()) return false;
  for (size_t i = 0; i < weight_files.size(); ++i) {
    const WeightFile& a = weight_files[i];
    const WeightFile& b = o.weight_files[i];
    if (a.path != b.path || a.sha256 != b.sha256 || a.bytes != b.bytes) return false;
  }
  return config_hash == o.config_hash && tokenizer_hash == o.tokenizer_hash &&
         chat_template_hash == o.chat_template_hash;
}

namespace {

Result<std::optional<std::string>> hash_if_present(const fs::path& file) {
  std::error_code ec;
  if (!fs::is_regular_file(file, ec)) return std::optional<std::string>();
  KILN_ASSIGN_OR_RETURN(FileDigest d, sha256_file(file.string()));
  return std::optional<std::string>("sha256:" + d.sha256);
}

}  // namespace

Result<ModelFingerprint> fingerprint_model(const std::string& dir, const std::string& id) {
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) return not_found("model directory " + dir + " does not exist");
  ModelFingerprint fp;
  fp.id = id.empty() ? fs::path(dir).lexically_normal().filename().string() : id;
  if (fp.id.empty()) fp.id = fs::absolute(dir).parent_path().filename().string();
  for (const fs::directory_entry& e : fs::directory_iterator(dir, ec)) {
    std::string name = e.path().filename().string();
    bool weights = name.size() > 12 && name.compare(name.size() - 12, 12, ".safetensors") == 0;
    bool index = name == "model.safetensors.index.json";
    if (!(weights || index) || !e.is_regular_file()) continue;
    KILN_ASSIGN_OR_RETURN(FileDigest d, sha256_file(e.path().string()));
    fp.weight_files.push_back({name, d.sha256, d.bytes});
  }
  if (ec) return io_error("cannot list " + dir + ": " + ec.message());
  std::sort(fp.weight_files.begin(), fp.weight_files.end(),
            [](const WeightFile& a, const WeightFile& b) { return a.path < b.path; });
  if (fp.weight_files.empty()) return not_found("model directory " + dir + " has no *.safetensors files");

  fs::path root(dir);
  KILN_ASSIGN_OR_RETURN(fp.config_hash, hash_if_present(root / "config.json"));
  KILN_ASSIGN_OR_RETURN(fp.tokenizer_hash, hash_if_present(root / "tokenizer.json"));
  KILN_ASSIGN_OR_RETURN(fp.chat_template_hash, hash_if_present(root / "chat_template.jinja"));
  if (fp.chat_template_hash) {
    fp.chat_template_source = "chat_template.jinja";
  } else if (fs::is_regular_file(root / "tokenizer_config.json", ec)) {
    std::ifstream in(root / "tokenizer_config.json", std::ios::binary);
    std::stringstream ss;
    ss << in.rdbuf();
    nlohmann::json cfg = nlohmann::json::parse(ss.str(), nullptr, /*allow_exceptions=*/false);
    if (cfg.is_discarded()) return format_error((root / "tokenizer_config.json").string() + " is not valid JSON");
    if (cfg.is_object() && cfg.contains("chat_template") && cfg["chat_template"].is_string()) {
      fp.chat_template_hash = "sha256:" + sha256_hex(cfg["chat_template"].get<std::string>());
      fp.chat_template_source = "tokenizer_config.json#chat_template";
    }
  }
  return fp;
}

}  // namespace kiln::qualify
