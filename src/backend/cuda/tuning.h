// Which kernel variant each CUDA facet runs, read once from the environment. The defaults are the
// measured winners (docs/cuda.md); the switches exist so that one binary can time a variant
// against its predecessor (`cuda_kernel_bench`, `kiln bench` with a variable set) and so that a
// suspected kernel can be ruled out without a rebuild.
// Every switch, its values and what it does: tuning_switches.cc (rendered into docs/cuda.md).
#pragma once

#include <algorithm>
#include <cstdlib>
#include <cstring>

namespace kiln::cuda {

struct Tuning {
  bool gemv = true;
  int gemv_max_m = 8;
  long long gemv_max_n = 1LL << 62;
  int gemv_rows = 0;  // rows a warp takes: 0 by shape, 1/2/4 forced, -1 the block-split form (GemvParams)
  bool skinny = true;
  bool skinny_everywhere = false;  // KILN_CUDA_SKINNY=all: not only where it measured faster
  int skinny_max_m = 64;
  int skinny_splits = 0;  // 0: by shape (SkinnyGemmParams::splits)
  bool skinny_wgmma = true;  // the skinny GEMM in its wgmma form (SkinnyGemmParams::wgmma)
  bool gemm_autotune = true;  // cuBLASLt candidates timed for decode-sized m (gemm_autotune.h)
  long long gemm_autotune_max_m = 256;
  bool gdn_chunked = true;
  bool gdn_two_pass = true;
  bool gdn_fused_decode = true;
  // The fused GDN decode step's form: -1 timed per shape (kernel_timing.h); 0 one kernel; 1..3 the
  // split kernels with that many stages (gdn_decode.h). Set by tests and the kernel benchmark.
  int gdn_decode_form = -1;
  bool conv_token_parallel = true;
  bool attention_split = true;  // the split-key GQA kernel where its shape allows
  int attention_decode_blocks_per_sm = 4;
  bool attention_key_groups = true;  // decode attention with 8 lanes a key (attention_key_groups_kernel)
  bool attention_decode_mma = true;   // bf16-allowed decode attention on tensor cores (paged_decode_mma.cu)
  int attention_mma_units_per_warp = 1;
  int attention_mma_stages = 2;
  bool flash_prefill = true;          // bf16-allowed prefill attention on tensor cores (flash_prefill.cu)
  // ... 0: where it timed faster than the f32 kernels for the shape (kernel_timing.h); n > 0:
  // exactly when the longest query row has at least n tokens (tests).
  long long flash_prefill_min_q_len = 0;
  bool flash_backward = true;  // bf16-allowed attention backward on tensor cores from the forward's lse (flash_backward.cu)
  long long flash_backward_ds_mb = 1024;  // ... its dQ from kept dS tiles while they take at most this many MB
  bool graphs = true;        // decode steps recorded as CUDA graphs and replayed (replay.cc)
  bool lora_kernel = true;   // short LoRA segments through kernels/lora.h (linear_lora.cc)
  bool bf16_operands = true;  // 16-bit GEMM operands written by their producer (silu-mul, prefill)
  bool norm_vec4 = true;     // RMSNorm rows of <= 4096 aligned floats: one float4 a thread (rms_norm.cu)
  bool gdn_tf32 = true;      // the two-pass GDN's products in one tf32 pass where GdnArgs::compute allows
  bool gdn_backward_tf32 = true;  // the GDN backward's gradient pass in one tf32 pass where its compute allows
  bool pdl = true;           // decode-path kernels with programmatic dependent launch (kernels/pdl.cuh)
  bool kv_bf16 = true;       // a bf16 K/V cache offered (capabilities().attention.kv_dtypes)
};

inline Tuning tuning_from_env() {
  auto flag = [](const char* name, bool dflt) {
    const char* v = std::getenv(name);
    return v == nullptr || v[0] == '\0' ? dflt : v[0] != '0';
  };
  Tuning t;
  t.gemv = flag("KILN_CUDA_GEMV", true);
  if (const char* m = std::getenv("KILN_CUDA_GEMV_MAX_M"); m != nullptr && m[0] != '\0') {
    const int v = std::atoi(m);
    t.gemv_max_m = v < 0 ? 0 : (v > 8 ? 8 : v);
  }
  if (const char* n = std::getenv("KILN_CUDA_GEMV_MAX_N"); n != nullptr && n[0] != '\0') t.gemv_max_n = std::atoll(n);
  if (const char* r = std::getenv("KILN_CUDA_GEMV_ROWS"); r != nullptr && r[0] != '\0') {
    const int v = std::atoi(r);
    t.gemv_rows = v < 0 ? -1 : (v == 1 || v == 2 || v == 4 ? v : 0);
  }
  t.skinny = flag("KILN_CUDA_SKINNY", true);
  if (const char* v = std::getenv("KILN_CUDA_SKINNY"); v != nullptr && std::strcmp(v, "all") == 0) t.skinny_everywhere = true;
  if (const char* m = std::getenv("KILN_CUDA_SKINNY_MAX_M"); m != nullptr && m[0] != '\0') {
    const int v = std::atoi(m);
    t.skinny_max_m = v < 0 ? 0 : (v > 64 ? 64 : v);
  }
  if (const char* m = std::getenv("KILN_CUDA_SKINNY_SPLITS"); m != nullptr && m[0] != '\0') {
    const int v = std::atoi(m);
    t.skinny_splits = v < 0 ? 0 : (v > 16 ? 16 : v);
  }
  t.skinny_wgmma = flag("KILN_CUDA_SKINNY_WGMMA", true);
  t.gemm_autotune = flag("KILN_CUDA_GEMM_AUTOTUNE", true);
  if (const char* m = std::getenv("KILN_CUDA_GEMM_AUTOTUNE_MAX_M"); m != nullptr && m[0] != '\0')
    t.gemm_autotune_max_m = std::atoll(m);
  t.gdn_chunked = flag("KILN_CUDA_GDN_CHUNKED", true);
  t.gdn_two_pass = flag("KILN_CUDA_GDN_TWO_PASS", true);
  t.gdn_fused_decode = flag("KILN_CUDA_GDN_FUSED", true);
  t.conv_token_parallel = !flag("KILN_CUDA_CONV_SEQUENTIAL", false);
  if (const char* n = std::getenv("KILN_CUDA_ATTN_DECODE_BLOCKS_PER_SM"); n != nullptr && std::atoi(n) > 0)
    t.attention_decode_blocks_per_sm = std::atoi(n);
  if (const char* a = std::getenv("KILN_CUDA_ATTENTION"); a != nullptr && std::strcmp(a, "simple") == 0)
    t.attention_split = false;
  t.flash_prefill = flag("KILN_CUDA_FLASH_PREFILL", true);
  t.flash_backward = flag("KILN_CUDA_FLASH_BACKWARD", true);
  if (const char* n = std::getenv("KILN_CUDA_FLASH_DS_MB"); n != nullptr && n[0] != '\0')
    t.flash_backward_ds_mb = std::max(0LL, std::atoll(n));
  t.attention_key_groups = flag("KILN_CUDA_ATTN_KEY_GROUPS", true);
  t.attention_decode_mma = flag("KILN_CUDA_ATTN_DECODE_MMA", true);
  if (const char* n = std::getenv("KILN_CUDA_ATTN_MMA_UNITS"); n != nullptr && std::atoi(n) > 0)
    t.attention_mma_units_per_warp = std::atoi(n);
  if (const char* n = std::getenv("KILN_CUDA_ATTN_MMA_STAGES"); n != nullptr && n[0] != '\0')
    t.attention_mma_stages = std::clamp(std::atoi(n), 2, 3);
  t.graphs = flag("KILN_CUDA_GRAPHS", true);
  t.norm_vec4 = flag("KILN_CUDA_NORM_VEC4", true);
  t.gdn_tf32 = flag("KILN_CUDA_GDN_TF32", true);
  t.gdn_backward_tf32 = flag("KILN_CUDA_GDN_BACKWARD_TF32", true);
  t.lora_kernel = flag("KILN_CUDA_LORA_KERNEL", true);
  t.bf16_operands = flag("KILN_CUDA_BF16_OPERANDS", true);
  t.pdl = flag("KILN_CUDA_PDL", true);
  t.kv_bf16 = flag("KILN_CUDA_KV_BF16", true);
  return t;
}

// The process-wide switches (mutable: the kernel benchmark flips them between timings).
inline Tuning& tuning() {
  static Tuning t = tuning_from_env();
  return t;
}

}  // namespace kiln::cuda
