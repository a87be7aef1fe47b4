#include "qualify/environment_filter.h"

#include <cstdlib>

namespace kiln::qualify {

const std::vector<std::string>& inherited_environment_names() {
  // Enough to find programs, locales, a temp dir and the selected devices; nothing that carries
  // credentials or network configuration.
  static const std::vector<std::string> kNames = {
      "PATH", "HOME", "USER", "LOGNAME", "LANG", "LC_ALL", "TZ", "TMPDIR",
      "LD_LIBRARY_PATH", "CUDA_VISIBLE_DEVICES", "NVIDIA_VISIBLE_DEVICES", "HIP_VISIBLE_DEVICES", "VK_DRIVER_FILES",
      "VK_ICD_FILENAMES", "KILN_VULKAN_DEVICE"};
  return kNames;
}

std::vector<std::string> filtered_environment() {
  std::vector<std::string> env;
  for (const std::string& name : inherited_environment_names()) {
    if (const char* v = std::getenv(name.c_str())) env.push_back(name + "=" + v);
  }
  return env;
}

void set_environment(std::vector<std::string>& env, const std::string& name, const std::string& value) {
  std::string prefix = name + "=";
  for (std::string& e : env) {
    if (e.rfind(prefix, 0) == 0) {
      e = prefix + value;
      return;
    }
  }
  env.push_back(prefix + value);
}

}  // namespace kiln::qualify
