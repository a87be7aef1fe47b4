#include "engine/row_sampling.h"

namespace kiln {

bool needs_only_argmax(const SamplingParams& p) {
  return p.temperature == 0.f && !p.logprobs && p.top_logprobs == 0 && p.repetition_penalty == 1.f &&
         p.presence_penalty == 0.f && p.frequency_penalty == 0.f;
}

Result<std::vector<SampledToken>> sample_rows(Backend& backend, const Tensor& logits,
                                              std::span<const RowToSample> rows, bool device_argmax) {
  const int64_t V = logits.dim(1);
  std::vector<SampledToken> out(rows.size());
  auto on_host = [&](Sequence& s, const float* row) {
    return s.sampler.sample(std::span<const float>(row, static_cast<size_t>(V)), s.tokens, s.generated());
  };
  if (logits.device().kind == DeviceKind::kHost) {
    for (size_t i = 0; i < rows.size(); ++i) {
      Sequence& s = *rows[i].seq;
      out[i] = s.must_close_reasoning() ? SampledToken{s.spec.thinking.close_id, 0.f, {}}
                                        : on_host(s, logits.data<float>() + rows[i].row * V);
    }
    return out;
  }
  StorageFacet& st = backend.storage();
  bool any_argmax = false;
  for (const RowToSample& r : rows) any_argmax |= needs_only_argmax(r.seq->spec.sampling);
  // One kernel over every logits row (cheaper than gathering the rows that need it); the ids
  // copy waits for the forward's queued work.
  Tensor ids;
  const bool use_device = device_argmax && any_argmax &&
                          backend.sampling().supports(describe(ArgmaxArgs{logits, Tensor()})).runs_natively();
  if (use_device) {
    KILN_ASSIGN_OR_RETURN(Tensor dev_ids, st.allocate({logits.dim(0)}, DType::kI32));
    KILN_RETURN_IF_ERROR(backend.sampling().argmax({logits, dev_ids}));
    ids = Tensor::empty({logits.dim(0)}, DType::kI32);
    KILN_RETURN_IF_ERROR(st.copy_to_host(dev_ids, ids));
  }
  auto from_device = [&](const Sequence& s) { return use_device && needs_only_argmax(s.spec.sampling); };
  // Rows sampled on the host: each row's copy synchronises, so when they are many (a quarter of
  // the rows or more) one copy of the whole tensor costs less.
  size_t host_rows = 0;
  for (const RowToSample& r : rows) host_rows += !r.seq->must_close_reasoning() && !from_device(*r.seq);
  Tensor all;
  if (host_rows > 0 && 4 * host_rows >= static_cast<size_t>(logits.dim(0))) {
    all = Tensor::empty(logits.shape(), DType::kF32);
    KILN_RETURN_IF_ERROR(st.copy_to_host(logits, all));
  }
  Tensor host_row = Tensor::empty({1, V}, DType::kF32);
  for (size_t i = 0; i < rows.size(); ++i) {
    Sequence& s = *rows[i].seq;
    if (s.must_close_reasoning()) {
      out[i] = {s.spec.thinking.close_id, 0.f, {}};
    } else if (from_device(s)) {
      out[i].token = ids.data<int32_t>()[rows[i].row];
    } else if (all.defined()) {
      out[i] = on_host(s, all.data<float>() + rows[i].row * V);
    } else {
      KILN_RETURN_IF_ERROR(st.copy_to_host(logits.slice(0, rows[i].row, rows[i].row + 1), host_row));
      out[i] = on_host(s, host_row.data<float>());
    }
  }
  return out;
}

}  // namespace kiln
