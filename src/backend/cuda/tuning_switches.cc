#include "backend/cuda/tuning_switches.h"

#include <iterator>

namespace kiln::cuda {

namespace {

constexpr TuningSwitch kSwitches[] = {
      {"KILN_CUDA_GEMV=0", "16-bit GEMMs of up to 8 rows go to cuBLASLt (x rounded)"},
      {"KILN_CUDA_SKINNY=0", "no skinny GEMM: 9..16-row bf16 GEMMs go to cuBLASLt"},
      {"KILN_CUDA_GEMM_AUTOTUNE=0",
       "nothing is timed: cuBLASLt takes the heuristic's first algorithm, the H200's rules pick every kernel choice"},
      {"KILN_CUDA_GEMM_AUTOTUNE_MAX_M=<m>", "largest m whose GEMMs are timed (256)"},
      {"KILN_CUDA_GDN_FUSED=0",
       "the fused GDN decode step is declined (conv, delta rule and gated norm as separate calls)"},
      {"KILN_CUDA_GDN_TF32=0",
       "the two-pass GDN keeps 3xTF32 where `GdnArgs::compute` allows rounding"},
      {"KILN_CUDA_GDN_BACKWARD_TF32=0",
       "the GDN gradient pass keeps 3xTF32 where bf16 is allowed"},
      {"KILN_CUDA_ATTN_DECODE_BLOCKS_PER_SM=<n>",
       "f32 decode attention splits keys until about n blocks an SM run"},
      {"KILN_CUDA_ATTN_MMA_UNITS=<n>",
       "tensor-core decode attention splits keys until units come to about n a warp"},
      {"KILN_CUDA_FLASH_PREFILL=0",
       "bf16-allowed prefill attention stays on the f32 kernels"},
      {"KILN_CUDA_FLASH_BACKWARD=0",
       "the bf16-allowed attention backward keeps the TF32 cuBLAS form"},
      {"KILN_CUDA_FLASH_DS_MB=<mb>",
       "most scratch the dS tiles may take for a one-GEMM dQ (1024; 0: dQ recomputes)"},
      {"KILN_CUDA_GRAPHS=0", "every decode step runs eagerly (no graph replay)"},
      {"KILN_CUDA_PDL=0", "decode-path kernels launch without programmatic dependent launch"},
      {"KILN_CUDA_KV_BF16=0", "no bf16 K/V: a bf16 checkpoint keeps K/V in f32"},
};

}  // namespace

std::span<const TuningSwitch> tuning_switches() { return kSwitches; }

std::string_view switch_variable(const TuningSwitch& s) { return s.setting.substr(0, s.setting.find('=')); }

std::string tuning_switches_markdown() {
  std::string out = "| variable | effect |\n|---|---|\n";
  for (const TuningSwitch& s : kSwitches) {
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

}  // namespace kiln::cuda
