// Which kernel serves a shape where several could, as timed on the device that runs it. A choice
// is a candidate's name under a key that names the op and its shape ("gemm m=1 n=4096 ...",
// "gdn_decode rows=8 ..."); the times behind it are kept beside it for a reader. Choices persist in
// a file per device, driver and target (the scope), so a restart does not time again and a
// smaller GPU never inherits the H200's crossovers. No device here: the timing is kernel_timing.h.
#pragma once

#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace kiln::cuda {

struct TimedCandidate {
  std::string name;
  double us = 0;  // best of a few runs
};

// The fastest candidate, except that `preferred` (the library, or the rule measured on the H200)
// keeps the choice unless another beats it by more than `margin` (a fraction: 0.03 is 3%): a tie
// keeps what does not depend on our kernels' tuning. Empty when `times` is.
std::string pick_fastest(const std::vector<TimedCandidate>& times, std::string_view preferred, double margin = 0.03);

class KernelChoices {
 public:
  // `file`: where choices persist (empty: in memory only); `scope`: the device, driver and
  // target they hold for. A missing or unreadable file starts an empty table.
  KernelChoices(std::string file, std::string scope);
  std::optional<std::string> find(const std::string& key) const;
  // Records a choice and rewrites the file (best effort: a file that cannot be written leaves the
  // choice in memory; written to a temporary name and renamed, so readers never see half of it).
  void put(const std::string& key, const std::string& kernel, const std::vector<TimedCandidate>& times = {});
  // Drops a choice (from memory only), so that the next use times the shape again.
  void forget(const std::string& key);
  size_t size() const;

 private:
  std::string file_, scope_;
  mutable std::mutex mu_;
  std::map<std::string, std::string> choices_;
};

// $KILN_CUDA_KERNEL_CHOICES when set, else $XDG_CACHE_HOME/kiln/cuda-kernel-choices.json, else
// ~/.cache/kiln/cuda-kernel-choices.json.
std::string default_choices_file();

}  // namespace kiln::cuda
