// The backends this binary knows of: those compiled in can be created; the rest are listed as
// not built, so reports show them rather than pretend.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "backend/backend.h"

namespace kiln {

struct BackendEntry {
  std::string name;
  bool built = false;
  std::string build_flags;  // how it was compiled, or why it was not
};

// What picks a backend's device, where it has a choice: the configuration's `vulkan` section
// (kiln serve), else the environment's KILN_VULKAN_DEVICE and KILN_VULKAN_VALIDATION (the
// configuration's own variables for them).
struct BackendOptions {
  std::string vulkan_device;  // "": the first discrete GPU, else integrated, else any; a number or a name substring
  bool vulkan_validation = false;
  static BackendOptions from_env();
};

const std::vector<BackendEntry>& backend_registry();
Result<std::unique_ptr<Backend>> create_backend(std::string_view name,
                                                const BackendOptions& options = BackendOptions::from_env());

// `auto`: CUDA where a device this build has code for is present, else a Vulkan GPU (a CPU driver
// such as lavapipe does not count: the CPU backend is faster), else the CPU. What was passed over
// for a reason worth a line (a device there but unusable) goes to `notes`.
Result<std::unique_ptr<Backend>> create_auto_backend(const BackendOptions& options, std::vector<std::string>& notes);

}  // namespace kiln
