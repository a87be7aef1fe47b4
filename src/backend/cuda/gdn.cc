// The gated delta rule: the chunked (WY/UT) kernel for prefill (kernels/gdn_chunked.cu), the
// recurrent kernel for decode and wherever the chunked one has no instance
// (kernels/gated_delta_rule.cu), and the fused decode step (kernels/gdn_decode.cu).
#include <cstdint>
#include <string>
#include <vector>

#include "backend/cuda/cuda_facets.h"
#include "backend/cuda/kernel_timing.h"
#include "backend/cuda/kernels/device_code.h"
#include "backend/cuda/kernels/gated_delta_rule.h"
#include "backend/cuda/kernels/gdn_chunk_record.h"
#include "backend/cuda/kernels/gdn_decode.h"
#include "backend/cuda/tuning.h"
#include "backend/cuda/views.h"

namespace kiln::cuda {

namespace {

// Whether a chunked request runs the chunked kernel (else the recurrent one).
bool fits(size_t smem) { return smem > 0 && static_cast<int64_t>(smem) <= device_target().shared_optin; }

// Whether the chunked kernel runs: with A and Mq in shared memory, or in global memory where only
// that fits the target (chunked_needs_scratch).
bool chunked_kernel_runs(const GdnRequest& r) {
  return r.dv <= 65535 * 32 &&
         (fits(gated_delta_rule_chunked_smem_bytes(r.dk)) || fits(gated_delta_rule_chunked_lean_smem_bytes(r.dk)));
}
bool chunked_needs_scratch(const GdnRequest& r) { return !fits(gated_delta_rule_chunked_smem_bytes(r.dk)); }

// Whether the one-kernel fused decode step's shared memory fits the target.
bool one_kernel_fits(const GdnDecodeRequest& r) {
  return static_cast<int64_t>(gdn_decode_smem_bytes(r.k_heads, r.v_heads, r.dk, r.dv)) <= device_target().shared_optin;
}

GatedDeltaRuleParams params_of(const GdnArgs& a, const GdnRequest& r) {
  GatedDeltaRuleParams p;
  p.rows = r.rows;
  p.tokens = r.tokens;
  p.k_heads = r.k_heads;
  p.v_heads = r.v_heads;
  p.dk = r.dk;
  p.dv = r.dv;
  p.slots = a.state.dim(0);
  p.q = heads_of<const float>(a.q);
  p.k = heads_of<const float>(a.k);
  p.v = heads_of<const float>(a.v);
  p.a = rows_of<const float>(a.a);
  p.b = rows_of<const float>(a.b);
  p.a_log = a.a_log.data<float>();
  p.dt_bias = a.dt_bias.data<float>();
  p.state = a.state.data<float>();
  p.out = heads_of<float>(a.out);
  p.cu_seqlens = a.layout->cu_seqlens.data<int32_t>();
  p.state_slots = a.layout->state_slots.data<int32_t>();
  return p;
}

}  // namespace

Support Gdn::supports(const GdnRequest& r) const {
  if (r.state_dtype != DType::kF32) return Support::declined("the cuda GDN state is f32");
  if (r.k_heads <= 0 || r.v_heads % r.k_heads != 0) return Support::declined("v_heads must be a multiple of k_heads");
  if (r.form == GdnForm::kChunked && r.chunk < 1) return Support::declined("chunk must be positive");
  if (r.rows > 65535) return Support::declined("more than 65535 rows");
  if (r.form == GdnForm::kChunked && chunked_kernel_runs(r)) {
    if (r.chunk == 64) return Support::native();
    return Support::constrained("solved in chunks of 64 whatever the requested chunk (the result does not depend on it)");
  }
  const size_t smem = gated_delta_rule_smem_bytes(r.dk, r.dv);
  if (static_cast<int64_t>(smem) > device_target().shared_optin)
    return Support::declined("the state of one head (" + std::to_string(smem) + " bytes with its vectors) exceeds " +
                             std::to_string(device_target().shared_optin) + " bytes of shared memory per block");
  if (r.form == GdnForm::kChunked)
    return Support::constrained(
        "runs the recurrent kernel, sequential over each row's tokens (the chunked kernel takes dk 16, 32, 64, 128 "
        "or 256)");
  return Support::native();
}

Status Gdn::delta_rule(const GdnArgs& a) {
  KILN_RETURN_IF_ERROR(check_args(*this, a));
  const GdnRequest r = describe(a);
  GatedDeltaRuleParams p = params_of(a, r);
  const bool chunked = r.form == GdnForm::kChunked && chunked_kernel_runs(r);
  const size_t two_pass_smem = gated_delta_rule_two_pass_smem_bytes(r.dk);
  const bool two_pass = chunked && tuning().gdn_two_pass && fits(two_pass_smem);
  Tensor scratch;  // back to the pool on return: stream order makes its reuse safe
  if (a.kept != nullptr) *a.kept = Tensor();
  if (two_pass) {
    const int64_t max_len = a.layout->max_q_len > 0 ? a.layout->max_q_len : r.tokens;
    p.max_chunks = (max_len + 63) / 64;
    if (a.kept != nullptr) {  // the records, with the chunk states and W, for the backward
      const GdnForwardKept k = gdn_forward_kept(r.rows, p.max_chunks, r.v_heads, r.dk, r.dv);
      KILN_ASSIGN_OR_RETURN(*a.kept, ctx_->empty({k.total}, DType::kF32));
      p.scratch = a.kept->data<float>() + k.records;
      p.chunk_states = a.kept->data<float>() + k.states;
      p.chunk_w = a.kept->data<float>() + k.w;
    } else {
      const size_t floats = gated_delta_rule_two_pass_scratch_floats(r.rows, p.max_chunks, r.v_heads, r.dk, r.dv);
      KILN_ASSIGN_OR_RETURN(scratch, ctx_->empty({static_cast<int64_t>(floats)}, DType::kF32));
      p.scratch = scratch.data<float>();
    }
    p.tf32 = r.compute != DType::kF32 && tuning().gdn_tf32;  // one tf32 pass where rounding is allowed
  } else if (chunked && chunked_needs_scratch(r)) {
    const size_t floats = gated_delta_rule_chunked_lean_floats(r.rows, r.v_heads, r.dv);
    KILN_ASSIGN_OR_RETURN(scratch, ctx_->empty({static_cast<int64_t>(floats)}, DType::kF32));
    p.chunk_am = scratch.data<float>();
  }
  ProfileScope prof(ctx_->profiler.get(), [&] {
    return std::string(two_pass ? "gdn chunked two-pass " : chunked ? "gdn chunked " : "gdn recurrent ") +
           std::string(phase_name(r.phase)) + " tokens=" + std::to_string(r.tokens) + (p.tf32 ? " tf32" : "");
  });
  return in_context(chunked ? gated_delta_rule_chunked(p, ctx_->stream) : gated_delta_rule(p, ctx_->stream), a);
}

Support Gdn::supports(const GdnDecodeRequest& r) const {
  if (!tuning().gdn_fused_decode) return Support::declined("the fused decode step is switched off (KILN_CUDA_GDN_FUSED=0)");
  if (r.state_dtype != DType::kF32) return Support::declined("the cuda GDN state is f32");
  if (r.k_heads <= 0 || r.dk <= 0 || r.v_heads % r.k_heads != 0)
    return Support::declined("v_heads must be a multiple of k_heads");
  if (r.conv_kernel < 2 || r.conv_kernel > 8) return Support::declined("conv kernel must be 2..8");
  if (r.rows > 65535) return Support::declined("more than 65535 rows");
  if (one_kernel_fits(r) || (r.tokens == r.rows && gdn_decode_split_applies(r.dk, r.dv))) return Support::native();
  return Support::declined("the states of one key head's value heads (" +
                           std::to_string(gdn_decode_smem_bytes(r.k_heads, r.v_heads, r.dk, r.dv)) +
                           " bytes with their vectors) exceed the shared memory of a block (" +
                           std::to_string(device_target().shared_optin) + " bytes on " + device_target().label() +
                           "), and the split form takes one token a row");
}

namespace {

// The structure of a fused decode call, checked through the conv's and the delta rule's own
// validators on the views the fused kernel reads.
Status validate_decode(const GdnDecodeArgs& a, const std::string& r) {
  const DeviceKind d = DeviceKind::kCuda;
  KILN_RETURN_IF_ERROR(check_tensor(a.mixed, "mixed", 2, DType::kF32, d, r));
  KILN_RETURN_IF_ERROR(check_tensor(a.out, "out", 3, DType::kF32, d, r));
  const int64_t T = a.mixed.dim(0), C = a.mixed.dim(1), Hk = a.k_heads, dk = a.dk;
  const int64_t Hv = a.out.dim(1), dv = a.out.dim(2);
  if (Hk <= 0 || dk <= 0 || C != 2 * Hk * dk + Hv * dv)
    return invalid_argument(r + ": mixed has " + std::to_string(C) + " channels, expected 2*k_heads*dk + v_heads*dv");
  KILN_RETURN_IF_ERROR(validate(ConvArgs{a.mixed, a.conv_weight, a.conv_state, a.mixed, a.layout}, d, r));
  if (!a.conv_state.is_contiguous()) return invalid_argument(r + ": conv_state must be contiguous");
  GdnArgs g;
  g.form = GdnForm::kRecurrent;
  g.q = a.mixed.as_strided({T, Hk, dk}, {a.mixed.stride(0), dk, 1});
  g.k = a.mixed.as_strided({T, Hk, dk}, {a.mixed.stride(0), dk, 1}, Hk * dk);
  g.v = a.mixed.as_strided({T, Hv, dv}, {a.mixed.stride(0), dv, 1}, 2 * Hk * dk);
  g.a = a.a;
  g.b = a.b;
  g.a_log = a.a_log;
  g.dt_bias = a.dt_bias;
  g.state = a.state;
  g.out = a.out;
  g.layout = a.layout;
  KILN_RETURN_IF_ERROR(validate(g, d, r));
  KILN_RETURN_IF_ERROR(check_tensor(a.z, "z", 3, DType::kF32, d, r));
  for (int i = 0; i < 3; ++i) KILN_RETURN_IF_ERROR(check_dim(a.z, "z", i, a.out.dim(i), r));
  KILN_RETURN_IF_ERROR(check_tensor(a.norm_weight, "norm_weight", 1, DType::kF32, d, r));
  return check_dim(a.norm_weight, "norm_weight", 0, dv, r);
}

}  // namespace

Status Gdn::fused_decode(const GdnDecodeArgs& a) {
  const GdnDecodeRequest r = describe(a);
  if (Support s = supports(r); !s.runs_natively()) return declined("cuda", r.describe(), s.constraint);
  static const std::string kNoText;
  if (!validate_decode(a, kNoText).ok()) return validate_decode(a, r.describe());
  GdnDecodeParams p;
  p.rows = r.rows;
  p.tokens = r.tokens;
  p.k_heads = r.k_heads;
  p.v_heads = r.v_heads;
  p.dk = r.dk;
  p.dv = r.dv;
  p.conv_kernel = r.conv_kernel;
  p.channels = a.mixed.dim(1);
  p.slots = a.state.dim(0);
  p.conv_slots = a.conv_state.dim(0);
  p.mixed = rows_of<const float>(a.mixed);
  p.conv_weight = rows_of<const float>(a.conv_weight);
  p.conv_state = a.conv_state.data<float>();
  p.z = heads_of<const float>(a.z);
  p.a = rows_of<const float>(a.a);
  p.b = rows_of<const float>(a.b);
  p.a_log = a.a_log.data<float>();
  p.dt_bias = a.dt_bias.data<float>();
  p.state = a.state.data<float>();
  p.norm_weight = a.norm_weight.data<float>();
  p.eps = a.eps;
  p.out = heads_of<float>(a.out);
  p.cu_seqlens = a.layout->cu_seqlens.data<int32_t>();
  p.state_slots = a.layout->state_slots.data<int32_t>();
  // The forms: one kernel where its shared memory fits the target; for one token a row, the split
  // kernels with 1, 2 or 3 stages. Which one runs is timed per shape on this device (the H200's
  // rule, split with 2 stages wherever it applies, only where nothing may be timed).
  const bool split = r.tokens == r.rows && gdn_decode_split_applies(r.dk, r.dv) &&
                     reinterpret_cast<uintptr_t>(p.state) % 16 == 0;
  const bool one = one_kernel_fits(r);
  const auto floats = static_cast<int64_t>(gdn_decode_vectors_floats(r.rows, r.k_heads, r.v_heads, r.dk, r.dv));
  Tensor vec;
  if (split) {
    KILN_ASSIGN_OR_RETURN(vec, ctx_->empty({floats}, DType::kF32));
  }
  auto run = [&](const GdnDecodeParams& q, int form) {
    return form == 0 ? gdn_decode(q, ctx_->stream) : gdn_decode_split(q, vec.data<float>(), form, ctx_->stream);
  };
  int form = tuning().gdn_decode_form;
  if (form < 0 || (form == 0 && !one) || (form > 0 && !split)) {
    // Timed on scratch state, conv state and output (the step updates its state in place): the
    // call's own inputs, rows 0..R-1 of scratch pools.
    const char* rule = split ? "split2" : "one_kernel";
    Tensor state, conv_state, out, slots;
    std::vector<int32_t> iota(static_cast<size_t>(r.rows));
    for (size_t i = 0; i < iota.size(); ++i) iota[i] = static_cast<int32_t>(i);
    GdnDecodeParams t = p;
    auto scratch = [&]() -> Status {
      KILN_ASSIGN_OR_RETURN(state, ctx_->empty({r.rows, r.v_heads, r.dk, r.dv}, DType::kF32));
      KILN_ASSIGN_OR_RETURN(conv_state, ctx_->empty({r.rows, a.conv_state.dim(1), a.conv_state.dim(2)}, DType::kF32));
      KILN_ASSIGN_OR_RETURN(out, ctx_->empty({r.tokens, r.v_heads, r.dv}, DType::kF32));
      KILN_ASSIGN_OR_RETURN(slots, ctx_->empty({r.rows}, DType::kI32));
      KILN_RETURN_IF_ERROR(cuda_status(cudaMemsetAsync(state.raw(), 0, state.nbytes(), ctx_->stream), "gdn timing"));
      KILN_RETURN_IF_ERROR(
          cuda_status(cudaMemsetAsync(conv_state.raw(), 0, conv_state.nbytes(), ctx_->stream), "gdn timing"));
      KILN_RETURN_IF_ERROR(cuda_status(
          cudaMemcpyAsync(slots.raw(), iota.data(), slots.nbytes(), cudaMemcpyHostToDevice, ctx_->stream), "gdn timing"));
      t.state = state.data<float>();
      t.slots = r.rows;
      t.conv_state = conv_state.data<float>();
      t.conv_slots = r.rows;
      t.out = {out.data<float>(), r.v_heads * r.dv, r.dv};
      t.state_slots = slots.data<int32_t>();
      return {};
    };
    std::vector<Candidate> candidates;
    if (one) candidates.push_back({"one_kernel", [&] { return run(t, 0); }});
    for (int stages = 1; split && stages <= 3; ++stages)
      candidates.push_back({"split" + std::to_string(stages), [&, stages] { return run(t, stages); }});
    const std::string key = "gdn_decode rows=" + std::to_string(r.rows) + " k_heads=" + std::to_string(r.k_heads) +
                            " v_heads=" + std::to_string(r.v_heads) + " dk=" + std::to_string(r.dk) +
                            " dv=" + std::to_string(r.dv);
    Result<std::string> pick = choose_kernel(*ctx_, key, candidates, rule, rule, scratch);
    if (!pick.ok()) return pick.status().with_context(r.describe());
    form = pick.value() == "one_kernel" ? 0 : pick.value().back() - '0';
  }
  ProfileScope prof(ctx_->profiler.get(), [&] {
    return std::string("gdn fused_decode ") + (form == 0 ? "" : "split" + std::to_string(form) + " ") +
           "rows=" + std::to_string(r.rows);
  });
  Status s = run(p, form);
  return s.ok() ? s : s.with_context(r.describe());
}

}  // namespace kiln::cuda
