// The hardware latency thresholds: each case of latency_cases.h, run on the CUDA device, must keep
// its median under the threshold locked for that device in latency_thresholds/<device>.json (its
// median x 1.25). Without a device, or on one nobody locked, the timed tests print SKIPPED.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <vector>

#include "backend/cuda/latency_cases.h"
#include "backend/registry.h"

namespace kiln {
namespace {

nlohmann::json read_json(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return nlohmann::json::parse(ss.str(), nullptr, false);
}

// The committed files, one per device, each lock exactly the eight cases at its measured median
// x 1.25, say where the measurement came from, and are filed under their device's name. The H200
// has one. Runs without a device.
TEST(LatencyThresholds, FileLocksEveryCaseAtMedianWithHeadroom) {
  const std::string dir = latency::thresholds_dir();
  std::vector<std::filesystem::path> files;
  for (const auto& e : std::filesystem::directory_iterator(dir)) files.push_back(e.path());
  std::sort(files.begin(), files.end());
  ASSERT_FALSE(files.empty()) << dir;
  EXPECT_TRUE(std::filesystem::exists(latency::thresholds_path("NVIDIA H200 (sm_90, 132 SMs, 143155 MiB)")));
  EXPECT_EQ(latency::case_names().size(), 8u);
  for (const auto& file : files) {
    SCOPED_TRACE(file.string());
    EXPECT_EQ(file.extension(), ".json");
    const nlohmann::json j = read_json(file.string());
    ASSERT_TRUE(j.is_object());
    EXPECT_EQ(j.value("schema", ""), "kiln.latency-thresholds/1");
    EXPECT_DOUBLE_EQ(j.value("headroom", 0.0), 1.25);
    const auto& p = j["provenance"];
    EXPECT_EQ(latency::device_slug(p.value("device", "")), file.stem().string());
    for (const char* key : {"driver", "commit", "date", "command"}) EXPECT_FALSE(p.value(key, "").empty()) << key;
    ASSERT_EQ(j["cases"].size(), latency::case_names().size());
    for (const auto& name : latency::case_names()) {
      ASSERT_TRUE(j["cases"].contains(name)) << name;
      const double median = j["cases"][name].value("measured_median_us", 0.0);
      const double limit = j["cases"][name].value("threshold_us", 0.0);
      EXPECT_GT(median, 0.0) << name;
      EXPECT_NEAR(limit, median * 1.25, 1e-9 * limit) << name;
    }
  }
}

TEST(LatencyThresholds, DeviceSlugIsTheLowerCaseNameBeforeItsProperties) {
  EXPECT_EQ(latency::device_slug("NVIDIA H200 (sm_90, 132 SMs, 143155 MiB)"), "nvidia-h200");
  EXPECT_EQ(latency::device_slug("NVIDIA H100 80GB HBM3 (sm_90, 132 SMs, 81559 MiB)"), "nvidia-h100-80gb-hbm3");
  EXPECT_EQ(latency::device_slug("NVIDIA GeForce RTX 4090"), "nvidia-geforce-rtx-4090");
  EXPECT_EQ(latency::device_slug("  A--b_c  "), "a-b-c");
}

// One backend for every case, never destroyed: its pool keeps what a case freed for the next,
// and nothing of it is torn down after the CUDA runtime at exit.
Backend* cuda_backend() {
  static Backend* be = [] {
    auto r = create_backend("cuda");
    return r.ok() ? std::move(r).value().release() : nullptr;
  }();
  return be;
}

void expect_within_threshold(const std::string& name) {
  Backend* be = cuda_backend();
  if (!be) GTEST_SKIP() << "SKIPPED: no CUDA device";
  auto r = latency::run_case(*be, name, latency::Roofline{});
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  std::printf("%s: median %.2f us, p90 %.2f us\n", name.c_str(), r.value().median_us, r.value().p90_us);
  EXPECT_GT(r.value().median_us, 0.0);
  // The thresholds are the locked device's, at its own kernels: another device, or the locked one
  // running another target's kernels (KILN_CUDA_TARGET), prints its figure without holding it.
  const std::string device = be->identity().device_name, path = latency::thresholds_path(device);
  if (!std::filesystem::exists(path))
    GTEST_SKIP() << "SKIPPED: no thresholds are locked for " << device << " (" << path
                 << "; cuda_latency_bench --lock " << latency::thresholds_dir() << " writes them)";
  auto thresholds = latency::read_thresholds(path);
  ASSERT_TRUE(thresholds.ok()) << thresholds.status().to_string();
  ASSERT_TRUE(thresholds.value().count(name)) << "no threshold for " << name << " in " << path;
  const std::string locked = read_json(path)["provenance"].value("device", "");
  if (device != locked)
    GTEST_SKIP() << "SKIPPED: the thresholds were locked on " << locked << "; this run is on " << device
                 << " (median printed above, not held)";
  EXPECT_LE(r.value().median_us, thresholds.value().at(name)) << name << " is over its locked threshold";
}

TEST(CudaLatency, DecodeQkvProjection) { expect_within_threshold("decode_qkv_proj"); }
TEST(CudaLatency, PrefillQkvProjectionM256) { expect_within_threshold("prefill_qkv_proj_m256"); }
TEST(CudaLatency, PrefillGateUpM256) { expect_within_threshold("prefill_gate_up_m256"); }
TEST(CudaLatency, LmHeadM1) { expect_within_threshold("lm_head_m1"); }
TEST(CudaLatency, PagedDecodeAttentionContext512) { expect_within_threshold("attention_decode_ctx512"); }
TEST(CudaLatency, PagedDecodeAttentionContext4096) { expect_within_threshold("attention_decode_ctx4096"); }
TEST(CudaLatency, GdnDecodeStep) { expect_within_threshold("gdn_decode_step"); }
TEST(CudaLatency, GdnChunkedPrefill4096) { expect_within_threshold("gdn_chunked_prefill_4096"); }

}  // namespace
}  // namespace kiln
