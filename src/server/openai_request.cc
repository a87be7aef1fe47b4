#include "server/openai_request.h"

#include <climits>

#include "core/json_text.h"
#include "engine/request.h"

namespace kiln {

namespace {

const std::set<std::string> kGenerationFields = {
    "model", "n", "stream", "stream_options", "temperature", "top_p", "top_k", "min_p", "presence_penalty",
    "frequency_penalty", "repetition_penalty", "max_tokens", "stop", "stop_token_ids", "seed", "logprobs",
    "top_logprobs", "ignore_eos", "adapter", "adapters", "user", "metadata", "store", "service_tier", "logit_bias",
    "grammar", "regex"};

std::set<std::string> with(std::set<std::string> base, std::initializer_list<const char*> more) {
  for (const char* m : more) base.insert(m);
  return base;
}

// One grammar a request: a second one is an error naming both fields.
void set_grammar(FieldReader& r, const std::string& field, grammar::GrammarSpec spec, GenerationRequest& g) {
  if (!r.ok()) return;
  if (g.grammar) return r.fail(field, field + " cannot be combined with " + g.grammar_field + " (one output constraint a request)");
  g.grammar = std::move(spec);
  g.grammar_field = field;
}

// {"<token id>": bias}: at most kMaxLogitBias entries, ids as decimal strings, biases in [-100, 100].
void read_logit_bias(const Json& lb, FieldReader& r, GenerationRequest& g) {
  if (!lb.is_object() || lb.size() > kMaxLogitBias)
    return r.fail("logit_bias", "logit_bias must be an object of at most " + std::to_string(kMaxLogitBias) +
                                    " \"<token id>\": bias entries");
  for (const auto& [key, value] : lb.items()) {
    const std::string at = "logit_bias." + key;
    int64_t id = -1;
    if (!key.empty() && key.size() <= 10 && key.find_first_not_of("0123456789") == std::string::npos) id = std::stoll(key);
    if (id < 0 || id > INT32_MAX) return r.fail("logit_bias", at + ": the key must be a token id (a non-negative integer)");
    if (!value.is_number() || !(value.get<double>() >= -100.0 && value.get<double>() <= 100.0))
      return r.fail("logit_bias", at + " must be a number in [-100, 100], got " + value.dump());
    g.logit_bias.emplace_back(static_cast<int32_t>(id), static_cast<float>(value.get<double>()));
  }
}

// response_format: text (no constraint), json_object (a JSON object), or json_schema {"name",
// "schema", "strict", "description"} (the schema is compiled by the route).

// Reads the shared fields; `logprobs_is_count`: /v1/completions' logprobs is an integer (the
// number of alternatives), chat's a boolean with top_logprobs beside it.
void read_generation(FieldReader& r, const Json& body, bool logprobs_is_count, GenerationRequest& g) {
  if (auto v = r.string("model")) g.model = *v;
  if (auto v = r.integer("n", 1, kMaxChoices)) g.n = static_cast<int>(*v);
  if (auto v = r.boolean("stream")) g.stream = *v;
  if (const Json* so = r.get("stream_options")) {
    FieldReader s(*so, r.path("stream_options"), {"include_usage", "continuous_usage_stats"});
    if (auto v = s.boolean("include_usage")) g.include_usage = *v;
    if (s.error()) r.fail("stream_options", s.error()->message);
    if (!g.stream && r.ok()) r.fail("stream_options", "stream_options is only allowed with \"stream\": true");
  }
  SamplingParams& p = g.sampling;
  if (auto v = r.number("temperature", 0.0, 2.0)) p.temperature = static_cast<float>(*v);
  if (auto v = r.number("top_p", 0.0, 1.0, /*lo_open=*/true)) p.top_p = static_cast<float>(*v);
  if (auto v = r.integer("top_k", -1, INT32_MAX)) p.top_k = *v < 0 ? 0 : static_cast<int32_t>(*v);
  if (auto v = r.number("min_p", 0.0, 1.0)) p.min_p = static_cast<float>(*v);
  if (auto v = r.number("presence_penalty", -2.0, 2.0)) p.presence_penalty = static_cast<float>(*v);
  if (auto v = r.number("frequency_penalty", -2.0, 2.0)) p.frequency_penalty = static_cast<float>(*v);
  if (auto v = r.number("repetition_penalty", 0.0, 10.0, /*lo_open=*/true)) p.repetition_penalty = static_cast<float>(*v);
  const char* max_field = body.contains("max_completion_tokens") ? "max_completion_tokens" : "max_tokens";
  if (body.contains("max_completion_tokens") && body.contains("max_tokens") && !body["max_tokens"].is_null() &&
      !body["max_completion_tokens"].is_null())
    r.fail("max_tokens", "give max_tokens or max_completion_tokens, not both");
  if (auto v = r.integer(max_field, 1, int64_t{1} << 24)) g.max_tokens = *v;
  if (const Json* s = r.get("stop")) {
    if (s->is_string()) {
      g.stop.push_back(s->get<std::string>());
    } else if (s->is_array() && s->size() <= kMaxStopStrings) {
      for (size_t i = 0; i < s->size(); ++i) {
        if (!(*s)[i].is_string()) {
          r.fail("stop", "stop[" + std::to_string(i) + "] must be a string");
          break;
        }
        g.stop.push_back((*s)[i].get<std::string>());
      }
    } else {
      r.fail("stop", "stop must be a string or a list of at most " + std::to_string(kMaxStopStrings) + " strings");
    }
    for (const auto& st : g.stop)
      if (st.empty()) r.fail("stop", "stop strings must not be empty");
  }
  if (const Json* s = r.get("stop_token_ids")) {
    if (!s->is_array() || s->size() > kMaxStopTokenIds)
      r.fail("stop_token_ids", "stop_token_ids must be a list of at most " + std::to_string(kMaxStopTokenIds) + " token ids");
    else
      for (size_t i = 0; i < s->size() && r.ok(); ++i) {
        const Json& t = (*s)[i];
        if (!t.is_number_integer() || t.get<int64_t>() < 0 || t.get<int64_t>() > INT32_MAX)
          r.fail("stop_token_ids", "stop_token_ids[" + std::to_string(i) + "] must be a non-negative token id");
        else g.stop_token_ids.push_back(static_cast<int32_t>(t.get<int64_t>()));
      }
  }
  if (const Json* s = r.get("seed")) {
    if (s->is_number_unsigned()) g.seed = s->get<uint64_t>();
    else if (s->is_number_integer()) g.seed = static_cast<uint64_t>(s->get<int64_t>());
    else r.fail("seed", "seed must be an integer, got " + s->dump());
  }
  if (logprobs_is_count) {
    if (auto v = r.integer("logprobs", 0, 20)) {
      g.logprobs = true;
      p.top_logprobs = static_cast<int32_t>(*v);
    }
  } else {
    if (auto v = r.boolean("logprobs")) g.logprobs = *v;
    if (auto v = r.integer("top_logprobs", 0, 20)) {
      if (!g.logprobs) r.fail("top_logprobs", "top_logprobs needs \"logprobs\": true");
      p.top_logprobs = static_cast<int32_t>(*v);
    }
  }
  if (auto v = r.boolean("ignore_eos")) g.ignore_eos = *v;
  if (auto v = r.string("adapter")) g.adapter = *v;
  // An explicit null or "" asks for the base model; leaving the field out takes the default adapter.
  g.base_model = body.contains("adapter") && g.adapter.empty();
  if (const Json* a = r.get("adapters")) {
    if (!a->is_array() || a->size() > kMaxAdapterStack)
      r.fail("adapters", "adapters must be a list of at most " + std::to_string(kMaxAdapterStack) + " {\"name\", \"scale\"}");
    for (size_t i = 0; a->is_array() && i < a->size() && r.ok(); ++i) {
      FieldReader ar((*a)[i], r.path("adapters") + "[" + std::to_string(i) + "]", {"name", "scale"});
      AdapterRef ref;
      if (auto v = ar.string("name")) ref.name = *v;
      else ar.fail("name", ar.path("name") + " is required");
      if (auto v = ar.number("scale", -100.0, 100.0)) ref.scale = *v;
      if (ar.error()) r.fail("adapters", ar.error()->message);
      g.adapters.push_back(ref);
    }
  }
  if (const Json* lb = r.get("logit_bias")) read_logit_bias(*lb, r, g);
  if (auto v = r.string("grammar")) set_grammar(r, "grammar", {grammar::GrammarKind::kGbnf, *v, {}}, g);
  if (auto v = r.string("regex")) set_grammar(r, "regex", {grammar::GrammarKind::kRegex, *v, {}}, g);
  if (const Json* st = r.get("service_tier"); st && !st->is_string()) r.fail("service_tier", "service_tier must be a string");
}

// Message content for the template: a string (parts of type "text" joined by newlines).
std::optional<std::string> read_content(const Json& c, const std::string& path, FieldReader& r) {
  if (c.is_string()) return c.get<std::string>();
  if (!c.is_array()) {
    r.fail("messages", path + " must be a string or a list of content parts");
    return std::nullopt;
  }
  std::string text;
  for (size_t j = 0; j < c.size(); ++j) {
    const std::string pp = path + "[" + std::to_string(j) + "]";
    FieldReader part(c[j], pp, {"type", "text"});
    auto type = part.string("type");
    if (part.ok() && type != "text")
      part.fail("type", pp + ".type " + (type ? "'" + *type + "' is not supported (text only)" : "is required"));
    auto t = part.string("text");
    if (part.ok() && !t) part.fail("text", pp + ".text is required");
    if (part.error()) {
      r.fail("messages", part.error()->message);
      return std::nullopt;
    }
    if (j) text += "\n";
    text += *t;
  }
  return text;
}

Json read_tool_calls(const Json& calls, const std::string& path, FieldReader& r) {
  Json out = Json::array();
  if (!calls.is_array()) {
    r.fail("messages", path + " must be a list");
    return out;
  }
  for (size_t k = 0; k < calls.size() && r.ok(); ++k) {
    const std::string cp = path + "[" + std::to_string(k) + "]";
    FieldReader c(calls[k], cp, {"id", "type", "function", "index"});
    auto type = c.string("type");
    if (type && *type != "function") c.fail("type", cp + ".type must be \"function\"");
    const Json* fn = c.get("function");
    if (c.ok() && !fn) c.fail("function", cp + ".function is required");
    Json call = {{"type", "function"}};
    if (auto id = c.string("id")) call["id"] = *id;
    if (fn) {
      FieldReader f(*fn, cp + ".function", {"name", "arguments"});
      auto name = f.string("name");
      if (f.ok() && !name) f.fail("name", cp + ".function.name is required");
      Json args = Json::object();
      if (const Json* a = f.get("arguments")) {
        if (a->is_object()) args = *a;
        else if (a->is_string()) {
          // Outside JSON inside a string: the same nesting limit as the body.
          auto parsed = parse_ordered_json(a->get<std::string>(), cp + ".function.arguments");
          if (!parsed.ok())
            f.fail("arguments", parsed.status().message());
          else if (!parsed->is_object())
            f.fail("arguments", cp + ".function.arguments must be a JSON object (or a string holding one)");
          else args = std::move(*parsed);
        } else {
          f.fail("arguments", cp + ".function.arguments must be a JSON object (or a string holding one)");
        }
      }
      if (f.error()) c.fail("function", f.error()->message);
      if (name) call["function"] = {{"name", *name}, {"arguments", args}};
    }
    if (c.error()) r.fail("messages", c.error()->message);
    out.push_back(call);
  }
  return out;
}

Json read_messages(const Json& msgs, FieldReader& r) {
  Json out = Json::array();
  if (!msgs.is_array()) {
    r.fail("messages", "messages must be a list of messages");
    return out;
  }
  if (msgs.empty()) r.fail("messages", "messages must contain at least one message");
  for (size_t i = 0; i < msgs.size() && r.ok(); ++i) {
    const std::string mp = "messages[" + std::to_string(i) + "]";
    FieldReader m(msgs[i], mp, {"role", "content", "name", "tool_calls", "tool_call_id", "reasoning_content"});
    auto role = m.string("role");
    if (m.ok() && !role) m.fail("role", mp + ".role is required");
    if (m.ok() && *role != "system" && *role != "developer" && *role != "user" && *role != "assistant" &&
        *role != "tool")
      m.fail("role", mp + ".role '" + *role + "' is not one of system, developer, user, assistant, tool");
    if (m.error()) {
      r.fail("messages", m.error()->message);
      break;
    }
    Json msg = {{"role", *role == "developer" ? "system" : *role}};
    const Json* content = m.get("content");
    const Json* calls = m.get("tool_calls");
    if (calls && *role != "assistant") m.fail("tool_calls", mp + ".tool_calls is only allowed on assistant messages");
    if (!content && !(*role == "assistant" && calls)) m.fail("content", mp + ".content is required");
    if (m.error()) {
      r.fail("messages", m.error()->message);
      break;
    }
    if (content) {
      auto text = read_content(*content, mp + ".content", r);
      if (!text) break;
      msg["content"] = *text;
    } else {
      msg["content"] = "";
    }
    if (auto v = m.string("reasoning_content")) msg["reasoning_content"] = *v;
    if (auto v = m.string("name")) msg["name"] = *v;
    if (auto v = m.string("tool_call_id")) msg["tool_call_id"] = *v;
    if (calls) msg["tool_calls"] = read_tool_calls(*calls, mp + ".tool_calls", r);
    if (m.error()) r.fail("messages", m.error()->message);
    out.push_back(std::move(msg));
  }
  return out;
}

Json read_tools(const Json& tools, FieldReader& r) {
  if (!tools.is_array() || tools.size() > kMaxTools) {
    r.fail("tools", "tools must be a list of at most " + std::to_string(kMaxTools) +
                        " {\"type\": \"function\", \"function\": {...}}");
    return nullptr;
  }
  for (size_t i = 0; i < tools.size() && r.ok(); ++i) {
    const std::string tp = "tools[" + std::to_string(i) + "]";
    FieldReader t(tools[i], tp, {"type", "function"});
    if (t.string("type") != "function" && t.ok()) t.fail("type", tp + ".type must be \"function\"");
    const Json* fn = t.get("function");
    if (t.ok() && !fn) t.fail("function", tp + ".function is required");
    if (fn) {
      FieldReader f(*fn, tp + ".function", {"name", "description", "parameters", "strict"});
      auto name = f.string("name");
      if (f.ok() && (!name || name->empty())) f.fail("name", tp + ".function.name is required");
      f.string("description");
      if (const Json* p = f.get("parameters"); p && !p->is_object())
        f.fail("parameters", tp + ".function.parameters must be a JSON schema object");
      if (f.error()) t.fail("function", f.error()->message);
    }
    if (t.error()) r.fail("tools", t.error()->message);
  }
  return tools.empty() ? Json(nullptr) : tools;
}

std::optional<PromptInput> read_prompt(const Json& p, const std::string& path, FieldReader& r) {
  PromptInput in;
  if (p.is_string()) {
    in.text = p.get<std::string>();
    if (in.text.empty()) r.fail("prompt", path + " must not be empty");
  } else if (p.is_array() && !p.empty() && p[0].is_number()) {
    in.is_ids = true;
    for (size_t i = 0; i < p.size(); ++i) {
      if (!p[i].is_number_integer() || p[i].get<int64_t>() < 0 || p[i].get<int64_t>() > INT32_MAX) {
        r.fail("prompt", path + "[" + std::to_string(i) + "] must be a non-negative token id");
        return std::nullopt;
      }
      in.ids.push_back(static_cast<int32_t>(p[i].get<int64_t>()));
    }
  } else {
    r.fail("prompt", path + " must be a non-empty string or a non-empty list of token ids");
  }
  if (!r.ok()) return std::nullopt;
  return in;
}

}  // namespace

void read_response_format(const Json& rf, FieldReader& r, GenerationRequest& g) {
  FieldReader f(rf, "response_format", {"type", "json_schema"});
  const auto type = f.string("type");
  if (f.ok() && !type) f.fail("type", "response_format.type is required");
  if (f.ok() && *type == "json_object") {
    // An object of any members: what OpenAI's JSON mode promises.
    set_grammar(r, "response_format", {grammar::GrammarKind::kJsonSchema, R"({"type":"object","additionalProperties":true})", {}}, g);
  } else if (f.ok() && *type == "json_schema") {
    const Json* js = f.get("json_schema");
    if (!js) f.fail("json_schema", "response_format.json_schema is required with \"type\": \"json_schema\"");
    else {
      FieldReader j(*js, "response_format.json_schema", {"name", "schema", "strict", "description"});
      const auto name = j.string("name");
      if (j.ok() && (!name || name->empty())) j.fail("name", "response_format.json_schema.name is required");
      j.boolean("strict");
      j.string("description");
      const Json* schema = j.get("schema");
      if (j.ok() && schema && !schema->is_object() && !schema->is_boolean())
        j.fail("schema", "response_format.json_schema.schema must be a JSON Schema object");
      if (j.error()) f.fail("json_schema", j.error()->message);
      else set_grammar(r, "response_format.json_schema.schema",
                       {grammar::GrammarKind::kJsonSchema, schema ? schema->dump() : "{}", {}}, g);
    }
  } else if (f.ok() && *type != "text") {
    f.fail("type", "response_format.type '" + *type + "' is not one of text, json_object, json_schema");
  } else if (f.ok() && rf.contains("json_schema")) {
    f.fail("json_schema", "response_format.json_schema is only allowed with \"type\": \"json_schema\"");
  }
  if (f.error()) r.fail("response_format", f.error()->message);
}

std::optional<ApiError> parse_chat_request(const Json& body, ChatRequest& out) {
  FieldReader r(body, "", with(kGenerationFields, {"messages", "max_completion_tokens", "tools", "tool_choice",
                                                  "chat_template_kwargs", "thinking_budget_tokens",
                                                  "parallel_tool_calls", "response_format", "reasoning_effort"}));
  read_generation(r, body, /*logprobs_is_count=*/false, out.gen);
  if (const Json* m = r.get("messages")) out.messages = read_messages(*m, r);
  else if (r.ok()) r.fail("messages", "messages is required");
  if (const Json* t = r.get("tools")) out.tools = read_tools(*t, r);
  if (const Json* tc = r.get("tool_choice")) {
    if (tc->is_string() && (*tc == "auto" || *tc == "none" || *tc == "required")) {
      out.tool_choice_none = *tc == "none";
      out.tool_choice_required = *tc == "required";
    } else if (tc->is_object()) {
      FieldReader c(*tc, "tool_choice", {"type", "function"});
      if (c.string("type") != "function" && c.ok()) c.fail("type", "tool_choice.type must be \"function\"");
      const Json* fn = c.get("function");
      if (c.ok() && !fn) c.fail("function", "tool_choice.function is required");
      if (fn) {
        FieldReader f(*fn, "tool_choice.function", {"name"});
        const auto name = f.string("name");
        if (f.ok() && (!name || name->empty())) f.fail("name", "tool_choice.function.name is required");
        if (f.error()) c.fail("function", f.error()->message);
        else out.tool_choice_function = *name;
      }
      if (c.error()) r.fail("tool_choice", c.error()->message);
    } else {
      r.fail("tool_choice", "tool_choice must be \"auto\", \"none\", \"required\" or {\"type\": \"function\", \"function\": {\"name\"}}");
    }
    if (r.ok() && (out.tool_choice_required || !out.tool_choice_function.empty()) && out.tools.is_null())
      r.fail("tool_choice", "tool_choice forces a tool call, but the request has no tools");
    if (r.ok() && !out.tool_choice_function.empty()) {
      bool found = false;
      for (const Json& t : out.tools) found = found || t["function"]["name"] == out.tool_choice_function;
      if (!found) r.fail("tool_choice", "tool_choice.function.name '" + out.tool_choice_function + "' is not one of the tools");
    }
  }
  if (auto v = r.boolean("parallel_tool_calls")) out.parallel_tool_calls = *v;
  if (const Json* rf = r.get("response_format")) read_response_format(*rf, r, out.gen);
  if (const Json* kw = r.get("chat_template_kwargs")) {
    if (!kw->is_object()) r.fail("chat_template_kwargs", "chat_template_kwargs must be an object");
    else out.template_variables = *kw;
    if (kw->is_object() && kw->contains("enable_thinking") && !(*kw)["enable_thinking"].is_boolean())
      r.fail("chat_template_kwargs", "chat_template_kwargs.enable_thinking must be a boolean");
  }
  if (auto v = r.integer("thinking_budget_tokens", 0, int64_t{1} << 24)) out.thinking_budget = *v;
  if (const Json* e = r.get("reasoning_effort"); e && !e->is_string()) r.fail("reasoning_effort", "reasoning_effort must be a string");
  return r.error();
}

std::optional<ApiError> parse_completion_request(const Json& body, bool batch, CompletionRequest& out) {
  const char* field = batch ? "prompts" : "prompt";
  FieldReader r(body, "", with(kGenerationFields, {field, "echo", "prompt_logprobs", "suffix", "best_of"}));
  read_generation(r, body, /*logprobs_is_count=*/true, out.gen);
  const Json* p = r.get(field);
  if (!p && r.ok()) r.fail(field, std::string(field) + " is required");
  if (p) {
    // A list of strings or of id lists is several prompts; a string or a list of ids is one.
    const bool many = batch || (p->is_array() && !p->empty() && ((*p)[0].is_string() || (*p)[0].is_array()));
    if (batch && !p->is_array()) r.fail(field, "prompts must be a list of prompts");
    if (many && p->is_array()) {
      if (p->empty()) r.fail(field, std::string(field) + " must not be empty");
      for (size_t i = 0; i < p->size() && r.ok(); ++i)
        if (auto in = read_prompt((*p)[i], std::string(field) + "[" + std::to_string(i) + "]", r))
          out.prompts.push_back(std::move(*in));
    } else if (auto in = read_prompt(*p, field, r)) {
      out.prompts.push_back(std::move(*in));
    }
  }
  if (auto v = r.boolean("echo")) out.echo = *v;
  if (auto v = r.integer("prompt_logprobs", 0, 20)) out.prompt_logprobs = static_cast<int>(*v);
  if (r.get("suffix")) r.fail("suffix", "suffix is not supported");
  if (auto v = r.integer("best_of", 1, kMaxChoices); v && *v != out.gen.n)
    r.fail("best_of", "best_of must equal n (no server-side ranking)");
  if (out.echo && out.gen.stream && r.ok()) r.fail("echo", "echo is not supported with stream");
  if (out.prompt_logprobs && out.gen.stream && r.ok())
    r.fail("prompt_logprobs", "prompt_logprobs is not supported with stream");
  return r.error();
}

}  // namespace kiln
