// Eval jobs (docs/evals.md "Eval jobs"): a `run` scores every example of a suite on one target
// (a named adapter or the base model), a `compare` on two; each example is generated through a
// GenerateFn (the server's: the same Generation path as /v1/chat/completions), one at a time, so
// no example of a job shares a batch with another and a seeded rerun reproduces its outcomes.
// Execution reuses the training JobQueue (bounded, one job running, cancel between examples);
// the records (outcomes, accuracies) live here, in memory.
#pragma once

#include <atomic>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/status.h"
#include "eval/suite.h"
#include "train/job_queue.h"

namespace kiln {

struct GenerateRequest {
  const nlohmann::json* messages = nullptr;
  nlohmann::json chat_template_kwargs;
  std::string adapter;  // "" : the base model
  uint64_t seed = 0;
  double temperature = 0;
  int64_t max_tokens = 64;
};

struct GenerateResult {
  std::string text;           // the content (reasoning removed)
  std::string finish_reason;
  uint64_t adapter_revision = 0;  // the revision the request ran on (0: base model)
};

using GenerateFn = std::function<Result<GenerateResult>(const GenerateRequest&)>;

struct EvalRunSpec {
  std::string kind = "run";  // "run" | "compare"
  std::string suite;
  std::string adapter_a;     // "" : base model (a run's only target)
  std::string adapter_b;     // compare only
  uint64_t seed = 0;
  double temperature = 0;
  std::optional<int64_t> max_tokens;  // unset: the suite's
};

struct EvalOutcome {
  std::string output, finish_reason, scorer, detail;
  bool passed = false;
};

// Scores one target over the whole suite; `on_outcome` after each example (with the adapter
// revision it ran on), so a status call sees outcomes arrive.
Result<std::vector<EvalOutcome>> run_suite(const EvalSuite& suite, const GenerateFn& gen, const std::string& adapter,
                                           uint64_t seed, double temperature, int64_t max_tokens,
                                           const std::atomic<bool>& cancel,
                                           const std::function<void(const EvalOutcome&, uint64_t revision)>& on_outcome);

class EvalJobs {
 public:
  EvalJobs(SuiteStore& store, GenerateFn gen, int64_t max_queued);
  ~EvalJobs();

  // Loads the suite now (kNotFound naming it) and queues the job; returns its id.
  Result<std::string> submit(const EvalRunSpec& spec);
  // The job as docs/evals.md shows it; without outcomes/pairs when !full. kNotFound naming the id.
  Result<nlohmann::json> get(const std::string& id, bool full = true) const;
  std::vector<nlohmann::json> list() const;
  Result<JobInfo> cancel(const std::string& id);

 private:
  struct Record;
  nlohmann::json to_json(const Record& r, const JobInfo& info, bool full) const;

  SuiteStore& store_;
  GenerateFn gen_;
  mutable std::mutex mu_;
  std::map<std::string, std::shared_ptr<Record>> records_;
  std::unique_ptr<JobQueue> queue_;  // last: destroyed (joined) first
};

}  // namespace kiln
