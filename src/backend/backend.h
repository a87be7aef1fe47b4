// A backend: its identity, its immutable capabilities, and its facets.
#pragma once

#include <memory>
#include <string>

#include "backend/capabilities.h"
#include "backend/facets.h"
#include "backend/replay.h"
#include "backend/training_facets.h"

namespace kiln {

struct BackendIdentity {
  std::string name;         // "cpu", "cuda", ...
  std::string device_name;  // what the device reports about itself
  std::string driver;       // its driver's name and version, where the backend can tell ("" otherwise)
  Device device;
  int threads = 0;          // host threads the backend uses (cpu)
  std::string warning;      // what a user should know of the device chosen ("" when nothing)
};

// Memory of the device a backend computes on, as far as it can tell; -1 where unknown.
struct MemoryUsage {
  int64_t used_bytes = -1, total_bytes = -1;
  std::string what;  // what `used` counts ("this process's resident set", "the device, every process")
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
  // Recording and replaying facet calls (CUDA graphs); by default none: every step runs eagerly.
  virtual ReplayFacet& replay() {
    static NoReplay none("this backend runs every step eagerly (no replay)");
    return none;
  }
  // Read at the time of the call (for /health and the dashboard); unknown by default.
  virtual MemoryUsage memory_usage() const { return {}; }
};

}  // namespace kiln
