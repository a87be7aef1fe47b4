#include "backend/cuda/gemm_choice.h"

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <unistd.h>

#include <nlohmann/json.hpp>

namespace kiln::cuda {

namespace {

constexpr std::string_view kNames[] = {"cublaslt", "gemv", "skinny"};

std::optional<SmallGemm> kernel_named(std::string_view s) {
  for (size_t i = 0; i < std::size(kNames); ++i)
    if (kNames[i] == s) return static_cast<SmallGemm>(i);
  return std::nullopt;
}

std::optional<SmallGemmKey> parse_key(const std::string& s) {
  SmallGemmKey k;
  long long m = 0, n = 0, kk = 0;
  char w[16] = {}, x[16] = {};
  int used = 0;
  if (std::sscanf(s.c_str(), "m=%lld n=%lld k=%lld w=%15s x=%15s%n", &m, &n, &kk, w, x, &used) != 5) return std::nullopt;
  const std::string rest = s.substr(static_cast<size_t>(used));
  if (rest != "" && rest != " gemv" && rest != " skinny" && rest != " gemv skinny") return std::nullopt;
  k.gemv = rest.find("gemv") != std::string::npos;
  k.skinny = rest.find("skinny") != std::string::npos;
  const std::optional<DType> wd = parse_dtype(w), xd = parse_dtype(x);
  if (!wd || !xd) return std::nullopt;
  k.m = m;
  k.n = n;
  k.k = kk;
  k.w = *wd;
  k.x = *xd;
  return k;
}

nlohmann::json read_file(const std::string& file) {
  std::ifstream in(file);
  if (!in) return nlohmann::json::object();
  std::stringstream ss;
  ss << in.rdbuf();
  nlohmann::json j = nlohmann::json::parse(ss.str(), nullptr, false);
  return j.is_object() ? j : nlohmann::json::object();
}

}  // namespace

std::string_view small_gemm_name(SmallGemm k) { return kNames[static_cast<size_t>(k)]; }

std::string SmallGemmKey::text() const {
  return "m=" + std::to_string(m) + " n=" + std::to_string(n) + " k=" + std::to_string(k) +
         " w=" + std::string(dtype_name(w)) + " x=" + std::string(dtype_name(x)) + (gemv ? " gemv" : "") +
         (skinny ? " skinny" : "");
}

SmallGemm pick_small_gemm(const SmallGemmTimes& t) {
  SmallGemm best = SmallGemm::kCublasLt;
  double best_us = t.cublaslt_us ? *t.cublaslt_us / 1.03 : 1e300;
  if (t.gemv_us && *t.gemv_us < best_us) best = SmallGemm::kGemv, best_us = *t.gemv_us;
  if (t.skinny_us && *t.skinny_us < best_us) best = SmallGemm::kSkinny;
  return best;
}

SmallGemmChoices::SmallGemmChoices(std::string file, std::string scope) : file_(std::move(file)), scope_(std::move(scope)) {
  if (file_.empty()) return;
  const nlohmann::json j = read_file(file_);
  if (!j.contains("scopes") || !j["scopes"].is_object() || !j["scopes"].contains(scope_)) return;
  const nlohmann::json& mine = j["scopes"][scope_];
  if (!mine.is_object()) return;
  for (auto it = mine.begin(); it != mine.end(); ++it) {
    const auto key = parse_key(it.key());
    const auto kernel = it->is_object() && it->contains("kernel") && (*it)["kernel"].is_string()
                            ? kernel_named((*it)["kernel"].get<std::string>())
                            : std::nullopt;
    if (key && kernel) choices_[*key] = *kernel;
  }
}

std::optional<SmallGemm> SmallGemmChoices::find(const SmallGemmKey& key) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = choices_.find(key);
  if (it == choices_.end()) return std::nullopt;
  return it->second;
}

size_t SmallGemmChoices::size() const {
  std::lock_guard<std::mutex> lock(mu_);
  return choices_.size();
}

void SmallGemmChoices::put(const SmallGemmKey& key, SmallGemm choice, const SmallGemmTimes& times) {
  std::lock_guard<std::mutex> lock(mu_);
  choices_[key] = choice;
  if (file_.empty()) return;
  // Another process may have added its own: merge into what the file holds now.
  nlohmann::json j = read_file(file_);
  j["schema"] = "kiln.cuda-gemm-choices/1";
  if (!j.contains("scopes") || !j["scopes"].is_object()) j["scopes"] = nlohmann::json::object();
  nlohmann::json entry = {{"kernel", std::string(small_gemm_name(choice))}};
  if (times.cublaslt_us) entry["cublaslt_us"] = *times.cublaslt_us;
  if (times.gemv_us) entry["gemv_us"] = *times.gemv_us;
  if (times.skinny_us) entry["skinny_us"] = *times.skinny_us;
  j["scopes"][scope_][key.text()] = entry;
  std::error_code ec;
  std::filesystem::create_directories(std::filesystem::path(file_).parent_path(), ec);
  const std::string tmp = file_ + ".tmp" + std::to_string(static_cast<long long>(::getpid()));
  {
    std::ofstream out(tmp);
    if (!out) return;
    out << j.dump(1) << "\n";
    if (!out) return;
  }
  std::filesystem::rename(tmp, file_, ec);
  if (ec) std::filesystem::remove(tmp, ec);
}

std::string default_choices_file() {
  if (const char* f = std::getenv("KILN_CUDA_GEMM_CHOICES"); f != nullptr && f[0] != '\0') return f;
  if (const char* x = std::getenv("XDG_CACHE_HOME"); x != nullptr && x[0] != '\0')
    return std::string(x) + "/kiln/cuda-gemm-choices.json";
  if (const char* h = std::getenv("HOME"); h != nullptr && h[0] != '\0') return std::string(h) + "/.cache/kiln/cuda-gemm-choices.json";
  return "";
}

}  // namespace kiln::cuda
