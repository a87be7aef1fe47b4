// What a pull tells the user while it runs: on a terminal one line redrawn four times a second
// (bytes, rate, ETA, files); elsewhere a plain line per finished file and one every ten seconds.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <mutex>
#include <string>
#include <thread>

namespace kiln::hub {

// "1.5 GiB", "12.0 MiB", "512 B"
std::string format_bytes(uint64_t bytes);

class PullProgress {
 public:
  // `out` null: silent. `terminal`: redraw in place.
  PullProgress(std::FILE* out, bool terminal, std::string label);
  ~PullProgress();  // stops the reporter

  void start(int files);  // (again: a new file count) starts the reporter thread once
  void add(uint64_t bytes) { done_ += bytes; }
  void add_total(uint64_t bytes) { total_ += bytes; }
  void file_done(const std::string& name, uint64_t bytes, bool fetched);
  void note(const std::string& line);  // a line of its own (a retry, a corrupt blob)
  void finish();

 private:
  void loop();
  std::string line() const;
  std::FILE* out_;
  bool terminal_;
  std::string label_;
  std::atomic<uint64_t> done_{0}, total_{0};
  std::atomic<int> files_done_{0};
  std::atomic<int> files_{0};
  double started_ = 0;
  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;
  std::thread thread_;
};

}  // namespace kiln::hub
