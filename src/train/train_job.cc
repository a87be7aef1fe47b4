#include "train/train_job.h"

#include <chrono>
#include <cstdio>

#include "train/adapter_publish.h"
#include "train/train_checkpoints.h"

namespace kiln {

nlohmann::json train_receipt(const TrainJobRequest& req, const TrainResult& result, const nlohmann::json& base_model) {
  const double now = std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
  return {{"kind", "kiln.train_receipt"},
          {"version", 1},
          {"job_type", req.type},
          {"adapter_name", req.output_name},
          {"hyperparameters", req.hyperparameters},
          {"seed", req.spec.seed},
          {"data_sha256", req.data_sha256},
          {"sequences", req.spec.kind == TrainSpec::Kind::kSft ? req.spec.sft.size() : req.spec.grpo.size()},
          {"prompts", req.prompts},
          {"loss_curve", result.losses},
          {"grad_norm_curve", result.grad_norms},
          {"lr_curve", result.lrs},
          {"eval_loss_curve", eval_curve_json(result.eval_losses)},
          {"reward_curve", result.rewards},
          {"reverse_kl_curve", result.reverse_kls},
          {"timings",
           {{"seconds", result.seconds},
            {"tokens", result.tokens},
            {"tokens_per_second", result.seconds > 0 ? static_cast<double>(result.tokens) / result.seconds : 0.0}}},
          {"base_model", base_model},
          // The build does not know its commit; scripts that need it record it beside the receipt.
          {"kiln_commit", nullptr},
          {"finished_at", now}};
}

namespace {

// The post-training eval's record: the eval's result, the threshold and whether auto_load is
// skipped (and why). An eval that cannot run skips auto_load too: nothing vouches for the adapter.
nlohmann::json post_eval_result(const TrainJobEnv& env, const TrainJobRequest& req, const std::string& path,
                                const std::atomic<bool>& cancel) {
  nlohmann::json j;
  Result<nlohmann::json> r = env.post_eval ? env.post_eval(req.post_eval_suite, path, req.output_name, cancel)
                                           : Result<nlohmann::json>(failed_precondition("evaluation is not available"));
  if (!r.ok()) {
    j = {{"suite", req.post_eval_suite}, {"error", r.status().message()}, {"auto_load_skipped", req.auto_load},
         {"reason", "post_eval failed: " + r.status().message()}};
  } else {
    j = *r;
    j["auto_load_skipped"] = false;
    j["reason"] = nullptr;
  }
  j["min_accuracy"] = req.post_eval_min_accuracy ? nlohmann::json(*req.post_eval_min_accuracy) : nlohmann::json(nullptr);
  if (r.ok() && req.post_eval_min_accuracy && j["accuracy"].is_number() &&
      j["accuracy"].get<double>() < *req.post_eval_min_accuracy) {
    j["auto_load_skipped"] = req.auto_load;
    char buf[128];
    std::snprintf(buf, sizeof buf, "accuracy %.4g < min_accuracy %.4g", j["accuracy"].get<double>(),
                  *req.post_eval_min_accuracy);
    j["reason"] = std::string(buf) + (req.auto_load ? ": published, not loaded" : "");
  }
  return j;
}

}  // namespace

JobWork make_train_job(const TrainJobEnv& env, std::shared_ptr<TrainJobRequest> req) {
  return [env, req](const std::atomic<bool>& cancel,
                    const std::function<void(const TrainProgress&)>& progress) -> Result<JobOutcome> {
    const auto report = with_checkpoints(env, *req, progress);  // config.checkpoint_interval
    auto mark = std::chrono::steady_clock::now();
    auto lap = [&mark] {  // seconds since the last lap
      const auto now = std::chrono::steady_clock::now();
      const double s = std::chrono::duration<double>(now - mark).count();
      mark = now;
      return s;
    };
    KILN_ASSIGN_OR_RETURN(TrainResult result, run_training(*env.model, req->spec, report, cancel, env.run_on_device));
    if (cancel.load()) return failed_precondition("cancelled");
    JobOutcome out;
    out.train_seconds = lap();
    out.trained_tokens = result.tokens;
    const nlohmann::json receipt = train_receipt(*req, result, env.base_model);
    StorageFacet& storage = env.model->backend().storage();
    KILN_ASSIGN_OR_RETURN(HostLoraAdapter trained,
                          run_on_device(env.run_on_device, [&] { return result.adapter.download(storage); }));
    // Hours of training are not thrown away on a full disk: the adapter is kept for a retry.
    KILN_ASSIGN_OR_RETURN(std::string path, publish_adapter(trained, receipt, env.model->config(), env.adapter_dir,
                                                            req->output_name, OnPublishFailure::kKeep));
    out.adapter_name = req->output_name;
    out.adapter_path = path;
    out.publish_seconds = lap();
    bool load = req->auto_load;
    if (!req->post_eval_suite.empty()) {
      // After publication, before auto_load: a worse adapter stays on disk but is not served.
      out.post_eval = post_eval_result(env, *req, path, cancel);
      if (out.post_eval.value("auto_load_skipped", false)) load = false;
      nlohmann::json with_eval = receipt;
      with_eval["post_eval"] = out.post_eval;
      KILN_RETURN_IF_ERROR(write_file_atomically(path + "/" + kTrainReceiptFile, with_eval.dump(2) + "\n"));
      out.post_eval_seconds = lap();
    }
    if (load && env.registry) {
      // Swapping the registry's entry is the drained boundary: requests already submitted hold
      // the adapters they resolved; the next one resolves the new revision.
      KILN_ASSIGN_OR_RETURN(LoadedAdapter loaded, env.registry->load(req->output_name, path));
      KILN_RETURN_IF_ERROR(env.registry->set_default(req->output_name));
      out.adapter_revision = loaded.revision;
      out.load_seconds = lap();
    }
    return out;
  };
}

}  // namespace kiln
