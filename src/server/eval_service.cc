#include "server/eval_service.h"

#include <chrono>
#include <thread>

#include "server/generation.h"
#include "server/reasoning_parser.h"
#include "server/route_support.h"

namespace kiln {

namespace {

Status status_of(const ApiError& e) {
  ErrorCode code = e.http_status == 404 ? ErrorCode::kNotFound
                   : e.http_status == 503 ? ErrorCode::kResourceExhausted
                   : e.http_status < 500 ? ErrorCode::kInvalidArgument
                                         : ErrorCode::kInternal;
  return Status(code, e.message);
}

}  // namespace

GenerateFn make_eval_generate(ServerContext& ctx) {
  ServerContext* c = &ctx;
  return [c](const GenerateRequest& r) -> Result<GenerateResult> {
    ServerContext& ctx = *c;
    if (!ctx.chat_template) return failed_precondition("the model has no chat template; evals need one");
    ChatTemplateRequest t;
    t.messages = Json(*r.messages);
    t.variables = Json(r.chat_template_kwargs);
    t.generation_prompt = GenerationPrompt::kAdd;
    auto rendered = ctx.chat_template->render(t);
    if (!rendered.ok()) return invalid_argument("the chat template refused the messages: " + rendered.status().message());
    std::vector<int32_t> prompt = ctx.tokenizer->encode(*rendered);
    GenerationRequest g;
    g.sampling.temperature = static_cast<float>(r.temperature);
    g.sampling.logprobs = false;
    g.seed = r.seed;
    g.max_tokens = r.max_tokens;
    // An eval names its target exactly: no adapter means the base model, never the default one.
    if (r.adapter.empty()) g.base_model = true;
    else g.adapter = r.adapter;
    if (auto e = check_target(ctx, g)) return status_of(*e);
    uint64_t revision = 0;
    if (!r.adapter.empty()) {
      auto loaded = ctx.adapters->resolve(r.adapter);
      if (!loaded.ok()) return loaded.status();
      revision = loaded->revision;
    }
    int64_t max_tokens = 0;
    if (auto e = check_prompt(ctx, prompt, g, "messages", max_tokens)) return status_of(*e);
    GenerationInput in;
    in.prompt = std::move(prompt);
    in.gen = &g;
    in.max_tokens = max_tokens;
    in.output.starts_in_reasoning = prompt_opens_reasoning(*rendered);
    in.output.parse_reasoning = true;
    std::unique_ptr<Generation> gen;
    if (auto e = Generation::start(ctx, in, gen)) return status_of(*e);
    while (gen->pump(std::chrono::milliseconds(100), [](const ChoiceDelta&) { return true; })) {
      if (ctx.stopping.load()) return failed_precondition("the server is stopping");
    }
    const ChoiceState& ch = *gen->choices().front();
    if (!ch.error.empty()) return internal_error(ch.error);
    return GenerateResult{ch.output.content(), ch.finish_reason, revision};
  };
}

Result<nlohmann::json> run_post_eval(ServerContext& ctx, const std::string& suite, const std::string& adapter_path,
                                     const std::string& output_name, const std::atomic<bool>& cancel) {
  if (!ctx.evals || !ctx.adapters) return failed_precondition("evaluation is not available on this server");
  // A temporary name: the adapter of `output_name` being served is not replaced before the
  // eval has decided whether the new one may be.
  const std::string tmp = ("post-eval." + output_name).substr(0, 64);
  KILN_ASSIGN_OR_RETURN(LoadedAdapter loaded, ctx.adapters->load(tmp, adapter_path));
  (void)loaded;
  EvalRunSpec spec;
  spec.suite = suite;
  spec.adapter_a = tmp;
  auto id = ctx.evals->submit(spec);
  if (!id.ok()) {
    (void)ctx.adapters->unload(tmp);
    return id.status();
  }
  nlohmann::json job;
  for (;;) {
    auto j = ctx.evals->get(*id, false);
    if (!j.ok()) {
      (void)ctx.adapters->unload(tmp);
      return j.status();
    }
    job = *j;
    const std::string st = job.value("state", "");
    if (st == "completed" || st == "failed" || st == "cancelled") break;
    if (cancel.load()) (void)ctx.evals->cancel(*id);
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  (void)ctx.adapters->unload(tmp);
  if (job["state"] != "completed")
    return failed_precondition("post_eval job " + *id + " " + job["state"].get<std::string>() + ": " +
                               job.value("error", ""));
  return nlohmann::json{{"suite", suite},           {"eval_job_id", *id},      {"accuracy", job["accuracy"]},
                        {"passed", job["passed"]},  {"total", job["total"]},   {"wilson", job["wilson"]},
                        {"suite_sha256", job["suite_sha256"]}};
}

}  // namespace kiln
