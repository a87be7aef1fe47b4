// Placeholder until the CPU optimizer steps land: every request is declined, naming itself.
#include "backend/cpu/cpu_facets.h"

namespace kiln::cpu {

Support Optimizer::supports(const OptimizerRequest&) const {
  return Support::declined("not written yet on the CPU backend");
}
Status Optimizer::step(const OptimizerStepArgs& a) {
  return unsupported("declined " + describe(a).describe() + ": not written yet on the CPU backend");
}

}  // namespace kiln::cpu
