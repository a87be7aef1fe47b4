#include "hub/pull_progress.h"

#include <chrono>
#include <cmath>

namespace kiln::hub {

namespace {

double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

std::string format_duration(double s) {
  if (!std::isfinite(s) || s < 0) return "?";
  const long long t = static_cast<long long>(s + 0.5);
  char buf[32];
  if (t >= 3600) std::snprintf(buf, sizeof buf, "%lldh%02lldm", t / 3600, (t / 60) % 60);
  else if (t >= 60) std::snprintf(buf, sizeof buf, "%lldm%02llds", t / 60, t % 60);
  else std::snprintf(buf, sizeof buf, "%llds", t);
  return buf;
}

}  // namespace

std::string format_bytes(uint64_t bytes) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double v = static_cast<double>(bytes);
  int u = 0;
  while (v >= 1024 && u < 4) {
    v /= 1024;
    ++u;
  }
  char buf[32];
  if (u == 0) std::snprintf(buf, sizeof buf, "%llu B", static_cast<unsigned long long>(bytes));
  else std::snprintf(buf, sizeof buf, "%.1f %s", v, units[u]);
  return buf;
}

PullProgress::PullProgress(std::FILE* out, bool terminal, std::string label)
    : out_(out), terminal_(terminal), label_(std::move(label)) {}

PullProgress::~PullProgress() { finish(); }

void PullProgress::start(int files) {
  files_ = files;
  if (started_ == 0) started_ = now_s();
  if (out_ != nullptr && !thread_.joinable()) thread_ = std::thread([this] { loop(); });
}

std::string PullProgress::line() const {
  const double elapsed = std::max(now_s() - started_, 1e-3);
  const uint64_t done = done_, total = total_;
  const double rate = static_cast<double>(done) / elapsed;
  const double eta = rate > 0 && total > done ? static_cast<double>(total - done) / rate : 0;
  return label_ + ": " + format_bytes(done) + " / " + format_bytes(total) + ", " + format_bytes(static_cast<uint64_t>(rate)) +
         "/s, ETA " + format_duration(eta) + ", " + std::to_string(files_done_.load()) + "/" + std::to_string(files_) +
         " files";
}

void PullProgress::loop() {
  std::unique_lock<std::mutex> lock(mu_);
  double last_plain = now_s();
  while (!stop_) {
    cv_.wait_for(lock, std::chrono::milliseconds(250));
    if (stop_) break;
    if (terminal_) {
      std::fprintf(out_, "\r\033[K%s", line().c_str());
      std::fflush(out_);
    } else if (now_s() - last_plain >= 10) {
      std::fprintf(out_, "%s\n", line().c_str());
      last_plain = now_s();
    }
  }
}

void PullProgress::file_done(const std::string& name, uint64_t bytes, bool fetched) {
  ++files_done_;
  note(name + " (" + format_bytes(bytes) + (fetched ? ")" : ", already cached)"));
}

void PullProgress::note(const std::string& text) {
  if (out_ == nullptr) return;
  std::lock_guard<std::mutex> lock(mu_);
  std::fprintf(out_, terminal_ ? "\r\033[K%s: %s\n" : "%s: %s\n", label_.c_str(), text.c_str());
  std::fflush(out_);
}

void PullProgress::finish() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stop_) return;
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
  if (out_ != nullptr && started_ > 0) {
    std::fprintf(out_, terminal_ ? "\r\033[K%s\n" : "%s\n", line().c_str());
    std::fflush(out_);
  }
}

}  // namespace kiln::hub
