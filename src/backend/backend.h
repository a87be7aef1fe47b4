// A backend: its identity, its immutable capabilities, and its facets.
#pragma once

#include <memory>
#include <string>

#include "backend/capabilities.h"
#include "backend/facets.h"
#include "backend/training_facets.h"

namespace kiln {

struct BackendIdentity {
  std::string name;         // "cpu", "cuda", ...
  std::string device_name;  // what the device reports about itself
  Device device;
  int threads = 0;          // host threads the backend uses (cpu)
};

class Backend {
 public:
  virtual ~Backend() = default;
  virtual const BackendIdentity& identity() const = 0;
  virtual const BackendCapabilities& capabilities() const = 0;
  virtual StorageFacet& storage() = 0;
  virtual LinearFacet& linear() = 0;
  virtual NormFacet& norm() = 0;
  virtual AttentionFacet& attention() = 0;
  virtual ConvFacet& conv() = 0;
  virtual GdnFacet& gdn() = 0;
  virtual ElementwiseFacet& elementwise() = 0;
  virtual SamplingFacet& sampling() = 0;
  virtual TrainingFacet& training() = 0;
  virtual OptimizerFacet& optimizer() = 0;
};

}  // namespace kiln
