// The CUDA backend's switches, read once from the environment: a kill switch for each major
// mechanism (a suspected one ruled out without a rebuild) and the knobs a user may need. Variants
// that lost on every target measured are deleted, not switched; a variant that wins on some
// target or shape is that target's dispatch choice (docs/decisions.md).
// Every switch, its values and what it does: backend/native_switches.cc (rendered into docs/cuda.md).
#pragma once

#include <algorithm>
#include <cstdlib>

namespace kiln::cuda {

struct Tuning {
  // Kill switches and knobs, read from the environment (backend/native_switches.cc lists them).
  bool gemv = true;
  bool skinny = true;
  bool gemm_autotune = true;  // cuBLASLt candidates and kernel choices timed (kernel_timing.h)
  long long gemm_autotune_max_m = 256;
  bool gdn_fused_decode = true;
  bool gdn_tf32 = true;           // the two-pass GDN's products in one tf32 pass where GdnArgs::compute allows
  bool gdn_backward_tf32 = true;  // the GDN backward's gradient pass in one tf32 pass where its compute allows
  int attention_decode_blocks_per_sm = 4;
  int attention_mma_units_per_warp = 1;
  bool flash_prefill = true;   // bf16-allowed prefill attention on tensor cores (flash_prefill.cu)
  bool flash_backward = true;  // bf16-allowed attention backward on tensor cores from the forward's lse (flash_backward.cu)
  long long flash_backward_ds_mb = 1024;  // ... its dQ from kept dS tiles while they take at most this many MB
  bool graphs = true;  // decode steps recorded as CUDA graphs and replayed (replay.cc)
  bool pdl = true;     // decode-path kernels with programmatic dependent launch (kernels/pdl.cuh)
  bool kv_bf16 = true;  // a bf16 K/V cache offered (capabilities().attention.kv_dtypes)

  // Set by tests and the kernel benchmark only (no variable): each holds a path the dispatch takes
  // on some target or shape, so that one binary can check or time it against the other.
  int gemv_rows = 0;  // rows a warp takes: 0 by shape, 1/2/4 forced, -1 the block-split form (GemvParams)
  bool skinny_everywhere = false;  // the skinny GEMM for every 16-bit GEMM of up to 64 rows the GEMV does not take
  int skinny_splits = 0;     // 0: by occupancy (SkinnyGemmParams::splits)
  bool skinny_wgmma = true;  // false: the mma.sync form, sm_80's and sm_86's
  // The fused GDN decode step's form: -1 timed per shape (kernel_timing.h); 0 one kernel; 1..3 the
  // split kernels with that many stages (gdn_decode.h).
  int gdn_decode_form = -1;
  bool gdn_two_pass = true;             // false: the one-kernel chunked GDN where two passes would run (sm_86's)
  bool gdn_backward_registers = false;  // the register walk where the chunked form would run (sm_86's)
  bool attention_decode_mma = true;     // false: bf16-allowed decode attention on the f32 kernels
  bool attention_split = true;          // false: the simple kernel (the fallback of other shapes) for every request
  int attention_key_groups = -1;        // f32-kernel decode: -1 timed per shape; 0 lanes over dims; 1 over keys
  // ... 0: flash where it timed faster than the f32 kernels for the shape (kernel_timing.h); n > 0:
  // exactly when the longest query row has at least n tokens.
  long long flash_prefill_min_q_len = 0;
  bool lora_kernel = true;    // false: short LoRA segments through the matmul sequence, as long ones
  bool bf16_operands = true;  // false: every GEMM rounds an f32 x, as an f32 checkpoint's do
};

inline Tuning tuning_from_env() {
  auto flag = [](const char* name, bool dflt) {
    const char* v = std::getenv(name);
    return v == nullptr || v[0] == '\0' ? dflt : v[0] != '0';
  };
  Tuning t;
  t.gemv = flag("KILN_CUDA_GEMV", true);
  t.skinny = flag("KILN_CUDA_SKINNY", true);
  t.gemm_autotune = flag("KILN_CUDA_GEMM_AUTOTUNE", true);
  if (const char* m = std::getenv("KILN_CUDA_GEMM_AUTOTUNE_MAX_M"); m != nullptr && m[0] != '\0')
    t.gemm_autotune_max_m = std::atoll(m);
  t.gdn_fused_decode = flag("KILN_CUDA_GDN_FUSED", true);
  t.gdn_tf32 = flag("KILN_CUDA_GDN_TF32", true);
  t.gdn_backward_tf32 = flag("KILN_CUDA_GDN_BACKWARD_TF32", true);
  if (const char* n = std::getenv("KILN_CUDA_ATTN_DECODE_BLOCKS_PER_SM"); n != nullptr && std::atoi(n) > 0)
    t.attention_decode_blocks_per_sm = std::atoi(n);
  if (const char* n = std::getenv("KILN_CUDA_ATTN_MMA_UNITS"); n != nullptr && std::atoi(n) > 0)
    t.attention_mma_units_per_warp = std::atoi(n);
  t.flash_prefill = flag("KILN_CUDA_FLASH_PREFILL", true);
  t.flash_backward = flag("KILN_CUDA_FLASH_BACKWARD", true);
  if (const char* n = std::getenv("KILN_CUDA_FLASH_DS_MB"); n != nullptr && n[0] != '\0')
    t.flash_backward_ds_mb = std::max(0LL, std::atoll(n));
  t.graphs = flag("KILN_CUDA_GRAPHS", true);
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
