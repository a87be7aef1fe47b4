// Which kernel family serves each operation of the 4B shape (head_dim 256, GDN dk = dv = 128) on
// the target (device_target()), in words: the capability report's `kernels` section. Each entry
// asks the predicate its facet asks, so the words follow the dispatch.
#pragma once

#include <string>
#include <utility>
#include <vector>

namespace kiln::cuda {

std::vector<std::pair<std::string, std::string>> kernel_families();

}  // namespace kiln::cuda
