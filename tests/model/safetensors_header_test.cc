// Safetensors headers written to be hostile (what the safetensors fuzz target found): shapes
// whose byte count overflows, or whose dims read as int64 multiply to a small positive count,
// are refused naming the tensor, not accepted as tensors with negative dims.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>

#include <nlohmann/json.hpp>

#include "model/safetensors.h"

namespace kiln {
namespace {

// A file of `header` followed by `data_bytes` zero bytes.
std::string write_file(const nlohmann::json& header, size_t data_bytes) {
  const std::string h = header.dump();
  const uint64_t len = h.size();
  const std::string path = (std::filesystem::temp_directory_path() /
                            ("kiln_safetensors_header_" + std::to_string(::getpid()) + ".safetensors")).string();
  std::ofstream f(path, std::ios::binary);
  f.write(reinterpret_cast<const char*>(&len), 8);
  f << h << std::string(data_bytes, '\0');
  return path;
}

Status open_with_shape(const nlohmann::json& shape, uint64_t bytes) {
  const nlohmann::json header = {{"w", {{"dtype", "F32"}, {"shape", shape}, {"data_offsets", {0, bytes}}}}};
  const std::string path = write_file(header, bytes);
  Status st = Checkpoint::open_file(path).status();
  std::filesystem::remove(path);
  return st;
}

TEST(SafetensorsHeader, ShapesWhoseByteCountOverflowsAreRefusedNamingTheTensor) {
  // 2^62 * 4 elements: the int64 element count overflowed.
  Status st = open_with_shape({uint64_t{1} << 62, 4}, 0);
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("tensor 'w': shape [4611686018427387904, 4] holds more than 2^64 bytes"), std::string::npos)
      << st.message();
  // Two dims of 2^64 - 1 read as int64 are -1 each: a "1-element" tensor of shape [-1, -1].
  st = open_with_shape({UINT64_MAX, UINT64_MAX}, 4);
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("tensor 'w': shape entries must be non-negative integers below 2^63"), std::string::npos)
      << st.message();
  EXPECT_TRUE(open_with_shape({2, 3}, 24).ok());
}

}  // namespace
}  // namespace kiln
