#include "train/train_checkpoints.h"

#include <chrono>
#include <filesystem>
#include <memory>
#include <vector>

#include "train/adapter_publish.h"

namespace kiln {

std::string checkpoint_dir(const std::string& adapter_dir, const std::string& output_name) {
  return (std::filesystem::path(adapter_dir) / (output_name + ".checkpoints")).string();
}

std::function<void(const TrainProgress&)> with_checkpoints(const TrainJobEnv& env, TrainJobRequest& req,
                                                           std::function<void(const TrainProgress&)> progress) {
  if (req.spec.checkpoint_interval <= 0) return progress;
  const std::string dir = checkpoint_dir(env.adapter_dir, req.output_name);
  // The callback and the progress function both run on the job's thread, after the step.
  auto written = std::make_shared<std::vector<TrainCheckpoint>>();
  bool first = true;
  const TrainJobRequest* r = &req;  // the job holds req for its whole run
  req.spec.checkpoint = [env, r, dir, written, first](int64_t step, const HostLoraAdapter& adapter) mutable -> Status {
    if (first) {  // the folder holds this job's checkpoints only
      std::error_code ec;
      std::filesystem::remove_all(dir, ec);
      if (ec) return io_error("cannot clear the old checkpoints in " + dir + ": " + ec.message());
      first = false;
    }
    const double now = std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
    const nlohmann::json receipt = {{"kind", "kiln.train_checkpoint"},
                                    {"version", 1},
                                    {"job_type", r->type},
                                    {"adapter_name", r->output_name},
                                    {"step", step},
                                    {"hyperparameters", r->hyperparameters},
                                    {"seed", r->spec.seed},
                                    {"data_sha256", r->data_sha256},
                                    {"base_model", env.base_model},
                                    {"written_at", now}};
    auto path = publish_adapter(adapter, receipt, env.model->config(), dir, "step-" + std::to_string(step));
    if (!path.ok()) return path.status().with_context("checkpoint at step " + std::to_string(step));
    written->push_back({step, *path});
    return {};
  };
  return [progress = std::move(progress), written](const TrainProgress& p) {
    if (!progress) return;
    TrainProgress q = p;
    q.checkpoints = *written;
    progress(q);
  };
}

}  // namespace kiln
