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

}  // namespace kiln
