#include "server/rollout_request.h"

#include <algorithm>

#include "server/openai_request.h"
#include "server/reasoning_parser.h"
#include "server/structured_output.h"

namespace kiln {

const std::set<std::string>& rollout_config_keys() {
  static const std::set<std::string> k = {"steps",       "group_size", "temperature",     "top_p",
                                          "top_k",       "max_tokens", "enable_thinking", "reward_coeff"};
  return k;
}

const std::set<std::string>& offline_only_config_keys() {
  static const std::set<std::string> k = {"epochs", "eval_fraction", "eval_every", "packing", "exclude_suite",
                                          "max_seq_length"};
  return k;
}

void read_rollout_config(FieldReader& c, bool opd, RolloutSettings& s, int64_t& steps, float& reward_coeff) {
  steps = 1;
  if (auto v = c.integer("steps", 1, kMaxRolloutSteps)) steps = *v;
  if (auto v = c.integer("group_size", 2, kMaxGroupSize)) s.group_size = *v;
  if (auto v = c.number("temperature", 0.0, 2.0, /*lo_open=*/true)) s.temperature = static_cast<float>(*v);
  if (auto v = c.number("top_p", 0.0, 1.0, /*lo_open=*/true)) s.top_p = static_cast<float>(*v);
  if (auto v = c.integer("top_k", 0, 1000)) s.top_k = *v;
  if (auto v = c.integer("max_tokens", 1, kMaxRolloutTokens)) s.max_tokens = *v;
  if (auto v = c.boolean("enable_thinking")) s.enable_thinking = *v;
  if (const Json* v = c.get("reward_coeff")) {
    if (!opd) c.fail("reward_coeff", "config.reward_coeff applies to OPD jobs (POST /v1/train/opd)");
    else if (auto x = c.number("reward_coeff", -100.0, 100.0)) reward_coeff = static_cast<float>(*x);
    (void)v;
  }
}

namespace {

// The reward: {"scorer": <scorer>} (docs/evals.md, "Scorers") against each prompt's reference, or
// {"server": true} for training.reward_url.
std::optional<ApiError> read_reward(const ServerContext& ctx, const Json& j, RolloutSettings& s) {
  if (!j.is_object()) return ApiError::invalid("reward", "reward must be an object: {\"scorer\": ...} or {\"server\": true}");
  FieldReader r(j, "reward", {"scorer", "server"});
  const Json* scorer = r.get("scorer");
  const bool server = r.boolean("server").value_or(false);
  if (!r.ok()) return r.error();
  if ((scorer != nullptr) == server)
    return ApiError::invalid("reward", "reward needs exactly one of scorer (an eval scorer) or \"server\": true");
  if (scorer) {
    ScorerSpec spec;
    if (auto e = parse_scorer(nlohmann::json::parse(scorer->dump()), "reward.scorer", spec)) return ApiError::invalid(e->field, e->message);
    s.scorer = spec;
    return std::nullopt;
  }
  // The reward server is the operator's to name: a request only asks for it.
  if (ctx.config.training.reward_url.empty())
    return ApiError::invalid("reward.server", "this server has no reward server (training.reward_url is not set)");
  JsonEndpoint& to = s.reward_server.emplace();
  to.field = "training.reward_url";
  to.url = ctx.config.training.reward_url;
  to.timeout_seconds = ctx.config.training.reward_timeout_seconds;
  to.retries = ctx.config.training.reward_retries;
  return std::nullopt;
}

// The OPD teacher: {adapter?, remote?, system_prompt?}. A remote teacher is the server's
// training.teacher_url, which a request may ask for but never name.
std::optional<ApiError> read_teacher(const ServerContext& ctx, const Json* j, RolloutSettings& s,
                                     std::string& system_prompt) {
  if (j == nullptr) return std::nullopt;  // the base model, no system prompt
  if (!j->is_object())
    return ApiError::invalid("teacher", "teacher must be an object {adapter?, remote?, system_prompt?}");
  if (j->contains("url"))
    return ApiError::invalid("teacher.url", "a request cannot name the teacher's URL: a remote teacher is the "
                                            "server's training.teacher_url, asked for with \"remote\": true");
  FieldReader r(*j, "teacher", {"adapter", "remote", "system_prompt"});
  if (auto a = r.string("adapter")) s.teacher_adapter = *a;
  const bool remote = r.boolean("remote").value_or(false);
  if (auto p = r.string("system_prompt")) system_prompt = *p;
  if (!r.ok()) return r.error();
  if (remote) {
    const TrainingSection& t = ctx.config.training;
    if (!s.teacher_adapter.empty())
      return ApiError::invalid("teacher.adapter", "a remote teacher takes no adapter: training.teacher_url serves "
                                                  "what it serves (training.teacher_model names it)");
    if (t.teacher_url.empty())
      return ApiError::invalid("teacher.remote", "this server has no remote teacher (training.teacher_url is not set)");
    RemoteTeacher& teacher = s.remote_teacher.emplace();
    teacher.endpoint.field = "training.teacher_url";
    teacher.endpoint.url = t.teacher_url;
    teacher.endpoint.timeout_seconds = t.teacher_timeout_seconds;
    teacher.endpoint.retries = t.teacher_retries;
    teacher.endpoint.bearer = t.teacher_api_key;
    teacher.model = t.teacher_model;
    return std::nullopt;
  }
  if (!s.teacher_adapter.empty()) {
    Result<LoadedAdapter> a = ctx.adapters ? ctx.adapters->resolve(s.teacher_adapter)
                                           : Result<LoadedAdapter>(not_found("adapter '" + s.teacher_adapter + "' is not loaded"));
    if (!a.ok()) {
      ApiError e = ApiError::invalid("teacher.adapter", a.status().message());
      e.http_status = 404;
      e.code = "adapter_not_found";
      return e;
    }
  }
  return std::nullopt;
}

// The messages rendered with the generation prompt and tokenized; `opens_reasoning` whether the
// rendering leaves the reasoning span open.
std::optional<ApiError> render(const ServerContext& ctx, const Json& messages, bool thinking, const std::string& field,
                               std::vector<int32_t>& out, bool* opens_reasoning = nullptr) {
  ChatTemplateRequest t;
  t.messages = messages;
  t.variables = Json{{"enable_thinking", thinking}};
  t.generation_prompt = GenerationPrompt::kAdd;
  auto rendered = ctx.chat_template->render(t);
  if (!rendered.ok()) return ApiError::invalid(field, "the chat template refused " + field + ": " + rendered.status().message());
  out = ctx.tokenizer->encode(*rendered);
  if (opens_reasoning) *opens_reasoning = prompt_opens_reasoning(*rendered);
  return std::nullopt;
}

// `response_format` (as a chat completion takes it): compiled for every rollout of the job.
std::optional<ApiError> read_rollout_format(const ServerContext& ctx, const Json& rf, RolloutSettings& s) {
  FieldReader r(Json{{"response_format", rf}}, "", {"response_format"});
  GenerationRequest g;
  read_response_format(rf, r, g);
  if (!r.ok()) return r.error();
  if (!g.grammar) return std::nullopt;  // "text"
  if (!ctx.structured)
    return ApiError::invalid("response_format", "structured outputs are not available on this server");
  auto compiled = ctx.structured->compile(*g.grammar);
  if (!compiled.ok()) return ApiError::invalid(g.grammar_field, g.grammar_field + ": " + compiled.status().message());
  s.grammar = std::move(*compiled);
  s.response_format = nlohmann::json::parse(rf.dump());
  return std::nullopt;
}

}  // namespace

std::optional<ApiError> read_rollout_data(const ServerContext& ctx, FieldReader& body, bool opd, RolloutSettings& s) {
  const Json* prompts = body.get("prompts");
  if (!body.ok()) return body.error();
  if (!prompts) return ApiError::invalid("prompts", "prompts is required");
  if (!prompts->is_array() || prompts->empty()) return ApiError::invalid("prompts", "prompts must be a non-empty list");
  if (static_cast<int64_t>(prompts->size()) > kMaxRolloutPrompts)
    return ApiError::invalid("prompts", "prompts holds " + std::to_string(prompts->size()) + " prompts; at most " +
                                            std::to_string(kMaxRolloutPrompts) + " are taken");
  if (static_cast<int64_t>(prompts->size()) * s.group_size > kMaxRolloutCompletions)
    return ApiError::invalid("config.group_size", std::to_string(prompts->size()) + " prompts x group_size " +
                                                      std::to_string(s.group_size) + " pass " +
                                                      std::to_string(kMaxRolloutCompletions) + " completions a step");
  if (!ctx.tokenizer || !ctx.chat_template)
    return ApiError::invalid("prompts", "the served model has no chat template, so prompts cannot be rendered");
  if (const Json* reward = body.get("reward")) {
    if (auto e = read_reward(ctx, *reward, s)) return e;
  } else if (!opd) {
    return ApiError::invalid("reward", "reward is required with prompts: {\"scorer\": ...} or {\"server\": true}");
  }
  std::string teacher_system;
  if (opd)
    if (auto e = read_teacher(ctx, body.get("teacher"), s, teacher_system)) return e;
  if (const Json* rf = body.get("response_format"))
    if (auto e = read_rollout_format(ctx, *rf, s)) return e;
  for (size_t i = 0; i < prompts->size(); ++i) {
    const std::string at = "prompts[" + std::to_string(i) + "]";
    const Json& p = (*prompts)[i];
    if (!p.is_object()) return ApiError::invalid(at, at + " must be an object {messages, reference?}");
    FieldReader r(p, at, {"messages", "reference"});
    const Json* messages = r.get("messages");
    if (!r.ok()) return r.error();
    if (!messages || !messages->is_array() || messages->empty())
      return ApiError::invalid(at + ".messages", at + ".messages must be a non-empty list of chat messages");
    for (size_t m = 0; m < messages->size(); ++m) {
      const Json& msg = (*messages)[m];
      const std::string mat = at + ".messages[" + std::to_string(m) + "]";
      if (!msg.is_object() || !msg.contains("role") || !msg["role"].is_string() || !msg.contains("content") ||
          !msg["content"].is_string())
        return ApiError::invalid(mat, mat + " must be {role, content} with string values");
    }
    RolloutPrompt rp;
    rp.messages = nlohmann::json::parse(messages->dump());
    if (const Json* ref = r.get("reference")) rp.reference = nlohmann::json::parse(ref->dump());
    // Scorers compare with the reference, except json_validity, a regex with its own pattern and a
    // json_schema with its own schema.
    const bool needs_reference = s.scorer && s.scorer->type != ScorerType::kJsonValidity &&
                                 !(s.scorer->type == ScorerType::kRegex && !s.scorer->pattern.empty()) &&
                                 !(s.scorer->type == ScorerType::kJsonSchema && !s.scorer->schema.is_null());
    if (needs_reference && !rp.reference)
      return ApiError::invalid(at + ".reference", at + ".reference is required by the reward's scorer");
    if (auto e = render(ctx, *messages, s.enable_thinking, at + ".messages", rp.tokens, &rp.opens_reasoning)) return e;
    if (opd) {
      Json teacher_messages = *messages;
      if (!teacher_system.empty())
        teacher_messages.insert(teacher_messages.begin(), Json{{"role", "system"}, {"content", teacher_system}});
      if (auto e = render(ctx, teacher_messages, s.enable_thinking, "teacher.system_prompt", rp.teacher_tokens)) return e;
    }
    const int64_t longest = static_cast<int64_t>(std::max(rp.tokens.size(), rp.teacher_tokens.size())) + s.max_tokens + 1;
    if (ctx.max_context > 0 && longest > ctx.max_context)
      return ApiError::invalid(at + ".messages", at + ": the prompt (" + std::to_string(rp.tokens.size()) +
                                                     " tokens; the teacher's " + std::to_string(rp.teacher_tokens.size()) +
                                                     ") and config.max_tokens " + std::to_string(s.max_tokens) +
                                                     " pass the served context of " + std::to_string(ctx.max_context));
    s.prompts.push_back(std::move(rp));
  }
  return std::nullopt;
}

}  // namespace kiln
