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
  int64_t t = 0, longest = 0, max_rank = 0;
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
      max_rank = std::max(max_rank, term.adapter->config().rank);
    }
    if (!stack.empty()) {
      if (!batch.runs_.empty() && batch.runs_.back().end == t && same_stack(batch.runs_.back().stack, stack)) {
        batch.runs_.back().end = t + n;
      } else {
        batch.runs_.push_back({t, t + n, stack});
      }
      longest = std::max(longest, batch.runs_.back().end - batch.runs_.back().begin);
    }
    t += n;
  }
  if (batch.runs_.empty()) return batch;

  StorageFacet& s = backend.storage();
  KILN_ASSIGN_OR_RETURN(batch.u_, s.allocate({longest * max_rank}, DType::kF32));
  KILN_ASSIGN_OR_RETURN(batch.v_, s.allocate({longest * max_rank}, DType::kF32));
  for (const Run& run : batch.runs_)
    for (const LoraTerm& term : run.stack) {
      const int64_t r = term.adapter->config().rank;
      const float c = term.weight * term.adapter->scale();
      if (c == 0.f || c == 1.f || batch.scalings_.count({r, c})) continue;
      KILN_ASSIGN_OR_RETURN(batch.scalings_[std::make_pair(r, c)], term.adapter->scaling_matrix(c, s));
    }
  return batch;
}

Status LoraBatch::apply(LoraTarget target, int64_t layer, const Tensor& x, const Tensor& out) {
  if (runs_.empty()) return {};
  LinearFacet& lin = backend_->linear();
  for (const Run& run : runs_) {
    const int64_t n = run.end - run.begin;
    const Tensor xs = x.slice(0, run.begin, run.end), ys = out.slice(0, run.begin, run.end);
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
      Tensor u = u_.as_strided({n, r}, {r, 1});
      KILN_RETURN_IF_ERROR(lin.matmul({xs, f.a, u}));  // u = x A^T
      if (c != 1.f) {
        Tensor v = v_.as_strided({n, r}, {r, 1});
        KILN_RETURN_IF_ERROR(lin.matmul({u, scalings_.at({r, c}), v}));  // v = c u
        u = v;
      }
      MatmulArgs d{u, f.b, ys};
      d.accumulate = true;  // y += (c x A^T) B^T
      KILN_RETURN_IF_ERROR(lin.matmul(d));
    }
  }
  return {};
}

}  // namespace kiln
