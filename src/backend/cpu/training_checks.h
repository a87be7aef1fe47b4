// The opening of every CPU training method: the request, the facet's own predicate (a decline is
// kUnsupported naming it), then the structural checks of the arguments (training_checks.cc).
#pragma once

#include <string>

#include "backend/arg_checks.h"
#include "backend/training_facets.h"

namespace kiln::cpu {

// Tensors present, on the host, f32 where they are activations, of consistent shapes.
Status validate_train(const GemmArgs& a, const std::string& req);
Status validate_train(const NormBackwardArgs& a, const std::string& req);
Status validate_train(const SiluMulBackwardArgs& a, const std::string& req);
Status validate_train(const RopeBackwardArgs& a, const std::string& req);
Status validate_train(const AttentionBackwardArgs& a, const std::string& req);
Status validate_train(const TokenLogprobArgs& a, const std::string& req);
Status validate_train(const TokenLogprobBackwardArgs& a, const std::string& req);

template <typename Args>
Result<std::string> open_train_call(const TrainingFacet& facet, const Args& args) {
  const TrainRequest request = describe(args);
  std::string text = request.describe();
  const Support s = facet.supports(request);
  if (!s.runs_natively()) return declined("cpu", text, s.constraint);
  KILN_RETURN_IF_ERROR(validate_train(args, text));
  return text;
}

}  // namespace kiln::cpu
