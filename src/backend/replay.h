// Replay: a sequence of facet calls recorded once and run again as one unit (CUDA graphs), so
// that a decode step costs one launch instead of hundreds. The caller records a body that reads
// its inputs from fixed device buffers; each later step refreshes those buffers and replays.
#pragma once

#include <functional>
#include <memory>
#include <string>

#include "core/status.h"

namespace kiln {

// One recorded sequence. Destroying it releases what the backend keeps for it.
class Recording {
 public:
  virtual ~Recording() = default;
};

class ReplayFacet {
 public:
  virtual ~ReplayFacet() = default;
  // Whether record() works on this backend now; where it does not, callers run eagerly.
  virtual bool available() const = 0;
  // Runs `body` with the backend recording instead of executing: the facet calls it makes are
  // kept in order, with the tensors (device addresses) they were given, and nothing runs. The
  // body must not copy to the host or synchronise. What it allocates comes from memory kept for
  // recordings alone; every other tensor it touches must outlive the recording at its address.
  virtual Result<std::unique_ptr<Recording>> record(const std::function<Status()>& body) = 0;
  // Runs `r` again, ordered after the work already queued on the backend.
  virtual Status replay(const Recording& r) = 0;
};

// The replay facet of a backend that runs every step eagerly.
class NoReplay final : public ReplayFacet {
 public:
  explicit NoReplay(std::string why) : why_(std::move(why)) {}
  bool available() const override { return false; }
  Result<std::unique_ptr<Recording>> record(const std::function<Status()>&) override { return unsupported(why_); }
  Status replay(const Recording&) override { return unsupported(why_); }

 private:
  std::string why_;
};

}  // namespace kiln
