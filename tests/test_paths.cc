// The paths test_paths.h names, as the build defined them for this object alone.
#include "test_paths.h"

namespace kiln::testing {
const char* source_dir() { return KILN_TEST_SOURCE_DIR; }
const char* fixtures_dir() { return KILN_TEST_SOURCE_DIR "/tests/fixtures"; }
const char* binary_path() { return KILN_TEST_BINARY_PATH; }
}  // namespace kiln::testing
