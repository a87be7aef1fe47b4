// cuda_latency_bench: the hardware latency cases of latency_cases.h on the CUDA device. Prints a
// table (median, p90, roofline bound per case) and, with
//   --json PATH    writes the result artifact {"device", "driver", "commit", "build", "time", "roofline", "cases": [...]};
//   --lock PATH    writes a thresholds file locking each case at its median x 1.25, with the run's provenance
//                  (PATH a folder, e.g. tests/backend/cuda/latency_thresholds: the device's file in it);
//   --check PATH   compares the run with a thresholds file and exits 1 naming every case over its threshold.
// Without a CUDA device it prints SKIPPED and exits 0. The commit is the one compiled into the binary
// (core/build_stamp.h; `build` adds whether it was built from uncommitted changes).
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "backend/cuda/latency_cases.h"
#include "core/build_stamp.h"
#include "backend/registry.h"

namespace {

std::string command_output(const std::string& cmd) {
  std::string out;
  if (FILE* p = popen(cmd.c_str(), "r")) {
    char buf[256];
    size_t n;
    while ((n = fread(buf, 1, sizeof buf, p)) > 0) out.append(buf, n);
    pclose(p);
  }
  while (!out.empty() && (out.back() == '\n' || out.back() == ' ')) out.pop_back();
  return out;
}

bool write_json(const std::string& path, const nlohmann::json& j) {
  std::ofstream out(path);
  out << j.dump(1) << "\n";
  if (!out) std::fprintf(stderr, "cannot write %s\n", path.c_str());
  return static_cast<bool>(out);
}

int usage() {
  std::fprintf(stderr, "usage: cuda_latency_bench [--json PATH] [--lock PATH] [--check THRESHOLDS.json]\n");
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  using namespace kiln;
  std::string json_path, lock_path, check_path, command = argv[0];
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    command += " " + a;
    if (i + 1 >= argc) return usage();
    const std::string v = argv[++i];
    command += " " + v;
    if (a == "--json") json_path = v;
    else if (a == "--lock") lock_path = v;
    else if (a == "--check") check_path = v;
    else return usage();
  }
  std::map<std::string, double> thresholds;
  if (!check_path.empty()) {
    auto t = latency::read_thresholds(check_path);
    if (!t.ok()) {
      std::fprintf(stderr, "%s\n", t.status().to_string().c_str());
      return 2;
    }
    thresholds = t.value();
  }
  auto created = create_backend("cuda");
  if (!created.ok()) {
    std::printf("SKIPPED: no CUDA device (%s)\n", created.status().to_string().c_str());
    return 0;
  }
  Backend& be = *created.value();
  const std::string device = be.identity().device_name;
  const std::string driver = command_output("nvidia-smi --query-gpu=driver_version --format=csv,noheader 2>/dev/null | head -1");
  const std::string commit(build_stamp().commit);
  char stamp[32];
  std::time_t now = std::time(nullptr);
  std::strftime(stamp, sizeof stamp, "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&now));

  auto roof = latency::measure_roofline(be);
  if (!roof.ok()) {
    std::fprintf(stderr, "roofline: %s\n", roof.status().to_string().c_str());
    return 2;
  }
  std::printf("device: %s (driver %s)\nroofline: copy %.2f TB/s (read + write), GEMM %.0f TFLOP/s (bf16 4096^3 via the linear facet)\n",
              device.c_str(), driver.c_str(), roof.value().copy_bytes_per_s * 1e-12, roof.value().gemm_flops_per_s * 1e-12);
  std::printf("%-26s %11s %11s %11s %11s\n", "case", "median us", "p90 us", "bound us", "threshold");
  nlohmann::json cases = nlohmann::json::array(), locked = nlohmann::json::object();
  std::vector<std::string> over;
  int failed = 0;
  for (const auto& name : latency::case_names()) {
    auto r = latency::run_case(be, name, roof.value());
    if (!r.ok()) {
      std::printf("%-26s ERROR %s\n", name.c_str(), r.status().to_string().c_str());
      ++failed;
      continue;
    }
    const auto& c = r.value();
    std::string limit = "-";
    if (!check_path.empty()) {
      auto it = thresholds.find(name);
      if (it == thresholds.end()) {
        limit = "none";
        over.push_back(name + " (no threshold in " + check_path + ")");
      } else {
        limit = std::to_string(it->second);
        if (c.median_us > it->second) over.push_back(name + ": median " + std::to_string(c.median_us) + " us > threshold " + std::to_string(it->second) + " us");
      }
    }
    std::printf("%-26s %11.2f %11.2f %11.2f %11s\n", name.c_str(), c.median_us, c.p90_us, c.bound_us, limit.c_str());
    std::fflush(stdout);
    cases.push_back(latency::to_json(c));
    locked[name] = {{"measured_median_us", c.median_us}, {"threshold_us", c.median_us * latency::kHeadroom}};
  }
  nlohmann::json roofline = {{"copy_bytes_per_s", roof.value().copy_bytes_per_s},
                             {"gemm_flops_per_s", roof.value().gemm_flops_per_s},
                             {"how", "device-to-device copy of 1 GiB (read + write bytes); linear-facet matmul 4096x4096x4096, bf16 weights, f32 x"}};
  if (!json_path.empty() &&
      !write_json(json_path, {{"schema", "kiln.cuda-latency/1"}, {"device", device}, {"driver", driver}, {"commit", commit},
                              {"build", build_stamp_json()}, {"time", stamp}, {"command", command}, {"roofline", roofline}, {"cases", cases}}))
    return 2;
  if (!lock_path.empty() && std::filesystem::is_directory(lock_path))
    lock_path += "/" + latency::device_slug(device) + ".json";
  if (!lock_path.empty() &&
      !write_json(lock_path, {{"schema", "kiln.latency-thresholds/1"},
                              {"headroom", latency::kHeadroom},
                              {"rule", "threshold_us = measured_median_us x 1.25: 25% headroom over the median of the locked run"},
                              {"provenance", {{"device", device}, {"driver", driver}, {"commit", commit}, {"build", build_stamp_json()},
                                              {"date", stamp}, {"command", command}}},
                              {"cases", locked}}))
    return 2;
  if (failed) return 2;
  if (!over.empty()) {
    std::printf("OVER THRESHOLD (%zu of %zu cases):\n", over.size(), latency::case_names().size());
    for (const auto& o : over) std::printf("  %s\n", o.c_str());
    return 1;
  }
  if (!check_path.empty()) std::printf("all %zu cases within their thresholds\n", latency::case_names().size());
  return 0;
}
