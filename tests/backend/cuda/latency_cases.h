// The hardware latency cases: the eight Qwen3.5-4B calls whose device latency is locked, per
// device, by tests/backend/cuda/latency_thresholds/<device>.json, measured through the backend facets.
// Shared by cuda_latency_bench (measures, writes the result artifact, checks a run against the
// thresholds) and cuda_latency_tests (fails a case whose median exceeds its threshold).
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "backend/backend.h"
#include "core/status.h"

namespace kiln::latency {

// Headroom over the measured median that a locked threshold allows: threshold = median x 1.25.
inline constexpr double kHeadroom = 1.25;

// The case names, in the order they run.
const std::vector<std::string>& case_names();

// Measured ceilings of the device: device-to-device copy bandwidth (read + write bytes per
// second) and the dense GEMM rate through the linear facet (bf16 weights, 4096^3, FLOP/s).
struct Roofline {
  double copy_bytes_per_s = 0, gemm_flops_per_s = 0;
};
Result<Roofline> measure_roofline(Backend& be);

struct CaseResult {
  std::string name, shape;
  double median_us = 0, p90_us = 0;
  double bytes = 0, flops = 0;  // moved to/from device memory, and arithmetic, per call
  double bound_us = 0;          // max(bytes / copy bandwidth, flops / GEMM rate)
};

// Runs one case: warm-up, then 11 timed batches (each one synchronisation), the median and p90
// of the per-call times. Inputs the call reads from memory (weights, K/V, states) rotate over
// enough copies to exceed the L2 cache.
Result<CaseResult> run_case(Backend& be, const std::string& name, const Roofline& roof);

nlohmann::json to_json(const CaseResult& r);

// The locked thresholds (case name -> microseconds) of a thresholds file.
Result<std::map<std::string, double>> read_thresholds(const std::string& path);

// The file name stem of a device's thresholds: its name before any " (", lower case, every run of
// other characters than letters and digits one '-' ("NVIDIA H100 80GB HBM3 (sm_90, ...)" ->
// "nvidia-h100-80gb-hbm3").
std::string device_slug(const std::string& device_name);

// The folder of the committed thresholds files, one per device: the one under the working
// directory (a copied tree), else the one in the source tree.
std::string thresholds_dir();

// The thresholds file of a device: $KILN_LATENCY_THRESHOLDS, else <thresholds_dir()>/<slug>.json
// (which need not exist: a device nobody locked has none).
std::string thresholds_path(const std::string& device_name);

}  // namespace kiln::latency
