#include "backend/cuda/kernel_choice.h"

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <unistd.h>

#include <nlohmann/json.hpp>

namespace kiln::cuda {

namespace {

constexpr const char* kSchema = "kiln.cuda-kernel-choices/1";

nlohmann::json read_file(const std::string& file) {
  std::ifstream in(file);
  if (!in) return nlohmann::json::object();
  std::stringstream ss;
  ss << in.rdbuf();
  nlohmann::json j = nlohmann::json::parse(ss.str(), nullptr, false);
  return j.is_object() ? j : nlohmann::json::object();
}

}  // namespace

std::string pick_fastest(const std::vector<TimedCandidate>& times, std::string_view preferred, double margin) {
  std::string best;
  double best_us = 1e300;
  for (const TimedCandidate& t : times) {
    const double us = t.name == preferred ? t.us / (1.0 + margin) : t.us;
    if (us < best_us) best = t.name, best_us = us;
  }
  return best;
}

KernelChoices::KernelChoices(std::string file, std::string scope) : file_(std::move(file)), scope_(std::move(scope)) {
  if (file_.empty()) return;
  const nlohmann::json j = read_file(file_);
  if (j.value("schema", "") != kSchema || !j.contains("scopes") || !j["scopes"].is_object() ||
      !j["scopes"].contains(scope_))
    return;
  const nlohmann::json& mine = j["scopes"][scope_];
  if (!mine.is_object()) return;
  for (auto it = mine.begin(); it != mine.end(); ++it)
    if (it->is_object() && it->contains("kernel") && (*it)["kernel"].is_string())
      choices_[it.key()] = (*it)["kernel"].get<std::string>();
}

std::optional<std::string> KernelChoices::find(const std::string& key) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = choices_.find(key);
  if (it == choices_.end()) return std::nullopt;
  return it->second;
}

size_t KernelChoices::size() const {
  std::lock_guard<std::mutex> lock(mu_);
  return choices_.size();
}

void KernelChoices::forget(const std::string& key) {
  std::lock_guard<std::mutex> lock(mu_);
  choices_.erase(key);
}

void KernelChoices::put(const std::string& key, const std::string& kernel, const std::vector<TimedCandidate>& times) {
  std::lock_guard<std::mutex> lock(mu_);
  choices_[key] = kernel;
  if (file_.empty()) return;
  // Another process may have added its own: merge into what the file holds now.
  nlohmann::json j = read_file(file_);
  if (j.value("schema", "") != kSchema) j = nlohmann::json::object();
  j["schema"] = kSchema;
  if (!j.contains("scopes") || !j["scopes"].is_object()) j["scopes"] = nlohmann::json::object();
  nlohmann::json entry = {{"kernel", kernel}};
  if (!times.empty()) {
    nlohmann::json us = nlohmann::json::object();
    for (const TimedCandidate& t : times) us[t.name] = t.us;
    entry["us"] = us;
  }
  j["scopes"][scope_][key] = entry;
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
  if (const char* f = std::getenv("KILN_CUDA_KERNEL_CHOICES"); f != nullptr && f[0] != '\0') return f;
  if (const char* x = std::getenv("XDG_CACHE_HOME"); x != nullptr && x[0] != '\0')
    return std::string(x) + "/kiln/cuda-kernel-choices.json";
  if (const char* h = std::getenv("HOME"); h != nullptr && h[0] != '\0')
    return std::string(h) + "/.cache/kiln/cuda-kernel-choices.json";
  return "";
}

}  // namespace kiln::cuda
