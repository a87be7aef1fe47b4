#include "train/train_checkpoints.h"

#include <chrono>
#include <cstdio>
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
      Status cleared = remove_published(env.adapter_dir, r->output_name + ".checkpoints");
      if (!cleared.ok() && cleared.code() != ErrorCode::kNotFound)
        return cleared.with_context("clearing the old checkpoints");
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
    while (r->checkpoint_keep > 0 && static_cast<int64_t>(written->size()) > r->checkpoint_keep) {
      const std::string oldest = std::filesystem::path(written->front().path).filename().string();
      if (Status st = remove_published(dir, oldest); !st.ok()) {
        // It stays on disk and in the list; the run is worth more than the space.
        std::fprintf(stderr, "kiln: training.checkpoint_keep: %s\n", st.to_string().c_str());
        break;
      }
      written->erase(written->begin());
    }
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
