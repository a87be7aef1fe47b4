#include "backend/native_switches.h"

#include <cstdlib>

namespace kiln {

namespace {

constexpr NativeSwitch kSwitches[] = {
    {"cuda", "KILN_CUDA_GEMV=0", "16-bit GEMMs of up to 8 rows go to cuBLASLt (x rounded)", "0"},
    {"cuda", "KILN_CUDA_SKINNY=0", "no skinny GEMM: 9..16-row bf16 GEMMs go to cuBLASLt", "0"},
    {"cuda", "KILN_CUDA_GEMM_AUTOTUNE=0",
     "nothing is timed: cuBLASLt takes the heuristic's first algorithm, the H200's rules pick every kernel choice", "0"},
    {"cuda", "KILN_CUDA_GEMM_AUTOTUNE_MAX_M=<m>", "largest m whose GEMMs are timed (256)", "16"},
    {"cuda", "KILN_CUDA_GDN_FUSED=0",
     "the fused GDN decode step is declined (conv, delta rule and gated norm as separate calls)", "0"},
    {"cuda", "KILN_CUDA_GDN_TF32=0", "the two-pass GDN keeps 3xTF32 where `GdnArgs::compute` allows rounding", "0"},
    {"cuda", "KILN_CUDA_GDN_BACKWARD_TF32=0", "the GDN gradient pass keeps 3xTF32 where bf16 is allowed", "0"},
    {"cuda", "KILN_CUDA_ATTN_DECODE_BLOCKS_PER_SM=<n>", "f32 decode attention splits keys until about n blocks an SM run",
     "1"},
    {"cuda", "KILN_CUDA_ATTN_MMA_UNITS=<n>",
     "tensor-core decode attention splits keys until units come to about n a warp", "4"},
    {"cuda", "KILN_CUDA_FLASH_PREFILL=0", "bf16-allowed prefill attention stays on the f32 kernels", "0"},
    {"cuda", "KILN_CUDA_FLASH_BACKWARD=0", "the bf16-allowed attention backward keeps the TF32 cuBLAS form", "0"},
    {"cuda", "KILN_CUDA_FLASH_DS_MB=<mb>",
     "most scratch the dS tiles may take for a one-GEMM dQ (1024; 0: dQ recomputes)", "0"},
    {"cuda", "KILN_CUDA_GRAPHS=0", "every decode step runs eagerly (no graph replay)", "0"},
    {"cuda", "KILN_CUDA_PDL=0", "decode-path kernels launch without programmatic dependent launch", "0"},
    {"cuda", "KILN_CUDA_KV_BF16=0", "no bf16 K/V: a bf16 checkpoint keeps K/V in f32", "0"},
    {"cuda", "KILN_CUDA_TARGET=sm80 / =sm86 / =sm89 / =sm120",
     "kernels are chosen as on such a device (its shared memory per block, no sm_90 features); the report's "
     "target says which",
     "sm80 sm86 sm89 sm120"},
    {"cuda", "KILN_CUDA_MEMORY_LIMIT_GB=<gib>",
     "the memory pools behave as a card of that size would; the reported device memory is the limit", "24"},
    {"cuda", "KILN_CUDA_KERNEL_CHOICES=<file>",
     "the timed kernel choices are kept in this file instead of ~/.cache/kiln/cuda-kernel-choices.json",
     "/tmp/kiln-switch-audit-kernel-choices.json"},
    {"cuda", "KILN_CUDA_PROFILE=1",
     "per-name device and host time of every facet call, printed when the backend goes away; graph replay off", "1"},
    {"cuda", "KILN_CUDA_SYNC=1", "synchronise after every launch, so that an asynchronous fault names its kernel", "1"},
    {"cuda", "CUDA_FORCE_PTX_JIT=1",
     "the driver's own: every kernel compiled from the embedded PTX (the target reads \"+ PTX JIT\"); not audited, "
     "since CUDA 13's cuBLAS ships no PTX and its handles then fail to create",
     ""},
    {"vulkan", "KILN_VULKAN_DEVICE=<index or name>",
     "the device opened (its index, or a substring of its name); default: the first discrete GPU, else integrated, "
     "else any",
     "0"},
    {"vulkan", "KILN_VULKAN_VALIDATION=1",
     "the Khronos validation layer checks every call; not audited, since the layer is a separate install", ""},
    {"vulkan", "KILN_VULKAN_PROFILE=1", "each command's device time, printed when the backend goes away", "1"},
    {"vulkan", "KILN_VULKAN_TILED_PREFILL=0",
     "prefill attention takes a workgroup a query token (attention.comp) instead of a tile of tokens", "0"},
};

}  // namespace

std::span<const NativeSwitch> native_switches() { return kSwitches; }

std::string_view switch_variable(const NativeSwitch& s) { return s.setting.substr(0, s.setting.find('=')); }

std::vector<std::string> switch_audit_values(const NativeSwitch& s) {
  std::vector<std::string> out;
  for (std::string_view rest = s.audit; !rest.empty();) {
    const size_t cut = rest.find(' ');
    if (cut != 0) out.emplace_back(rest.substr(0, cut));
    rest = cut == std::string_view::npos ? std::string_view() : rest.substr(cut + 1);
  }
  return out;
}

std::map<std::string, std::string> native_switches_in_effect() {
  std::map<std::string, std::string> out;
  for (const NativeSwitch& s : kSwitches) {
    const std::string name(switch_variable(s));
    if (const char* v = std::getenv(name.c_str()); v != nullptr && v[0] != '\0') out[name] = v;
  }
  return out;
}

std::string native_switches_markdown(std::string_view backend) {
  std::string out = "| variable | effect |\n|---|---|\n";
  for (const NativeSwitch& s : kSwitches) {
    if (s.backend != backend) continue;
    std::string cell;
    for (std::string_view rest = s.setting; !rest.empty();) {
      const size_t cut = rest.find(" / ");
      cell += (cell.empty() ? "`" : " / `") + std::string(rest.substr(0, cut)) + "`";
      rest = cut == std::string_view::npos ? std::string_view() : rest.substr(cut + 3);
    }
    out += "| " + cell + " | " + std::string(s.effect) + " |\n";
  }
  return out;
}

}  // namespace kiln
