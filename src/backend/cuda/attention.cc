// Partial rotary embedding, paged K/V writes and causal GQA attention with the fused output gate
// (kernels/rope.cu, kernels/kv_write.cu, kernels/paged_attention.cu; prefill that allows bf16
// products: kernels/flash_prefill.cu).
#include "backend/arg_checks.h"
#include "backend/cuda/cuda_facets.h"
#include "backend/cuda/kernel_timing.h"
#include "backend/cuda/kernels/device_code.h"
#include "backend/cuda/kernels/flash_prefill.h"
#include "backend/cuda/kernels/kv_elem.cuh"
#include "backend/cuda/kernels/kv_write.h"
#include "backend/cuda/kernels/paged_attention.h"
#include "backend/cuda/kernels/rope.h"
#include "backend/cuda/tuning.h"
#include "backend/cuda/views.h"

namespace kiln::cuda {

Support Attention::supports(const RopeRequest& r) const {
  if (r.rotary_dim <= 0 || r.rotary_dim % 2 != 0 || r.rotary_dim > r.head_dim)
    return Support::declined("rotary_dim must be even and within head_dim");
  return Support::native();
}

namespace {

// The K/V cache pointers and element type of a kernel's parameters (KvWrite, PagedAttention,
// FlashPrefill): one place that reads the cache's dtype.
template <typename Params>
void set_cache(Params& p, const Tensor& k_cache, const Tensor& v_cache) {
  p.k_cache = k_cache.raw();
  p.v_cache = v_cache.raw();
  p.kv_dtype = k_cache.dtype();
}

// Decode over a bf16 cache on tensor cores (q and P rounded to bf16), where the caller allows it.
bool use_decode_mma(const AttentionRequest& r) {
  return tuning().attention_decode_mma && r.compute == DType::kBF16 && r.phase == Phase::kDecode &&
         r.kv_heads > 0 && r.q_heads % r.kv_heads == 0 &&
         paged_decode_mma_applies(r.head_dim, r.q_heads / r.kv_heads, r.kv_dtype);
}

}  // namespace

Support Attention::supports(const KvWriteRequest& r) const {
  if (!kv_dtype_supported(r.kv_dtype)) return Support::declined("the cuda K/V cache is f32, bf16 or f8e4m3");
  return Support::native();
}

Support Attention::supports(const AttentionRequest& r) const {
  if (r.dtype != DType::kF32) return Support::declined("the cuda backend attends in f32");
  if (!kv_dtype_supported(r.kv_dtype)) return Support::declined("the cuda K/V cache is f32, bf16 or f8e4m3");
  if (r.kv_heads <= 0 || r.q_heads % r.kv_heads != 0) return Support::declined("q_heads must be a multiple of kv_heads");
  if (r.head_dim > kAttentionMaxHeadDim)
    return Support::declined("head_dim above " + std::to_string(kAttentionMaxHeadDim));
  if (r.q_heads > 65535) return Support::declined("more than 65535 query heads");
  if (use_decode_mma(r) || paged_attention_split_applies(r.head_dim, r.q_heads / r.kv_heads))
    return Support::native();
  return Support::constrained("simple paged kernel: one block per (token, query head), online softmax");
}

Status Attention::rope(const RopeArgs& a) {
  KILN_RETURN_IF_ERROR(check_args(*this, a));
  const RopeRequest r = describe(a);
  RopeParams p;
  p.tokens = r.tokens;
  p.q_heads = a.q.dim(1);
  p.kv_heads = a.k.dim(1);
  p.head_dim = r.head_dim;
  p.rotary_dim = a.rotary_dim;
  p.q = heads_of<float>(a.q);
  p.k = heads_of<float>(a.k);
  p.positions = a.positions.data<int32_t>();
  p.theta = a.theta;
  ProfileScope prof(ctx_->profiler.get(), [&] { return "rope tokens=" + std::to_string(r.tokens); });
  return in_context(cuda::rope(p, ctx_->stream), a);
}

Status Attention::write_kv(const KvWriteArgs& a) {
  KILN_RETURN_IF_ERROR(check_args(*this, a));
  const KvWriteRequest r = describe(a);
  KvWriteParams p;
  p.tokens = r.tokens;
  p.kv_heads = r.kv_heads;
  p.head_dim = r.head_dim;
  p.slots = a.k_cache.dim(0) * a.k_cache.dim(1);
  p.k = heads_of<const float>(a.k);
  p.v = heads_of<const float>(a.v);
  set_cache(p, a.k_cache, a.v_cache);
  p.slot_mapping = a.slot_mapping.data<int32_t>();
  ProfileScope prof(ctx_->profiler.get(), [&] { return "kv_write tokens=" + std::to_string(r.tokens); });
  return in_context(cuda::kv_write(p, ctx_->stream), a);
}

namespace {

// The tensor-core kernel rounds Q, K, V and P to bf16, so only where the caller allows it.
bool flash_prefill_allowed(const AttentionRequest& r) {
  return tuning().flash_prefill && r.compute == DType::kBF16 && r.phase == Phase::kPrefill &&
         flash_prefill_supports(r.head_dim) && r.q_heads % r.kv_heads == 0;
}

// Powers of two a key rounds its sizes up to: one timing serves a range of shapes.
int64_t bucket(int64_t v) {
  int64_t b = 1;
  while (b < v) b *= 2;
  return b;
}

// The kernel-choice key of an attention request: `op`, the heads and cache, the rows and keys
// rounded up to powers of two, and `extra` (a size of the op's own) between them.
std::string choice_key(std::string_view op, const AttentionRequest& r, const std::string& extra = "") {
  return std::string(op) + " q_heads=" + std::to_string(r.q_heads) + " kv_heads=" + std::to_string(r.kv_heads) +
         " head_dim=" + std::to_string(r.head_dim) + " kv=" + std::string(dtype_name(r.kv_dtype)) +
         (r.output_gate ? " gate" : "") + " rows<=" + std::to_string(bucket(r.rows)) + extra +
         " keys<=" + std::to_string(bucket(r.max_kv_len));
}

// Rows at least this long take the flash kernel without a timing: it wins there on every GPU
// measured, and the f32 kernels' scores over whole rows make timing them long.
constexpr int64_t kFlashUntimedQLen = 512;
// The H200's crossover, where nothing is timed: flash from 64 tokens a row.
constexpr int64_t kFlashRuleQLen = 64;

}  // namespace

Status Attention::attend_flash(const AttentionArgs& a, const AttentionRequest& r) {
  FlashPrefillParams f;
  f.rows = r.rows;
  f.tokens = r.tokens;
  f.max_q_len = a.layout->max_q_len;
  f.q_heads = r.q_heads;
  f.kv_heads = r.kv_heads;
  f.head_dim = r.head_dim;
  f.block_size = a.k_cache.dim(1);
  f.max_blocks = a.layout->block_tables.dim(1);
  f.cache_blocks = a.k_cache.dim(0);
  f.q = heads_of<const float>(a.q);
  if (r.output_gate) f.gate = heads_of<const float>(a.gate);
  f.out = heads_of<float>(a.out);
  set_cache(f, a.k_cache, a.v_cache);
  f.cu_seqlens = a.layout->cu_seqlens.data<int32_t>();
  f.kv_lens = a.layout->kv_lens.data<int32_t>();
  f.block_tables = a.layout->block_tables.data<int32_t>();
  f.scale = a.scale;
  if (a.kept != nullptr) {  // each query's log-sum-exp, for the training backward (flash_backward.h)
    KILN_ASSIGN_OR_RETURN(*a.kept, ctx_->empty({r.tokens, r.q_heads}, DType::kF32));
    f.lse = a.kept->data<float>();
  }
  ProfileScope prof(ctx_->profiler.get(), [&] { return "attention flash prefill tokens=" + std::to_string(r.tokens); });
  return in_context(flash_prefill(f, ctx_->stream), a);
}

Status Attention::attend_f32(const AttentionArgs& a, const AttentionRequest& r) {
  if (a.kept != nullptr) *a.kept = Tensor();  // the backward recomputes the softmax
  PagedAttentionParams p;
  p.rows = r.rows;
  p.tokens = r.tokens;
  p.q_heads = r.q_heads;
  p.kv_heads = r.kv_heads;
  p.head_dim = r.head_dim;
  p.block_size = a.k_cache.dim(1);
  p.max_blocks = a.layout->block_tables.dim(1);
  p.cache_blocks = a.k_cache.dim(0);
  p.q = heads_of<const float>(a.q);
  if (r.output_gate) p.gate = heads_of<const float>(a.gate);
  p.out = heads_of<float>(a.out);
  set_cache(p, a.k_cache, a.v_cache);
  p.cu_seqlens = a.layout->cu_seqlens.data<int32_t>();
  p.kv_lens = a.layout->kv_lens.data<int32_t>();
  p.block_tables = a.layout->block_tables.data<int32_t>();
  p.scale = a.scale;
  const bool mma = use_decode_mma(r);
  if (mma || (tuning().attention_split && paged_attention_split_applies(r.head_dim, r.q_heads / r.kv_heads))) {
    // The split kernel's plan aims at two blocks an SM; the tuning scales that target (4 measured
    // best at 32..128 rows, docs/decisions.md).
    const int sms = device_target().multiprocessors, split_sms = sms * tuning().attention_decode_blocks_per_sm / 2;
    AttentionSplit s = mma ? plan_decode_mma(r.tokens, r.kv_heads, sms, tuning().attention_mma_units_per_warp)
                           : plan_attention_split(r.tokens, r.kv_heads, a.layout->max_q_len, r.max_kv_len,
                                                  r.phase == Phase::kDecode, split_sms < 1 ? 1 : split_sms);
    Tensor scratch;
    if (s.splits > 1) {
      const int64_t parts = r.tokens * r.q_heads * s.splits;
      KILN_ASSIGN_OR_RETURN(scratch, ctx_->empty({parts * (r.head_dim + 2)}, DType::kF32));
      s.part_o = scratch.data<float>();
      s.part_ml = s.part_o + parts * r.head_dim;
    }
    if (!mma && s.prefill_tiles == 0 && attention_key_groups_apply(r.head_dim, r.kv_dtype)) {
      KILN_ASSIGN_OR_RETURN(s.key_groups, key_groups_win(p, s, r));
    }
    ProfileScope prof(ctx_->profiler.get(), [&] {
      return std::string(mma ? "attention mma " : "attention split ") + std::string(phase_name(r.phase)) +
             " tokens=" + std::to_string(r.tokens) + " splits=" + std::to_string(s.splits);
    });
    // The scratch goes back to the pool when this returns: stream order makes its reuse safe.
    return in_context(mma ? paged_decode_mma(p, s, ctx_->stream) : paged_attention_split(p, s, ctx_->stream), a);
  }
  ProfileScope prof(ctx_->profiler.get(), [&] {
    return std::string("attention simple ") + std::string(phase_name(r.phase)) + " tokens=" + std::to_string(r.tokens);
  });
  return in_context(cuda::paged_attention(p, ctx_->stream), a);
}

// Decode over the split kernel: lanes over keys or over dims, timed per shape on this device (the
// H200's rule, where nothing may be timed: lanes over keys). Both write the call's output, which
// the chosen one then writes again; q and the caches are only read.
Result<bool> Attention::key_groups_win(const PagedAttentionParams& p, const AttentionSplit& s,
                                       const AttentionRequest& r) {
  if (tuning().attention_key_groups >= 0) return tuning().attention_key_groups == 1;
  AttentionSplit lanes_over_keys = s, lanes_over_dims = s;
  lanes_over_keys.key_groups = true;
  lanes_over_dims.key_groups = false;
  const std::vector<Candidate> candidates{
      {"key_groups", [&] { return paged_attention_split(p, lanes_over_keys, ctx_->stream); }},
      {"lanes_over_dims", [&] { return paged_attention_split(p, lanes_over_dims, ctx_->stream); }}};
  KILN_ASSIGN_OR_RETURN(const std::string pick, choose_kernel(*ctx_, choice_key("attention_decode", r), candidates,
                                                              "key_groups", "key_groups"));
  return pick == "key_groups";
}

// Short prefills (a key tile or two a query tile) may run faster on the f32 kernels: below
// kFlashUntimedQLen, which serves a shape is timed on this device (kFlashRuleQLen where nothing
// may be timed).
Result<bool> Attention::flash_wins(const AttentionArgs& a, const AttentionRequest& r) {
  const int64_t q_len = a.layout->max_q_len;
  if (tuning().flash_prefill_min_q_len > 0) return q_len >= tuning().flash_prefill_min_q_len;
  if (q_len >= kFlashUntimedQLen) return true;
  // A training forward (log-sum-exps kept) takes the rule: the flash backward needs them, so the
  // forward alone is not what would have to be timed.
  if (a.kept != nullptr) return q_len >= kFlashRuleQLen;
  // Both on the call's own q and cache into a scratch output (no log-sum-exp kept).
  AttentionArgs t = a;
  t.kept = nullptr;
  auto scratch = [&]() -> Status {
    KILN_ASSIGN_OR_RETURN(t.out, ctx_->empty({r.tokens, r.q_heads, r.head_dim}, DType::kF32));
    return {};
  };
  const std::vector<Candidate> candidates{{"flash", [&] { return attend_flash(t, r); }},
                                          {"f32", [&] { return attend_f32(t, r); }}};
  const std::string key = choice_key("attention_prefill", r, " q<=" + std::to_string(bucket(q_len)));
  const char* rule = q_len >= kFlashRuleQLen ? "flash" : "f32";
  KILN_ASSIGN_OR_RETURN(const std::string pick, choose_kernel(*ctx_, key, candidates, rule, rule, scratch));
  return pick == "flash";
}

Status Attention::attend(const AttentionArgs& a) {
  KILN_RETURN_IF_ERROR(check_args(*this, a));
  const AttentionRequest r = describe(a);
  bool flash = flash_prefill_allowed(r);
  if (flash) {
    KILN_ASSIGN_OR_RETURN(flash, flash_wins(a, r));
  }
  return flash ? attend_flash(a, r) : attend_f32(a, r);
}

}  // namespace kiln::cuda
