#include "backend/registry.h"

#include <cstdlib>

#include "backend/cpu/cpu_backend.h"
#ifdef KILN_HAVE_CUDA
#include "backend/cuda/cuda_backend.h"
#endif
#ifdef KILN_HAVE_VULKAN
#include "backend/vulkan/vulkan_backend.h"
#endif

namespace kiln {

BackendOptions BackendOptions::from_env() {
  BackendOptions o;
  if (const char* d = std::getenv("KILN_VULKAN_DEVICE")) o.vulkan_device = d;
  if (const char* v = std::getenv("KILN_VULKAN_VALIDATION")) o.vulkan_validation = std::string(v) == "1" || std::string(v) == "true";
  return o;
}

const std::vector<BackendEntry>& backend_registry() {
  static const std::vector<BackendEntry> entries = {
      {"cpu", true, "openblas, " KILN_CPU_ARCH_STRING},
#ifdef KILN_HAVE_CUDA
      {"cuda", true, "nvcc: machine code for KILN_CUDA_ARCHS (default sm_80, sm_86, sm_89, sm_90a, sm_120) and compute_80 PTX"},
#else
      {"cuda", false, "not configured: nvcc not found, or KILN_ENABLE_CUDA=OFF"},
#endif
#ifdef KILN_HAVE_VULKAN
      {"vulkan", true, "glslc: SPIR-V for Vulkan 1.2 (buffer device addresses), embedded"},
#else
      {"vulkan", false, "not configured: libvulkan-dev or glslc not found, or KILN_ENABLE_VULKAN=OFF"},
#endif
      {"rocm", false, "no ROCm backend in this build"},
      {"metal", false, "no Metal backend in this build"},
  };
  return entries;
}

Result<std::unique_ptr<Backend>> create_backend(std::string_view name, const BackendOptions& options) {
  if (name == "cpu") return make_cpu_backend();
#ifdef KILN_HAVE_CUDA
  if (name == "cuda") return make_cuda_backend();  // an error naming the cause where there is no device
#endif
#ifdef KILN_HAVE_VULKAN
  if (name == "vulkan") return make_vulkan_backend({options.vulkan_device, options.vulkan_validation});
#endif
  for (const auto& e : backend_registry())
    if (e.name == name) return unsupported("backend '" + std::string(name) + "' is not built: " + e.build_flags);
  std::string known;
  for (const auto& e : backend_registry()) known += (known.empty() ? "" : ", ") + e.name;
  return not_found("unknown backend '" + std::string(name) + "' (known: " + known + ")");
}

Result<std::unique_ptr<Backend>> create_auto_backend(const BackendOptions& options, std::vector<std::string>& notes) {
  for (const char* name : {"cuda", "vulkan"}) {
    bool built = false;
    for (const auto& e : backend_registry()) built |= e.built && e.name == name;
    if (!built) continue;
    auto b = create_backend(name, options);
    if (b.ok() && b.value()->identity().warning.empty()) return b;
    // No device at all is the ordinary machine without one; a device there but unusable (too old,
    // no code for it in this build, a driver without what the shaders need) is worth a line.
    if (!b.ok() && b.status().code() != ErrorCode::kNotFound && b.status().message().rfind("no CUDA device", 0) != 0)
      notes.push_back(std::string("not ") + name + ": " + b.status().message());
  }
  return create_backend("cpu", options);
}

}  // namespace kiln
