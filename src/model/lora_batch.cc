#include "model/lora_batch.h"

#include <algorithm>
#include <cmath>

namespace kiln {

namespace {

bool same_stack(std::span<const LoraTerm> a, std::span<const LoraTerm> b) {
  return std::equal(a.begin(), a.end(), b.begin(), b.end());
}

}  // namespace

Result<LoraBatch> LoraBatch::create(std::span<const SequenceInput> rows, const ModelConfig& model, Backend& backend) {
  LoraBatch batch;
  batch.backend_ = &backend;
  int64_t t = 0;
  for (size_t i = 0; i < rows.size(); ++i) {
    const int64_t n = static_cast<int64_t>(rows[i].tokens.size());
    const auto stack = rows[i].lora;
    for (size_t j = 0; j < stack.size(); ++j) {
      const LoraTerm& term = stack[j];
      const std::string where = "forward: row " + std::to_string(i) + " adapter ";
      if (term.adapter == nullptr) return invalid_argument(where + std::to_string(j) + " is null");
      if (!std::isfinite(term.weight))
        return invalid_argument(where + std::to_string(j) + " has weight " + std::to_string(term.weight));
      if (term.adapter->num_layers() != model.num_layers)
        return invalid_argument(where + std::to_string(j) + " has " + std::to_string(term.adapter->num_layers()) +
                                " layers, the model " + std::to_string(model.num_layers));
    }
    if (!stack.empty()) {
      if (!batch.runs_.empty() && batch.runs_.back().end == t && same_stack(batch.runs_.back().stack, stack)) {
        batch.runs_.back().end = t + n;
      } else {
        batch.runs_.push_back({t, t + n, stack});
      }
    }
    t += n;
  }
  return batch;
}

Status LoraBatch::apply(LoraTarget target, int64_t layer, const Tensor& x, const Tensor& out, Tensor* keep_u) {
  if (runs_.empty()) return {};
  segments_.clear();
  for (const Run& run : runs_) {
    for (const LoraTerm& term : run.stack) {
      const float c = term.weight * term.adapter->scale();
      const LoraFactors& f = term.adapter->factors(layer, target);
      if (c == 0.f || !f.defined()) continue;
      const int64_t r = term.adapter->config().rank;
      if (f.a.dim(0) != r || f.b.dim(1) != r || f.a.dim(1) != x.dim(1) || f.b.dim(0) != out.dim(1))
        return invalid_argument("forward: adapter " + term.adapter->tensor_name(layer, target, false) + " is " +
                                f.a.shape().to_string() + " with B " + f.b.shape().to_string() + " at rank " +
                                std::to_string(r) + ", the model's projection maps " + std::to_string(x.dim(1)) +
                                " to " + std::to_string(out.dim(1)));
      segments_.push_back({run.begin, run.end, f.a, f.b, c});
    }
  }
  if (segments_.empty()) return {};
  LoraDeltaArgs d{x, out, segments_};
  d.storage = &backend_->storage();
  if (keep_u && segments_.size() == 1 && segments_[0].begin == 0 && segments_[0].end == x.dim(0)) {
    KILN_ASSIGN_OR_RETURN(d.u, d.storage->empty({x.dim(0), segments_[0].a.dim(0)}, DType::kF32));
    *keep_u = d.u;
  }
  return backend_->linear().lora_delta(d);
}

}  // namespace kiln
