#include "cli/default_model.h"

#include <cstdio>
#include <cstdlib>
#include <filesystem>

#include "model/init.h"

namespace kiln::cli {

Result<std::string> resolve_model_dir(const std::string& flag) {
  if (!flag.empty()) return flag;
  std::string home;
  if (const char* k = std::getenv("KILN_HOME")) home = k;
  else if (const char* x = std::getenv("XDG_CACHE_HOME")) home = std::string(x) + "/kiln";
  else if (const char* h = std::getenv("HOME")) home = std::string(h) + "/.cache/kiln";
  else home = ".cache/kiln";
  const std::string dir = home + "/models/small-seed0-bf16";
  if (std::filesystem::exists(dir + "/config.json")) return dir;
  std::fprintf(stderr, "no --model given: creating the default random-weight 'small' checkpoint in %s\n", dir.c_str());
  KILN_ASSIGN_OR_RETURN(ModelConfig config, preset_config("small"));
  KILN_RETURN_IF_ERROR(write_random_checkpoint(config, dir, {}));
  return dir;
}

}  // namespace kiln::cli
