// A request's constraint on the tokens it may generate (structured outputs: the server wraps a
// grammar's matcher in one). Each step the engine asks every constrained row for the bitmask of
// the ids that may come next and samples among them; each token it then emits is passed back.
// The engine knows nothing of grammars; a constraint is used by one thread at a time.
#pragma once

#include <cstdint>
#include <span>

#include "core/status.h"

namespace kiln {

class TokenConstraint {
 public:
  virtual ~TokenConstraint() = default;
  // Sets exactly the bits of the ids allowed next (bit id % 32 of word id / 32) over
  // (vocabulary + 31) / 32 words; at least one bit while the request runs (an end-of-text id once
  // the text is complete).
  virtual Status fill_mask(std::span<uint32_t> words) = 0;
  // The token that was generated (one fill_mask allowed).
  virtual Status accept(int32_t token) = 0;
  // Whether fill_mask takes microseconds (cached) rather than milliseconds: the engine runs the
  // cheap ones on its own thread and spreads the others over its pool.
  virtual bool mask_is_cheap() const = 0;
};

}  // namespace kiln
