#include "train/job_queue.h"

#include <chrono>
#include <cstdio>
#include <random>

namespace kiln {

namespace {

double unix_now() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

// Ids that do not repeat across restarts of the server (a client polling an old id gets 404,
// never another job's record).
std::string new_job_id(uint64_t n) {
  static const uint64_t salt = std::random_device{}() | (uint64_t{std::random_device{}()} << 32);
  char buf[40];
  std::snprintf(buf, sizeof buf, "job-%08llx-%llu", static_cast<unsigned long long>(salt & 0xffffffffull),
                static_cast<unsigned long long>(n));
  return buf;
}

nlohmann::json last_or_null(const std::vector<double>& v) { return v.empty() ? nlohmann::json(nullptr) : nlohmann::json(v.back()); }

}  // namespace

nlohmann::json eval_curve_json(const std::vector<EvalPoint>& points) {
  nlohmann::json out = nlohmann::json::array();
  for (const EvalPoint& p : points) out.push_back({{"step", p.step}, {"loss", p.loss}});
  return out;
}

const char* job_state_name(JobState s) {
  switch (s) {
    case JobState::kQueued: return "queued";
    case JobState::kRunning: return "running";
    case JobState::kCompleted: return "completed";
    case JobState::kFailed: return "failed";
    case JobState::kCancelled: return "cancelled";
  }
  return "unknown";
}

nlohmann::json JobInfo::to_json() const {
  auto positive_or_null = [](double t) { return t > 0 ? nlohmann::json(t) : nlohmann::json(nullptr); };
  nlohmann::json j = {{"job_id", id},
                      {"job_type", type},
                      {"state", job_state_name(state)},
                      {"queue_position", queue_position},
                      {"step", step},
                      {"total_steps", total_steps},
                      {"loss", last_or_null(losses)},
                      {"loss_curve", losses},
                      {"grad_norm", last_or_null(grad_norms)},
                      {"grad_norm_curve", grad_norms},
                      {"lr", last_or_null(lrs)},
                      {"lr_curve", lrs},
                      {"eval_loss", eval_losses.empty() ? nlohmann::json(nullptr) : nlohmann::json(eval_losses.back().loss)},
                      {"eval_loss_curve", eval_curve_json(eval_losses)},
                      {"mean_reward", last_or_null(rewards)},
                      {"reward_curve", rewards},
                      {"reverse_kl", last_or_null(reverse_kls)},
                      {"reverse_kl_curve", reverse_kls},
                      {"tokens_per_second", tokens_per_second},
                      {"created_at", positive_or_null(created_at)},
                      {"started_at", positive_or_null(started_at)},
                      {"finished_at", positive_or_null(finished_at)},
                      {"error", error.empty() ? nlohmann::json(nullptr) : nlohmann::json(error)}};
  const double end = finished_at > 0 ? finished_at : unix_now();
  j["timings"] = {{"queued_seconds", (started_at > 0 ? started_at : end) - created_at},
                  {"running_seconds", started_at > 0 ? end - started_at : 0.0}};
  // A completed job's phases; null where the phase did not run (or the job did not complete).
  j["timings"]["train_seconds"] = positive_or_null(outcome.train_seconds);
  j["timings"]["publish_seconds"] = positive_or_null(outcome.publish_seconds);
  j["timings"]["post_eval_seconds"] = positive_or_null(outcome.post_eval_seconds);
  j["timings"]["load_seconds"] = positive_or_null(outcome.load_seconds);
  j["trained_tokens"] = outcome.trained_tokens > 0 ? nlohmann::json(outcome.trained_tokens) : nlohmann::json(nullptr);
  j["adapter_name"] = outcome.adapter_name.empty() ? nlohmann::json(nullptr) : nlohmann::json(outcome.adapter_name);
  j["adapter_path"] = outcome.adapter_path.empty() ? nlohmann::json(nullptr) : nlohmann::json(outcome.adapter_path);
  j["adapter_revision"] = outcome.adapter_revision > 0 ? nlohmann::json(outcome.adapter_revision) : nlohmann::json(nullptr);
  j["post_eval"] = outcome.post_eval;
  j["checkpoints"] = nlohmann::json::array();
  for (const TrainCheckpoint& c : checkpoints) j["checkpoints"].push_back({{"step", c.step}, {"path", c.path}});
  return j;
}

JobQueue::JobQueue(int64_t max_queued, std::function<void(const JobInfo&)> on_end)
    : max_queued_(max_queued), on_end_(std::move(on_end)), worker_([this] { loop(); }) {}

JobQueue::~JobQueue() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
    if (running_) running_->cancel.store(true);
  }
  wake_.notify_all();
  worker_.join();
}

