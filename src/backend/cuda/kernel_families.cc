#include "backend/cuda/kernel_families.h"

#include "backend/cuda/kernels/device_code.h"
#include "backend/cuda/kernels/flash_backward.h"
#include "backend/cuda/kernels/flash_prefill.h"
#include "backend/cuda/kernels/gated_delta_rule.h"
#include "backend/cuda/kernels/gdn_chunked_backward.h"
#include "backend/cuda/kernels/gdn_decode.h"
#include "backend/cuda/kernels/paged_attention.h"
#include "backend/cuda/tuning.h"

namespace kiln::cuda {

namespace {

constexpr int64_t kHeadDim = 256, kGroup = 4, kDk = 128, kKHeads = 16, kVHeads = 32;

bool fits(size_t bytes) { return bytes > 0 && static_cast<int64_t>(bytes) <= device_target().shared_optin; }

}  // namespace

std::vector<std::pair<std::string, std::string>> kernel_families() {
  const Tuning& t = tuning();
  const bool sm90 = device_target().sm90_features;
  std::vector<std::pair<std::string, std::string>> k;
  const std::string timed = t.gemm_autotune ? ", whichever timed faster per shape" : " by the H200's crossovers";
  k.emplace_back("matmul, 1-8 rows", t.gemv ? "gemv kernel or cublaslt" + timed : "cublaslt");
  k.emplace_back("matmul, 9-16 rows", t.skinny ? std::string(sm90 && t.skinny_wgmma ? "skinny GEMM (wgmma, cluster split-K)"
                                                                                   : "skinny GEMM (mma.sync)") +
                                                     " or cublaslt" + timed
                                               : "cublaslt");
  k.emplace_back("matmul, more rows", "cublaslt (algorithms timed on first use up to 256 rows)");
  k.emplace_back("attention prefill (bf16 products)",
                 !t.flash_prefill || !flash_prefill_supports(kHeadDim)
                     ? "split-key f32 kernel"
                     : std::string(flash_prefill_wide_tile(kHeadDim) ? "flash, mma.sync, 128 queries x 64-key tiles"
                                                                     : "flash, mma.sync, 64 queries x 32-key tiles") +
                           (t.gemm_autotune ? "; below 512 tokens, split-key f32 where that timed faster per shape"
                                            : "; split-key f32 below 64 tokens"));
  k.emplace_back("attention decode (bf16 cache)", t.attention_decode_mma && paged_decode_mma_applies(kHeadDim, kGroup, DType::kBF16)
                                                      ? "mma.sync over 16-key tiles"
                                                      : t.gemm_autotune
                                                          ? "split-key f32 kernel, lanes over keys or over dims, "
                                                            "whichever timed faster per shape"
                                                          : "split-key f32 kernel, lanes over keys");
  const bool chunked =
      fits(gated_delta_rule_chunked_smem_bytes(kDk)) || fits(gated_delta_rule_chunked_lean_smem_bytes(kDk));
  k.emplace_back("gdn prefill", !chunked ? "recurrent kernel (sequential over tokens)"
                                : fits(gated_delta_rule_two_pass_smem_bytes(kDk))
                                    ? "chunked, two passes (prep, scan), tensor-core products"
                                : fits(gated_delta_rule_chunked_smem_bytes(kDk))
                                    ? "chunked, one kernel"
                                    : "chunked, one kernel, A and Mq in global memory");
  k.emplace_back("gdn decode step", !fits(gdn_decode_smem_bytes(kKHeads, kVHeads, kDk, kDk))
                                        ? "split: vectors kernel + persistent state kernel"
                                    : t.gemm_autotune
                                        ? "one kernel, or split (vectors + persistent state kernel), whichever timed "
                                          "faster per batch"
                                        : "split: vectors kernel + persistent state kernel");
  k.emplace_back("attention backward (bf16 products)", t.flash_backward && flash_backward_supports(kHeadDim)
                                                           ? "flash backward, mma.sync"
                                                           : "cublas TF32 GEMMs over whole score rows");
  k.emplace_back("gdn backward", fits(gdn_chunked_backward_smem_bytes(kDk)) ? "chunked" : "register walk over tokens");
  k.emplace_back("launches", sm90 && t.pdl ? "programmatic dependent launch on the decode path" : "plain stream order");
  k.emplace_back("decode step", t.graphs ? "CUDA graph replay" : "eager");
  return k;
}

}  // namespace kiln::cuda
