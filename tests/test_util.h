// Helpers shared by the tests: seeded random tensors and error measures.
#pragma once

#include <stdlib.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "core/tensor.h"

namespace kiln::testing {

inline Tensor random_tensor(Shape shape, uint32_t seed, float scale = 1.f, DType dtype = DType::kF32) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.f, scale);
  Tensor t = Tensor::empty(shape, dtype);
  for (int64_t i = 0; i < t.numel(); ++i) {
    float v = dist(rng);
    if (dtype == DType::kF32) t.data<float>()[i] = v;
    else if (dtype == DType::kBF16) t.data<uint16_t>()[i] = f32_to_bf16(v);
    else t.data<uint16_t>()[i] = f32_to_f16(v);
  }
  return t;
}

inline float value_at(const Tensor& t, int64_t flat) {  // contiguous tensors
  switch (t.dtype()) {
    case DType::kBF16: return bf16_to_f32(t.data<uint16_t>()[flat]);
    case DType::kF16: return f16_to_f32(t.data<uint16_t>()[flat]);
    default: return t.data<float>()[flat];
  }
}

// max |a - b| over two contiguous f32 buffers of n elements.
inline double max_abs_diff(const float* a, const float* b, int64_t n) {
  double m = 0;
  for (int64_t i = 0; i < n; ++i) {
    double d = std::fabs(static_cast<double>(a[i]) - b[i]);
    if (std::isnan(d)) return INFINITY;
    m = std::max(m, d);
  }
  return m;
}

// The bytes of a file ("" when it cannot be read).
inline std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// A fresh directory /tmp/kiln-test-<tag>-XXXXXX, removed with everything in it when the test
// binary exits (KILN_KEEP_TEST_DIRS=1 keeps them for a post-mortem).
inline std::string temp_dir(const std::string& tag) {
  struct Made {
    std::vector<std::string> dirs;
    ~Made() {
      const char* keep = std::getenv("KILN_KEEP_TEST_DIRS");
      if (keep != nullptr && keep[0] != '\0' && keep[0] != '0') return;
      std::error_code ec;
      for (const std::string& d : dirs) std::filesystem::remove_all(d, ec);
    }
  };
  static Made made_dirs;
  std::string pattern = "/tmp/kiln-test-" + tag + "-XXXXXX";
  char* made = mkdtemp(pattern.data());
  if (made == nullptr) return {};
  made_dirs.dirs.emplace_back(made);
  return made;
}

}  // namespace kiln::testing
