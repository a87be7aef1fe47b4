#include "train/train_job.h"

#include <chrono>

#include "train/adapter_publish.h"

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
          {"loss_curve", result.losses},
          {"timings",
           {{"seconds", result.seconds},
            {"tokens", result.tokens},
            {"tokens_per_second", result.seconds > 0 ? static_cast<double>(result.tokens) / result.seconds : 0.0}}},
          {"base_model", base_model},
          // The build does not know its commit; scripts that need it record it beside the receipt.
          {"kiln_commit", nullptr},
          {"finished_at", now}};
}

JobWork make_train_job(const TrainJobEnv& env, std::shared_ptr<TrainJobRequest> req) {
  return [env, req](const std::atomic<bool>& cancel,
                    const std::function<void(const TrainProgress&)>& progress) -> Result<JobOutcome> {
    KILN_ASSIGN_OR_RETURN(TrainResult result, run_training(*env.model, req->spec, progress, cancel, env.run_step));
    if (cancel.load()) return failed_precondition("cancelled");
    const nlohmann::json receipt = train_receipt(*req, result, env.base_model);
    KILN_ASSIGN_OR_RETURN(std::string path,
                          publish_adapter(result.adapter, receipt, env.model->config(),
                                          env.model->backend().storage(), env.adapter_dir, req->output_name));
    JobOutcome out{req->output_name, path, 0};
    if (req->auto_load && env.registry) {
      // Swapping the registry's entry is the drained boundary: requests already submitted hold
      // the adapters they resolved; the next one resolves the new revision.
      KILN_ASSIGN_OR_RETURN(LoadedAdapter loaded, env.registry->load(req->output_name, path));
      KILN_RETURN_IF_ERROR(env.registry->set_default(req->output_name));
      out.adapter_revision = loaded.revision;
    }
    return out;
  };
}

}  // namespace kiln
