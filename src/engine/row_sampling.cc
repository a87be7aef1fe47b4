#include "engine/row_sampling.h"

#include <algorithm>
#include <limits>

#include "backend/fallback.h"
#include "backend/sampling_math.h"
#include "core/thread_pool.h"

namespace kiln {

bool needs_only_argmax(const SamplingParams& p) {
  return p.temperature == 0.f && !p.logprobs && p.top_logprobs == 0 && p.repetition_penalty == 1.f &&
         p.presence_penalty == 0.f && p.frequency_penalty == 0.f;
}

Status fill_constraint_masks(std::span<const RowToSample> rows, int64_t vocab, std::vector<uint32_t>& masks,
                             std::vector<int64_t>& mask_of) {
  const size_t words = static_cast<size_t>((vocab + 31) / 32);
  mask_of.assign(rows.size(), -1);
  std::vector<size_t> cheap, costly;
  int64_t n = 0;
  for (size_t i = 0; i < rows.size(); ++i) {
    const Sequence& s = *rows[i].seq;
    if (!s.constrained || s.must_close_reasoning()) continue;
    mask_of[i] = n++;
    (s.spec.constraint->mask_is_cheap() ? cheap : costly).push_back(i);
  }
  masks.assign(static_cast<size_t>(n) * words, 0u);
  auto fill = [&](size_t i) -> Status {
    const Sequence& s = *rows[i].seq;
    const auto at = static_cast<size_t>(mask_of[i]) * words;
    KILN_RETURN_IF_ERROR(s.spec.constraint->fill_mask(std::span<uint32_t>(masks.data() + at, words)));
    if (const int32_t open = s.spec.optional_reasoning_open; s.may_open_reasoning() && open < vocab)
      masks[at + static_cast<size_t>(open >> 5)] |= 1u << (open & 31);
    return {};
  };
  // Cheap masks take microseconds: waking the pool's workers would cost more.
  for (size_t i : cheap) KILN_RETURN_IF_ERROR(fill(i));
  if (costly.empty()) return {};
  std::vector<Status> errors(costly.size());
  default_thread_pool().parallel_for(static_cast<int64_t>(costly.size()), 1, [&](int64_t b, int64_t e, int) {
    for (int64_t k = b; k < e; ++k) errors[static_cast<size_t>(k)] = fill(costly[static_cast<size_t>(k)]);
  });
  for (const Status& st : errors) KILN_RETURN_IF_ERROR(st);
  return {};
}

namespace {

// The rows at `picks` drawn by the backend's `sample` in one call: their logits rows (a slice
// where they are consecutive, else gathered on the device) and each request's SampleRow, whose u
// comes from the request's own generator as the host Sampler would draw it, with its mask (row i's
// at mask_at(i), null for none) and logit bias.
template <class MaskAt>
Status sample_on_device(Backend& backend, const Tensor& logits, std::span<const RowToSample> rows,
                        const std::vector<size_t>& picks, const MaskAt& mask_at, std::vector<SampledToken>& out) {
  StorageFacet& st = backend.storage();
  const auto n = static_cast<int64_t>(picks.size());
  const int64_t first = rows[picks[0]].row;
  bool run = true;
  for (size_t k = 0; k < picks.size(); ++k) run &= rows[picks[k]].row == first + static_cast<int64_t>(k);
  Tensor src;
  if (run) {
    src = logits.slice(0, first, first + n);
  } else {
    KILN_ASSIGN_OR_RETURN(src, st.allocate({n, logits.dim(1)}, DType::kF32));
    for (size_t k = 0; k < picks.size(); ++k) {
      const int64_t r = rows[picks[k]].row, kk = static_cast<int64_t>(k);
      KILN_RETURN_IF_ERROR(st.copy(logits.slice(0, r, r + 1), src.slice(0, kk, kk + 1)));
    }
  }
  std::vector<SampleRow> requests;
  requests.reserve(picks.size());
  int64_t top = 0;
  for (size_t i : picks) {
    Sequence& s = *rows[i].seq;
    requests.push_back(s.sampler.sample_row(s.tokens, s.generated()));
    requests.back().allowed = mask_at(i);
    requests.back().bias = s.spec.logit_bias;
    top = std::max<int64_t>(top, requests.back().top_logprobs);
  }
  Tensor ids = Tensor::empty({n}, DType::kI32), logprobs = Tensor::empty({n}, DType::kF32);
  SampleArgs args{src, requests, ids, logprobs};
  if (top > 0) {
    args.top_ids = Tensor::empty({n, top}, DType::kI32);
    args.top_logprobs = Tensor::empty({n, top}, DType::kF32);
  }
  KILN_RETURN_IF_ERROR(backend.sampling().sample(args));
  for (size_t k = 0; k < picks.size(); ++k) {
    const SamplingParams& p = rows[picks[k]].seq->spec.sampling;
    SampledToken& t = out[picks[k]];
    t.token = ids.data<int32_t>()[k];
    // A greedy row that asked for no logprobs reports 0, as the host Sampler does.
    t.logprob = p.temperature == 0.f && !wants_logprobs(p) ? 0.f : logprobs.data<float>()[k];
    t.top.clear();
    for (int64_t j = 0; j < requests[k].top_logprobs; ++j) {
      const int64_t at = static_cast<int64_t>(k) * top + j;
      t.top.push_back({args.top_ids.data<int32_t>()[at], args.top_logprobs.data<float>()[at]});
    }
  }
  return {};
}

}  // namespace

Result<std::vector<SampledToken>> sample_rows(Backend& backend, const Tensor& logits,
                                              std::span<const RowToSample> rows, bool device_sampling) {
  const int64_t V = logits.dim(1);
  std::vector<SampledToken> out(rows.size());
  // Constrained rows' masks, filled on the host (while the device may still run the forward).
  std::vector<uint32_t> masks;
  std::vector<int64_t> mask_of;
  KILN_RETURN_IF_ERROR(fill_constraint_masks(rows, V, masks, mask_of));
  const size_t words = static_cast<size_t>((V + 31) / 32);
  std::vector<float> adjusted;
  auto mask_at = [&](size_t i) -> const uint32_t* {
    return mask_of[i] >= 0 ? masks.data() + static_cast<size_t>(mask_of[i]) * words : nullptr;
  };
  auto on_host = [&](size_t i, const float* row) {
    Sequence& s = *rows[i].seq;
    std::span<const float> in(row, static_cast<size_t>(V));
    if (!s.samples_raw_logits()) {
      adjusted.assign(in.begin(), in.end());
      apply_bias_and_mask(adjusted, s.spec.logit_bias, mask_at(i));
      in = adjusted;
    }
    return s.sampler.sample(in, s.tokens, s.generated());
  };
  if (logits.device().kind == DeviceKind::kHost) {
    for (size_t i = 0; i < rows.size(); ++i) {
      Sequence& s = *rows[i].seq;
      out[i] = s.must_close_reasoning() ? SampledToken{s.spec.thinking.close_id, 0.f, {}}
                                        : on_host(i, logits.data<float>() + rows[i].row * V);
    }
    return out;
  }
  StorageFacet& st = backend.storage();
  // Greedy rows that report nothing but the id: one argmax kernel over every logits row (cheaper
  // than gathering the rows that need it), a constrained row's mask going up with it where the
  // backend takes masks there (biased rows take `sample`). The ids copy waits for the forward's
  // queued work.
  const bool argmax_masks =
      device_sampling && backend.sampling().supports(SampleRequest{1, V, true, true}).runs_natively();
  auto argmax_row = [&](const Sequence& s) {
    return !s.must_close_reasoning() && needs_only_argmax(s.spec.sampling) && s.spec.logit_bias.empty() &&
           (!s.constrained || argmax_masks);
  };
  bool any_argmax = false;
  std::vector<const uint32_t*> allowed;
  for (size_t i = 0; i < rows.size(); ++i) {
    const Sequence& s = *rows[i].seq;
    if (!argmax_row(s)) continue;
    any_argmax = true;
    if (const uint32_t* m = mask_at(i)) {
      allowed.resize(static_cast<size_t>(logits.dim(0)), nullptr);
      allowed[static_cast<size_t>(rows[i].row)] = m;
    }
  }
  Tensor ids;
  const bool use_device = device_sampling && any_argmax &&
                          backend.sampling().supports(describe(ArgmaxArgs{logits, Tensor()})).runs_natively();
  if (use_device) {
    KILN_ASSIGN_OR_RETURN(Tensor dev_ids, st.allocate({logits.dim(0)}, DType::kI32));
    KILN_RETURN_IF_ERROR(backend.sampling().argmax({logits, dev_ids, allowed}));
    ids = Tensor::empty({logits.dim(0)}, DType::kI32);
    KILN_RETURN_IF_ERROR(st.copy_to_host(dev_ids, ids));
  }
  auto from_device = [&](const Sequence& s) { return use_device && argmax_row(s); };
  // Every other row (drawn at temperature > 0, or greedy with penalties or logprobs): the
  // backend's `sample`, one call. Constrained and biased rows join it where the backend applies
  // masks and biases itself (only the masks go up). Where it declines them, that decline goes
  // through its fallback policy like any other: the rows are sampled on the host below, each step's
  // round trip counted, or the step fails.
  std::vector<size_t> sampled;
  std::vector<char> done(rows.size(), 0);
  if (device_sampling) {
    int64_t constrained_rows = 0;
    for (const RowToSample& r : rows)
      constrained_rows += !r.seq->samples_raw_logits() && !r.seq->must_close_reasoning() && !from_device(*r.seq);
    bool device_masks = false;
    if (constrained_rows > 0) {
      const SampleRequest req{constrained_rows, V, false, true};
      KILN_ASSIGN_OR_RETURN(const FallbackDecision d,
                            resolve_fallback(backend.capabilities().fallback, backend.identity().name,
                                             OpClass::kGenericOp, 1, backend.sampling().supports(req), req.describe()));
      device_masks = d == FallbackDecision::kRunNative;
    }
    for (size_t i = 0; i < rows.size(); ++i) {
      const Sequence& s = *rows[i].seq;
      if (!s.must_close_reasoning() && !from_device(s) &&
          (s.samples_raw_logits() ? !needs_only_argmax(s.spec.sampling) : device_masks))
        sampled.push_back(i);
    }
    if (!sampled.empty()) {
      // Where the backend declines, its fallback policy decides: the rows' logits go to the host
      // (counted as a round trip), or the step fails naming the request and the policy.
      bool constrained = false;
      for (size_t i : sampled) constrained |= !rows[i].seq->samples_raw_logits();
      const SampleRequest req{static_cast<int64_t>(sampled.size()), V, false, constrained};
      KILN_ASSIGN_OR_RETURN(const FallbackDecision d,
                            resolve_fallback(backend.capabilities().fallback, backend.identity().name,
                                             OpClass::kGenericOp, 1, backend.sampling().supports(req), req.describe()));
      if (d == FallbackDecision::kRunNative) {
        KILN_RETURN_IF_ERROR(sample_on_device(backend, logits, rows, sampled, mask_at, out));
        for (size_t i : sampled) done[i] = 1;
      }
    }
  }
  // Rows sampled on the host: each row's copy synchronises, so when they are many (a quarter of
  // the rows or more) one copy of the whole tensor costs less.
  size_t host_rows = 0;
  for (size_t i = 0; i < rows.size(); ++i)
    host_rows += !done[i] && !rows[i].seq->must_close_reasoning() && !from_device(*rows[i].seq);
  Tensor all;
  if (host_rows > 0 && 4 * host_rows >= static_cast<size_t>(logits.dim(0))) {
    all = Tensor::empty(logits.shape(), DType::kF32);
    KILN_RETURN_IF_ERROR(st.copy_to_host(logits, all));
  }
  Tensor host_row = Tensor::empty({1, V}, DType::kF32);
  for (size_t i = 0; i < rows.size(); ++i) {
    Sequence& s = *rows[i].seq;
    if (done[i]) continue;
    if (s.must_close_reasoning()) {
      out[i] = {s.spec.thinking.close_id, 0.f, {}};
    } else if (from_device(s)) {
      out[i].token = ids.data<int32_t>()[rows[i].row];
    } else if (all.defined()) {
      out[i] = on_host(i, all.data<float>() + rows[i].row * V);
    } else {
      KILN_RETURN_IF_ERROR(st.copy_to_host(logits.slice(0, rows[i].row, rows[i].row + 1), host_row));
      out[i] = on_host(i, host_row.data<float>());
    }
  }
  return out;
}

}  // namespace kiln
