#include "cli/default_model.h"

#include <cstdio>
#include <cstdlib>
#include <filesystem>

#include "hub/resolve.h"
#include "model/init.h"

namespace kiln::cli {

namespace {

std::string kiln_home() {
  std::string home;
  if (const char* k = std::getenv("KILN_HOME")) home = k;
  else if (const char* x = std::getenv("XDG_CACHE_HOME")) home = std::string(x) + "/kiln";
  else if (const char* h = std::getenv("HOME")) home = std::string(h) + "/.cache/kiln";
  else home = ".cache/kiln";
  return home;
}

}  // namespace

Status resolve_configured_model(KilnConfig& config) {
  if (config.model.path.empty()) return {};
  auto m = hub::resolve_model_from_env(config.model.path);
  if (!m.ok()) return m.status().with_context("model.path");
  if (config.model.served_model_id.empty() && !m->repo_id.empty()) config.model.served_model_id = m->repo_id;
  config.model.path = m->dir;
  return {};
}

Result<std::string> resolve_model_dir(const std::string& flag) {
  if (!flag.empty()) {
    KILN_ASSIGN_OR_RETURN(hub::ResolvedModel m, hub::resolve_model_from_env(flag));
    return m.dir;
  }
  const std::string dir = kiln_home() + "/models/small-seed0-bf16";
  if (std::filesystem::exists(dir + "/config.json")) return dir;
  std::fprintf(stderr, "no --model given: creating the default random-weight 'small' checkpoint in %s\n", dir.c_str());
  KILN_ASSIGN_OR_RETURN(ModelConfig config, preset_config("small"));
  KILN_RETURN_IF_ERROR(write_random_checkpoint(config, dir, {}));
  return dir;
}

}  // namespace kiln::cli

namespace kiln::cli {

Result<std::string> demo_model_dir() {
  namespace fs = std::filesystem;
  const std::string dir = kiln_home() + "/models/demo-seed0-bf16";
  if (fs::exists(dir + "/config.json") && fs::exists(dir + "/tokenizer.json")) return dir;
  std::string tok;
  if (const char* t = std::getenv("KILN_TOKENIZER_DIR")) tok = t;
  else tok = std::string(KILN_SOURCE_DIR) + "/.cache/tokenizers/qwen3";
  if (!fs::exists(tok + "/tokenizer.json") || !fs::exists(tok + "/tokenizer_config.json"))
    return not_found("the demo model needs the Qwen3 tokenizer (tokenizer.json + tokenizer_config.json) in " + tok +
                     ": run scripts/fetch-tokenizer, set KILN_TOKENIZER_DIR, or pass --model DIR");
  std::fprintf(stderr, "kiln: creating the random-weight demo model in %s (once)\n", dir.c_str());
  const std::string tmp = dir + ".partial";
  std::error_code ec;
  fs::remove_all(tmp, ec);
  KILN_ASSIGN_OR_RETURN(ModelConfig config, preset_config("demo"));
  KILN_RETURN_IF_ERROR(write_random_checkpoint(config, tmp, {}));
  for (const char* f : {"tokenizer.json", "tokenizer_config.json"}) {
    fs::copy_file(tok + "/" + f, tmp + "/" + f, fs::copy_options::overwrite_existing, ec);
    if (ec) return io_error(tmp + "/" + f + ": " + ec.message());
  }
  fs::remove_all(dir, ec);
  fs::rename(tmp, dir, ec);
  if (ec) return io_error("cannot move " + tmp + " to " + dir + ": " + ec.message());
  return dir;
}

}  // namespace kiln::cli
