// Where tests find the source tree, its committed fixtures and the kiln binary. Every test file
// sees this header (kiln_add_test includes it on the command line). The paths themselves are
// compiled into one object, test_paths.cc, rather than into every test's command line: a test
// object then compiles the same in every checkout, and the compiler cache shares it.
#pragma once

namespace kiln::testing {
const char* source_dir();
const char* fixtures_dir();
const char* binary_path();
}  // namespace kiln::testing

#define KILN_SOURCE_DIR (::kiln::testing::source_dir())
#define KILN_FIXTURES_DIR (::kiln::testing::fixtures_dir())
#define KILN_BINARY_PATH (::kiln::testing::binary_path())
