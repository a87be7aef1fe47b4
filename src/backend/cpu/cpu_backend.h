// The CPU reference backend: f32 compute over f32/bf16/f16 weights, multi-threaded on the
// process thread pool, OpenBLAS (single-threaded per call) for large GEMMs.
#pragma once

#include <memory>

#include "backend/backend.h"

namespace kiln {

std::unique_ptr<Backend> make_cpu_backend();

}  // namespace kiln
