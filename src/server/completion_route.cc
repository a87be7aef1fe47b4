// POST /v1/completions and /v1/completions/batch: raw prompts (text or token ids) -> n choices
// each -> OpenAI text_completion (or its chunk events; streaming takes one prompt).
#include <algorithm>

#include "server/route_support.h"
#include "server/routes.h"

namespace kiln {

void handle_completions(ServerContext& ctx, const httplib::Request& req, httplib::Response& res, bool batch) {
  Json body;
  if (auto e = parse_body(req, body)) return send_error(res, *e);
  CompletionRequest cr;
  if (auto e = parse_completion_request(body, batch, cr)) return send_error(res, *e);
  if (auto e = check_target(ctx, cr.gen)) return send_error(res, *e);
  if (cr.gen.stream && cr.prompts.size() != 1)
    return send_error(res, ApiError::invalid("prompt", "streaming takes one prompt; use /v1/completions/batch for many"));
  if (batch && cr.gen.stream)
    return send_error(res, ApiError::invalid("stream", "/v1/completions/batch does not stream"));
  const char* field = batch ? "prompts" : "prompt";
  // Every choice of every prompt is one engine request: more than the queue holds could never be
  // admitted together.
  const int64_t choices = static_cast<int64_t>(cr.prompts.size()) * cr.gen.n;
  if (choices > ctx.config.server.max_queued_requests)
    return send_error(res, ApiError::invalid(field, std::to_string(cr.prompts.size()) + " prompts x n " +
                                                        std::to_string(cr.gen.n) + " = " + std::to_string(choices) +
                                                        " choices; server.max_queued_requests allows " +
                                                        std::to_string(ctx.config.server.max_queued_requests) + " at once"));

  // Tokenise and check every prompt before submitting any.
  struct Prepared {
    std::vector<int32_t> ids;
    std::string text;  // for echo
    int64_t max_tokens = 0;
  };
  std::vector<Prepared> prepared;
  for (size_t i = 0; i < cr.prompts.size(); ++i) {
    const PromptInput& p = cr.prompts[i];
    const std::string name = cr.prompts.size() > 1 || batch ? std::string(field) + "[" + std::to_string(i) + "]" : field;
    Prepared pr;
    pr.ids = p.is_ids ? p.ids : ctx.tokenizer->encode(p.text);
    if (pr.ids.empty()) return send_error(res, ApiError::invalid(name, name + " has no tokens"));
    if (auto e = check_prompt(ctx, pr.ids, cr.gen, name, pr.max_tokens)) return send_error(res, *e);
    if (cr.echo) {
      if (p.is_ids) {
        auto text = ctx.tokenizer->decode(pr.ids);
        pr.text = text.ok() ? *text : "";
      } else {
        pr.text = p.text;
      }
    }
    prepared.push_back(std::move(pr));
  }

  GenerationInput constrained;  // the compiled grammar every prompt's choices share
  if (auto e = prepare_constraints(ctx, cr.gen, constrained)) return send_error(res, *e);

  std::vector<std::shared_ptr<Generation>> gens;
  int64_t prompt_tokens = 0;
  for (size_t i = 0; i < prepared.size(); ++i) {
    GenerationInput in;
    in.prompt = prepared[i].ids;
    in.gen = &cr.gen;
    in.max_tokens = prepared[i].max_tokens;
    in.first_index = static_cast<int>(i) * cr.gen.n;
    in.output.stop = cr.gen.stop;
    in.output.parse_reasoning = false;
    in.grammar = constrained.grammar;
    // Scores of the prompt: asked for directly, or echoed with logprobs (OpenAI's scoring idiom).
    if (cr.prompt_logprobs) in.prompt_logprobs = *cr.prompt_logprobs;
    if (cr.echo && cr.gen.logprobs) in.prompt_logprobs = std::max(in.prompt_logprobs, cr.gen.sampling.top_logprobs);
    std::unique_ptr<Generation> g;
    if (auto e = Generation::start(ctx, in, g)) return send_error(res, *e);  // started ones cancel as they go
    prompt_tokens += g->prompt_tokens();
    gens.push_back(std::move(g));
  }
  ctx.metrics.tokens(prompt_tokens, 0);

  const std::string id = new_request_id(batch ? "batch-" : "cmpl-");
  const int64_t created = unix_seconds();
  const std::string model = ctx.model_id;
  const bool want_logprobs = cr.gen.logprobs;
  // The adapter stack the (first) prompt's choices resolved at submit; with several prompts each
  // choice names its own too, since each prompt's choices were submitted on their own.
  const Json adapters = adapters_json(gens[0]->adapters());

  if (cr.gen.stream) {
    ServerContext* c = &ctx;
    auto chunk = [id, created, model, adapters](Json choice) {
      return Json{{"id", id}, {"object", "text_completion"}, {"created", created}, {"model", model},
                  {"adapters", adapters}, {"choices", Json::array({std::move(choice)})}};
    };
    auto make = [chunk, want_logprobs, c](const ChoiceDelta& d, std::vector<Json>& out) {
      const bool has_lp = want_logprobs && !d.tokens.empty();
      if (!d.delta.content.empty() || has_lp || d.finished) {
        if (d.finished && !d.choice->error.empty()) out.push_back(ApiError::from_status(internal_error(d.choice->error)).to_json());
        out.push_back(chunk({{"index", d.choice->index}, {"text", d.delta.content},
                             {"logprobs", has_lp ? completion_logprobs(*c, d.tokens, 0) : Json(nullptr)},
                             {"finish_reason", d.finished ? Json(d.choice->finish_reason) : Json(nullptr)}}));
      }
    };
    const bool usage = cr.gen.include_usage;
    auto final_chunks = [id, created, model, usage, adapters](const Generation& g, std::vector<Json>& out) {
      if (!usage) return;
      out.push_back({{"id", id}, {"object", "text_completion"}, {"created", created}, {"model", model},
                     {"adapters", adapters}, {"choices", Json::array()},
                     {"usage", usage_json(g.prompt_tokens(), g.completion_tokens())}});
    };
    stream_sse(ctx, res, gens[0], make, final_chunks, {});
    return;
  }

  ServerContext* c = &ctx;
  const bool echo = cr.echo;
  const std::optional<int> prompt_lp = cr.prompt_logprobs;
  respond_when_done(ctx, res, gens, [gens, prepared, c, id, created, model, want_logprobs, echo, prompt_lp, batch,
                                     prompt_tokens, adapters]() -> Json {
    Json choices = Json::array();
    int64_t completion_tokens = 0;
    for (size_t i = 0; i < gens.size(); ++i) {
      for (const auto& ch : gens[i]->choices()) {
        if (!ch->error.empty()) return ApiError::from_status(internal_error(ch->error)).to_json();
        const std::string& echoed = prepared[i].text;
        Json logprobs = nullptr;
        if (want_logprobs)
          logprobs = echo ? completion_logprobs(*c, ch->tokens, 0, &prepared[i].ids, &ch->prompt_scores)
                          : completion_logprobs(*c, ch->tokens, 0);
        Json choice = {{"index", ch->index}, {"text", echoed + ch->output.content()}, {"logprobs", logprobs},
                       {"finish_reason", ch->finish_reason}};
        if (prompt_lp) choice["prompt_logprobs"] = prompt_logprobs_json(*c, prepared[i].ids, ch->prompt_scores);
        if (batch) choice["prompt_index"] = i;
        if (gens.size() > 1) choice["adapters"] = adapters_json(gens[i]->adapters());
        choices.push_back(std::move(choice));
      }
      completion_tokens += gens[i]->completion_tokens();
    }
    return {{"id", id}, {"object", batch ? "text_completion.batch" : "text_completion"}, {"created", created},
            {"model", model}, {"adapters", adapters}, {"choices", choices},
            {"usage", usage_json(prompt_tokens, completion_tokens)}};
  });
}

}  // namespace kiln
