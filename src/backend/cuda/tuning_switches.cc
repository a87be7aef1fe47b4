#include "backend/cuda/tuning_switches.h"

#include <iterator>

namespace kiln::cuda {

namespace {

constexpr TuningSwitch kSwitches[] = {
      {"KILN_CUDA_GEMV=0", "16-bit GEMMs of up to 8 rows go to cuBLASLt (x rounded)"},
      {"KILN_CUDA_GEMV_MAX_M=<m>", "largest m the GEMV takes (1..8)"},
      {"KILN_CUDA_GEMV_MAX_N=<n>", "largest n (weight rows) the GEMV takes"},
      {"KILN_CUDA_GEMV_ROWS=<r>",
       "weight rows a GEMV warp takes (1, 2, 4; -1: the block-split form for every n)"},
      {"KILN_CUDA_SKINNY=0 / =all",
       "no skinny GEMM / the skinny GEMM for every 16-bit GEMM of up to 64 rows the GEMV does not take"},
      {"KILN_CUDA_SKINNY_MAX_M=<m>", "largest m the skinny GEMM takes (0..64)"},
      {"KILN_CUDA_SKINNY_SPLITS=<s>",
       "blocks of a cluster splitting a tile's k (1..16; unset: by occupancy)"},
      {"KILN_CUDA_SKINNY_WGMMA=0", "the skinny GEMM's mma.sync form"},
      {"KILN_CUDA_GEMM_AUTOTUNE=0",
       "nothing is timed: cuBLASLt takes the heuristic's first algorithm, the H200's rules pick kernels"},
      {"KILN_CUDA_GEMM_AUTOTUNE_MAX_M=<m>", "largest m whose GEMMs are timed (256)"},
      {"KILN_CUDA_GDN_CHUNKED=0", "chunked GDN requests run the recurrent kernel"},
      {"KILN_CUDA_GDN_TWO_PASS=0", "the chunked form runs as one kernel"},
      {"KILN_CUDA_GDN_FUSED=0",
       "the fused GDN decode step is declined (conv, delta rule and gated norm as separate calls)"},
      {"KILN_CUDA_GDN_TF32=0",
       "the two-pass GDN keeps 3xTF32 where `GdnArgs::compute` allows rounding"},
      {"KILN_CUDA_GDN_BACKWARD=registers",
       "the GDN backward's register walk instead of the chunked form (read at every call)"},
      {"KILN_CUDA_GDN_BACKWARD_TF32=0",
       "the GDN gradient pass keeps 3xTF32 where bf16 is allowed"},
      {"KILN_CUDA_CONV_SEQUENTIAL=1",
       "the conv runs a thread per channel over all of a row's tokens"},
      {"KILN_CUDA_ATTN_DECODE_BLOCKS_PER_SM=<n>",
       "f32 decode attention splits keys until about n blocks an SM run"},
      {"KILN_CUDA_ATTN_DECODE_MMA=0",
       "decode attention stays on the f32 kernels over a bf16 cache"},
      {"KILN_CUDA_ATTN_MMA_UNITS=<n>",
       "tensor-core decode attention splits keys until units come to about n a warp"},
      {"KILN_CUDA_ATTN_MMA_STAGES=<s>", "its shared-memory stages (2 or 3)"},
      {"KILN_CUDA_ATTN_KEY_GROUPS=0",
       "f32 decode attention keeps lanes over dims (a warp reduction a key and head)"},
      {"KILN_CUDA_ATTENTION=simple",
       "the one-block-per-(token, head) kernel for every request"},
      {"KILN_CUDA_FLASH_PREFILL=0",
       "bf16-allowed prefill attention stays on the f32 kernels"},
      {"KILN_CUDA_FLASH_BACKWARD=0",
       "the bf16-allowed attention backward keeps the TF32 cuBLAS form"},
      {"KILN_CUDA_FLASH_DS_MB=<mb>",
       "most scratch the dS tiles may take for a one-GEMM dQ (1024; 0: dQ recomputes)"},
      {"KILN_CUDA_NORM_VEC4=0", "RMSNorm keeps the strided loop for every row"},
      {"KILN_CUDA_GRAPHS=0", "every decode step runs eagerly (no graph replay)"},
      {"KILN_CUDA_BF16_OPERANDS=0",
       "no op writes a GEMM operand in 16 bits: every GEMM rounds an f32 x"},
      {"KILN_CUDA_LORA_KERNEL=0",
       "short LoRA segments run the matmul sequence (three matmuls a segment and adapter)"},
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
