// POST /v1/chat/completions: messages -> chat template -> tokens -> n choices -> OpenAI
// chat.completion (or chat.completion.chunk events).
#include "server/reasoning_parser.h"
#include "server/route_support.h"
#include "server/routes.h"
#include "server/structured_output.h"

namespace kiln {

namespace {

Json message_json(const ChoiceState& c) {
  Json m = {{"role", "assistant"}};
  const auto& calls = c.output.tool_calls();
  m["content"] = c.output.content().empty() && !calls.empty() ? Json(nullptr) : Json(c.output.content());
  if (!c.output.reasoning().empty()) m["reasoning_content"] = c.output.reasoning();
  if (!calls.empty()) {
    Json tc = Json::array();
    for (const auto& call : calls) tc.push_back(Json(call.to_json()));
    m["tool_calls"] = tc;
  }
  return m;
}

}  // namespace

void handle_chat(ServerContext& ctx, const httplib::Request& req, httplib::Response& res) {
  Json body;
  if (auto e = parse_body(req, body)) return send_error(res, *e);
  ChatRequest cr;
  if (auto e = parse_chat_request(body, cr)) return send_error(res, *e);
  if (auto e = check_target(ctx, cr.gen)) return send_error(res, *e);
  if (!ctx.chat_template)
    return send_error(res, ApiError::invalid("messages", "the model has no chat template; use /v1/completions"));

  ChatTemplateRequest t;
  t.messages = cr.messages;
  if (!cr.tool_choice_none) t.tools = cr.tools;
  t.generation_prompt = GenerationPrompt::kAdd;
  t.variables = cr.template_variables;
  auto rendered = ctx.chat_template->render(t);
  if (!rendered.ok())
    return send_error(res, ApiError::invalid("messages", "the chat template refused the messages: " + rendered.status().message()));
  std::vector<int32_t> prompt = ctx.tokenizer->encode(*rendered);
  int64_t max_tokens = 0;
  if (auto e = check_prompt(ctx, prompt, cr.gen, "messages", max_tokens)) return send_error(res, *e);

  GenerationInput in;
  in.prompt = std::move(prompt);
  in.gen = &cr.gen;
  in.max_tokens = max_tokens;
  in.output.stop = cr.gen.stop;
  in.output.starts_in_reasoning = prompt_opens_reasoning(*rendered);
  in.output.parse_reasoning = true;
  in.output.parse_tool_calls = !t.tools.is_null();
  in.output.tools = t.tools;
  if (cr.tool_choice_required || !cr.tool_choice_function.empty()) {
    if (cr.gen.grammar)
      return send_error(res, ApiError::invalid("tool_choice", "a forced tool call cannot be combined with " + cr.gen.grammar_field));
    const auto syntax = tool_call_syntax_of(ctx.chat_template->source());
    if (!syntax)
      return send_error(res, ApiError::invalid("tool_choice", "the served chat template writes no tool-call syntax Kiln knows "
                                                              "(Qwen3's <tool_call> JSON or Qwen3.5's <function=...> XML)"));
    std::vector<grammar::ToolCallFunction> fns;
    for (const Json& tool : cr.tools) {
      const Json& fn = tool["function"];
      if (!cr.tool_choice_required && fn["name"] != cr.tool_choice_function) continue;
      fns.push_back({fn["name"].get<std::string>(), fn.contains("parameters") ? fn["parameters"] : Json()});
    }
    cr.gen.grammar = grammar::GrammarSpec{grammar::GrammarKind::kToolCalls,
                                          grammar::tool_call_spec_text(*syntax, fns, cr.parallel_tool_calls), {}};
    cr.gen.grammar_field = "tool_choice";
  }
  if (auto e = prepare_constraints(ctx, cr.gen, in)) return send_error(res, *e);
  if (in.grammar) {
    const ConstraintStart start = constraint_start(in.output.starts_in_reasoning,
                                                   cr.template_variables.value("enable_thinking", false),
                                                   ctx.think_open_id, ctx.think_close_id);
    in.constraint_after = start.after;
    in.optional_reasoning_open = start.optional_open;
  }
  if (cr.thinking_budget) {
    if (ctx.think_close_id < 0)
      return send_error(res, ApiError::invalid("thinking_budget_tokens", "the tokenizer has no </think> token"));
    in.thinking = {*cr.thinking_budget, ctx.think_open_id, ctx.think_close_id, in.output.starts_in_reasoning};
  }
  std::unique_ptr<Generation> gen;
  if (auto e = Generation::start(ctx, in, gen)) return send_error(res, *e);
  ctx.metrics.tokens(static_cast<int64_t>(in.prompt.size()), 0);

  const std::string id = new_request_id("chatcmpl-");
  const int64_t created = unix_seconds();
  const std::string model = ctx.model_id;
  const bool want_logprobs = cr.gen.logprobs;
  // Every chunk names the adapter revisions its tokens come from (one stack for the whole request).
  const Json adapters = adapters_json(gen->adapters());
  auto chunk = [id, created, model, adapters](Json choices) {
    return Json{{"id", id}, {"object", "chat.completion.chunk"}, {"created", created}, {"model", model},
                {"adapters", adapters}, {"choices", std::move(choices)}};
  };

  if (cr.gen.stream) {
    std::vector<Json> first;
    for (const auto& c : gen->choices())  // one choice per chunk, as OpenAI sends them
      first.push_back(chunk(Json::array({{{"index", c->index}, {"delta", {{"role", "assistant"}, {"content", ""}}},
                                          {"logprobs", nullptr}, {"finish_reason", nullptr}}})));
    ServerContext* c = &ctx;
    auto make = [chunk, want_logprobs, c](const ChoiceDelta& d, std::vector<Json>& out) {
      Json delta = Json::object();
      if (!d.delta.reasoning.empty()) delta["reasoning_content"] = d.delta.reasoning;
      if (!d.delta.content.empty()) delta["content"] = d.delta.content;
      if (!d.delta.tool_calls.empty()) {
        Json tc = Json::array();
        for (const auto& call : d.delta.tool_calls) tc.push_back(Json(call.to_delta_json()));
        delta["tool_calls"] = tc;
      }
      const bool has_lp = want_logprobs && !d.tokens.empty();
      if (!delta.empty() || has_lp) {
        out.push_back(chunk(Json::array({{{"index", d.choice->index}, {"delta", delta},
                                          {"logprobs", has_lp ? chat_logprobs(*c, d.tokens) : Json(nullptr)},
                                          {"finish_reason", nullptr}}})));
      }
      if (d.finished) {
        if (!d.choice->error.empty()) {
          ApiError e = ApiError::from_status(internal_error(d.choice->error));
          out.push_back(e.to_json());
        }
        out.push_back(chunk(Json::array({{{"index", d.choice->index}, {"delta", Json::object()}, {"logprobs", nullptr},
                                          {"finish_reason", d.choice->finish_reason}}})));
      }
    };
    const bool usage = cr.gen.include_usage;
    auto final_chunks = [chunk, usage](const Generation& g, std::vector<Json>& out) {
      if (!usage) return;
      Json u = chunk(Json::array());
      u["usage"] = usage_json(g.prompt_tokens(), g.completion_tokens());
      out.push_back(u);
    };
    stream_sse(ctx, res, std::shared_ptr<Generation>(std::move(gen)), make, final_chunks, std::move(first));
    return;
  }

  std::shared_ptr<Generation> g(std::move(gen));
  ServerContext* c = &ctx;
  respond_when_done(ctx, res, {g}, [g, c, id, created, model, want_logprobs, adapters]() -> Json {
    Json choices = Json::array();
    for (const auto& ch : g->choices()) {
      if (!ch->error.empty()) return ApiError::from_status(internal_error(ch->error)).to_json();
      choices.push_back({{"index", ch->index}, {"message", message_json(*ch)},
                         {"logprobs", want_logprobs ? chat_logprobs(*c, ch->tokens) : Json(nullptr)},
                         {"finish_reason", ch->finish_reason}});
    }
    return {{"id", id}, {"object", "chat.completion"}, {"created", created}, {"model", model}, {"adapters", adapters},
            {"choices", choices}, {"usage", usage_json(g->prompt_tokens(), g->completion_tokens())}};
  });
}

}  // namespace kiln
