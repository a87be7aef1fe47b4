// A random checkpoint of the `tiny` preset (3 GDN layers + 1 attention layer, vocab 512) in a
// fresh temporary folder: what tests load when they need 16-bit weights without a fixture.
#pragma once

#include <gtest/gtest.h>

#include <string>

#include "model/init.h"
#include "test_util.h"

namespace kiln::testing {

// The folder, or "" (and a test failure naming why) when the checkpoint could not be written.
inline std::string tiny_checkpoint(const std::string& tag, uint64_t seed, DType dtype = DType::kBF16) {
  const std::string dir = temp_dir(tag);
  InitOptions o;
  o.seed = seed;
  o.dtype = dtype;
  o.quiet = true;
  const Status s = write_random_checkpoint(preset_config("tiny").value(), dir, o);
  EXPECT_TRUE(s.ok()) << s.to_string();
  return s.ok() ? dir : std::string();
}

}  // namespace kiln::testing
