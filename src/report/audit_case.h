// One case of the support audit (support_audit.h): it builds small arguments on the backend, asks
// the facet's predicate about describe(args) and runs the paired method. Shared by the case
// tables of the inference facets (support_audit.cc) and the training facets
// (support_audit_training.cc).
#pragma once

#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "backend/backend.h"

namespace kiln {

using AuditOutcome = std::pair<Support, std::pair<std::string, Status>>;  // predicate, (request, method status)

struct AuditCase {
  std::string facet;
  std::function<Result<AuditOutcome>(Backend&)> run;
};

inline Result<Tensor> audit_tensor(Backend& be, Shape shape, DType dtype) { return be.storage().allocate(shape, dtype); }

// Asks the predicate for describe(args) and runs `method(args)`.
template <typename Args, typename Pred, typename Method>
Result<AuditOutcome> ask_and_run(const Args& args, Pred pred, Method method) {
  auto req = describe(args);
  Support s = pred(req);
  Status st = method(args);
  return std::make_pair(s, std::make_pair(req.describe(), st));
}

// A layout of rows of the given lengths from position 0, over K/V blocks of 4 tokens.
Result<BatchLayout> audit_layout(Backend& be, const std::vector<int64_t>& lens);

std::vector<AuditCase> training_audit_cases();

}  // namespace kiln

#define KILN_AUDIT_TENSOR(var, ...) KILN_ASSIGN_OR_RETURN(Tensor var, audit_tensor(be, __VA_ARGS__))
