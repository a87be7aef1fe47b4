// Which kernel runs a decode-sized GEMM on 16-bit weights: the GEMV, the skinny GEMM or cuBLASLt.
// Each candidate that applies to a shape is timed once on the device that runs it (the real
// weight, L2 flushed before each run, best of a few), and the fastest is kept, so a smaller GPU
// does not inherit the H200's crossovers. The H200's measured rules (gemv_beats_cublaslt,
// skinny_beats_cublaslt) decide only where no timing may run: inside a graph recording (its eager
// first step has already timed the shape) or with KILN_CUDA_TIME_GEMMS=0. Choices persist in a
// file per device, driver and target (default_choices_file), so a restart does not time again.
#pragma once

#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>

#include "core/dtype.h"

namespace kiln::cuda {

enum class SmallGemm : uint8_t { kCublasLt, kGemv, kSkinny };
std::string_view small_gemm_name(SmallGemm k);

// A shape, and which of our kernels may take it (switches like KILN_CUDA_SKINNY=0 narrow that):
// each candidate set keeps its own choice.
struct SmallGemmKey {
  int64_t m = 0, n = 0, k = 0;
  DType w = DType::kBF16, x = DType::kF32;
  bool gemv = false, skinny = false;
  auto operator<=>(const SmallGemmKey&) const = default;
  std::string text() const;  // "m=1 n=4096 k=2560 w=bf16 x=f32 gemv skinny"
};

// What a timing found: each candidate's best time in microseconds (absent: it does not apply).
struct SmallGemmTimes {
  std::optional<double> cublaslt_us, gemv_us, skinny_us;
};

// The fastest candidate; a kernel of ours must beat cuBLASLt by 3% to be taken (a tie keeps the
// library, whose results do not depend on our kernels' tuning).
SmallGemm pick_small_gemm(const SmallGemmTimes& t);

class SmallGemmChoices {
 public:
  // `file`: where choices persist (empty: in memory only); `scope`: the device, driver and
  // target they hold for. A missing or unreadable file starts an empty table.
  SmallGemmChoices(std::string file, std::string scope);
  std::optional<SmallGemm> find(const SmallGemmKey& key) const;
  // Records a choice and rewrites the file (best effort: a file that cannot be written leaves the
  // choice in memory; written to a temporary name and renamed, so readers never see half of it).
  void put(const SmallGemmKey& key, SmallGemm choice, const SmallGemmTimes& times);
  size_t size() const;

 private:
  void save_locked() const;
  std::string file_, scope_;
  mutable std::mutex mu_;
  std::map<SmallGemmKey, SmallGemm> choices_;
};

// $KILN_CUDA_GEMM_CHOICES when set, else $XDG_CACHE_HOME/kiln/cuda-gemm-choices.json, else
// ~/.cache/kiln/cuda-gemm-choices.json.
std::string default_choices_file();

}  // namespace kiln::cuda