Result<JobInfo> JobQueue::submit(std::string type, JobWork work) {
  std::lock_guard<std::mutex> lock(mu_);
  if (stop_) return failed_precondition("the training queue is shutting down");
  if (static_cast<int64_t>(queue_.size()) >= max_queued_)
    return resource_exhausted("the training queue is full (" + std::to_string(queue_.size()) +
                              " jobs waiting; training.max_queued_jobs = " + std::to_string(max_queued_) + ")");
  auto job = std::make_shared<Job>();
  job->info.id = new_job_id(next_++);
  job->info.type = std::move(type);
  job->info.created_at = unix_now();
  job->work = std::move(work);
  jobs_[job->info.id] = job;
  queue_.push_back(job);
  wake_.notify_all();
  return snapshot(*job);
}

JobInfo JobQueue::snapshot(const Job& j) const {
  JobInfo info = j.info;
  info.queue_position = 0;
  if (info.state == JobState::kQueued)
    for (size_t i = 0; i < queue_.size(); ++i)
      if (queue_[i].get() == &j) info.queue_position = static_cast<int64_t>(i) + 1;
  return info;
}

Result<JobInfo> JobQueue::status(const std::string& id) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = jobs_.find(id);
  if (it == jobs_.end()) return not_found("training job '" + id + "' is not known");
  return snapshot(*it->second);
}

std::vector<JobInfo> JobQueue::list() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<JobInfo> out;
  if (running_) out.push_back(snapshot(*running_));
  for (const auto& j : queue_) out.push_back(snapshot(*j));
  for (auto it = finished_.rbegin(); it != finished_.rend(); ++it)
    if (auto j = jobs_.find(*it); j != jobs_.end()) out.push_back(snapshot(*j->second));
  return out;
}

Result<JobInfo> JobQueue::cancel(const std::string& id) {
  JobInfo ended;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = jobs_.find(id);
    if (it == jobs_.end()) return not_found("training job '" + id + "' is not known");
    Job& j = *it->second;
    if (j.info.finished())
      return failed_precondition("training job '" + id + "' already ended (" + job_state_name(j.info.state) + ")");
    if (j.info.state == JobState::kRunning) {
      j.cancel.store(true);
      return snapshot(j);
    }
    for (auto q = queue_.begin(); q != queue_.end(); ++q)
      if (q->get() == &j) {
        queue_.erase(q);
        break;
      }
    j.info.state = JobState::kCancelled;
    j.info.error = "cancelled before it started";
    j.info.finished_at = unix_now();
    j.work = nullptr;
    finished_.push_back(id);
    forget_old();
    ended = snapshot(j);
  }
  if (on_end_) on_end_(ended);
  return ended;
}

void JobQueue::forget_old() {
  while (finished_.size() > kFinishedKept) {
    jobs_.erase(finished_.front());
    finished_.pop_front();
  }
}

void JobQueue::loop() {
  for (;;) {
    std::shared_ptr<Job> job;
    {
      std::unique_lock<std::mutex> lock(mu_);
      wake_.wait(lock, [&] { return stop_ || !queue_.empty(); });
      if (stop_) {
        for (auto& q : queue_) {
          q->info.state = JobState::kCancelled;
          q->info.error = "the server stopped before the job started";
        }
        queue_.clear();
        return;
      }
      job = queue_.front();
      queue_.pop_front();
      job->info.state = JobState::kRunning;
      job->info.started_at = unix_now();
      running_ = job;
    }
    auto progress = [this, &job](const TrainProgress& p) {
      std::lock_guard<std::mutex> lock(mu_);
      job->info.step = p.step;
      job->info.total_steps = p.total_steps;
      job->info.tokens_per_second = p.tokens_per_second;
      if (static_cast<int64_t>(job->info.losses.size()) < p.step) {
        job->info.losses.push_back(p.loss);
        job->info.grad_norms.push_back(p.grad_norm);
        job->info.lrs.push_back(p.lr);
        if (p.eval_loss) job->info.eval_losses.push_back({p.step, *p.eval_loss});
        if (p.mean_reward) job->info.rewards.push_back(*p.mean_reward);
        if (p.reverse_kl) job->info.reverse_kls.push_back(*p.reverse_kl);
      }
      job->info.checkpoints = p.checkpoints;
    };
    Result<JobOutcome> r = internal_error("the job had no work");
    try {
      if (job->work) r = job->work(job->cancel, progress);
    } catch (const std::exception& e) {
      r = internal_error(std::string("the job threw: ") + e.what());
    }
    JobInfo ended;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (r.ok()) {
        job->info.state = JobState::kCompleted;
        job->info.outcome = *r;
      } else {
        job->info.state = job->cancel.load() ? JobState::kCancelled : JobState::kFailed;
        job->info.error = r.status().to_string();
      }
      job->info.finished_at = unix_now();
      job->work = nullptr;
      running_.reset();
      finished_.push_back(job->info.id);
      forget_old();
      ended = snapshot(*job);
    }
    if (on_end_) on_end_(ended);
  }
}

}  // namespace kiln
