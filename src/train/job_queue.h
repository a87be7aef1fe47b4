// JobQueue: the server's training jobs (docs/training-api.md, "Jobs" and "Publication"). Jobs wait
// in a bounded FIFO (training.max_queued_jobs) and run one at a time on the queue's worker thread;
// each keeps its state, queue position, per-step curves (loss, gradient norm, learning rate;
// eval loss), progress, timings, error and the adapter it produced. Cancelling a queued job
// removes it; a running one sees its cancel flag (run_training polls it between steps). What a
// job does is a JobWork function, so the queue knows nothing of models or HTTP.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/status.h"
#include "train/train_run.h"

namespace kiln {

enum class JobState : uint8_t { kQueued, kRunning, kCompleted, kFailed, kCancelled };
const char* job_state_name(JobState s);  // "queued", "running", "completed", "failed", "cancelled"

// What a finished job produced.
struct JobOutcome {
  std::string adapter_name;
  std::string adapter_path;
  uint64_t adapter_revision = 0;  // > 0 when it was loaded (auto_load)
  nlohmann::json post_eval = nullptr;  // null, or the post-training eval's result (docs/evals.md)
  // Where the running time went, in seconds (0: the phase did not run): the optimizer steps, the
  // publication (write, validate, rename), the post-training eval, the auto_load swap.
  double train_seconds = 0, publish_seconds = 0, post_eval_seconds = 0, load_seconds = 0;
  int64_t trained_tokens = 0;  // tokens of the sequences trained on, every epoch counted
};

// One job as a client sees it at one moment.
struct JobInfo {
  std::string id;
  std::string type;                 // "sft" | "grpo"
  JobState state = JobState::kQueued;
  int64_t queue_position = 0;       // 1 = next to run; 0 when not queued
  int64_t step = 0, total_steps = 0;
  std::vector<double> losses;       // one per finished optimizer step
  std::vector<double> grad_norms;   // one per finished step: the global gradient norm before clipping
  std::vector<double> lrs;          // one per finished step: its learning rate
  std::vector<EvalPoint> eval_losses;  // one per eval point (config.eval_fraction)
  // Online jobs (prompts): one per step, the mean reward of its rollout (with a reward) and the
  // mean per-token reverse KL of its rollout to the teacher (OPD).
  std::vector<double> rewards, reverse_kls;
  std::vector<TrainCheckpoint> checkpoints;  // config.checkpoint_interval: the ones written so far
  double tokens_per_second = 0;
  double created_at = 0, started_at = 0, finished_at = 0;  // unix seconds; 0: not yet
  std::string error;                // failed / cancelled: why
  JobOutcome outcome;

  bool finished() const { return state >= JobState::kCompleted; }
  nlohmann::json to_json() const;
};

// [{step, loss}, ...]: the eval loss curve as the job status and the train receipt write it.
nlohmann::json eval_curve_json(const std::vector<EvalPoint>& points);

// A job's work: run until done, reporting progress and polling `cancel` between steps. An error
// after `cancel` was set ends the job as cancelled, any other error as failed.
using JobWork = std::function<Result<JobOutcome>(const std::atomic<bool>& cancel,
                                                 const std::function<void(const TrainProgress&)>& progress)>;

class JobQueue {
 public:
  // `on_end` is called on the worker thread once a job has ended (completed, failed or
  // cancelled while running) and for a queued job cancelled, on the cancelling thread.
  explicit JobQueue(int64_t max_queued, std::function<void(const JobInfo&)> on_end = {});
  ~JobQueue();  // cancels the running job, drops the queued ones, joins the worker
  JobQueue(const JobQueue&) = delete;
  JobQueue& operator=(const JobQueue&) = delete;

  // Queues a job; kResourceExhausted when max_queued jobs already wait.
  Result<JobInfo> submit(std::string type, JobWork work);
  Result<JobInfo> status(const std::string& id) const;  // kNotFound naming the id
  // The running job, then the queued ones in order, then finished ones, newest first.
  std::vector<JobInfo> list() const;
  // Queued: removed, cancelled. Running: its cancel flag is set (it ends at its next step
  // boundary). Finished: kFailedPrecondition. Unknown: kNotFound.
  Result<JobInfo> cancel(const std::string& id);
  int64_t max_queued() const { return max_queued_; }

  static constexpr size_t kFinishedKept = 256;  // the oldest finished records are forgotten beyond it

 private:
  struct Job {
    JobInfo info;
    JobWork work;
    std::atomic<bool> cancel{false};
  };
  void loop();
  JobInfo snapshot(const Job& j) const;  // under mu_
  void forget_old();                     // under mu_

  const int64_t max_queued_;
  std::function<void(const JobInfo&)> on_end_;
  mutable std::mutex mu_;
  std::condition_variable wake_;
  std::map<std::string, std::shared_ptr<Job>> jobs_;
  std::deque<std::shared_ptr<Job>> queue_;
  std::shared_ptr<Job> running_;
  std::deque<std::string> finished_;  // ids, oldest first
  bool stop_ = false;
  uint64_t next_ = 1;
  std::thread worker_;
};

}  // namespace kiln
