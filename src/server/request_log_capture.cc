#include "server/request_log_capture.h"

#include <ctime>
#include <map>

#include "core/json_text.h"
#include "server/request_log.h"
#include "server/server_context.h"

namespace kiln {

using Json = nlohmann::json;

class RequestCapture {
 public:
  ServerContext* ctx = nullptr;
  RequestLog* log = nullptr;
  Json row;
  std::chrono::steady_clock::time_point t0;
  std::string body;  // bytes a content provider wrote

  void finish(int status, const std::string& response_body, bool stream) {
    row["status"] = status;
    row["duration_ms"] = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    row["stream"] = stream;
    Json response = nullptr, error = nullptr, usage = nullptr;
    if (stream) {
      response = reassemble_sse(response_body);
    } else if (!response_body.empty()) {
      response = parse_json(response_body, "the response").value_or(Json(response_body));
    }
    if (response.is_object() && response.contains("error")) {
      error = response["error"];
      response.erase("error");
      if (response.empty()) response = nullptr;
    }
    if (response.is_object() && response.contains("usage")) usage = response["usage"];
    row["response"] = std::move(response);
    row["error"] = std::move(error);
    row["usage"] = std::move(usage);
    if (ctx->config.logging.request_log_redact) redact_request_log_row(row);
    if (log->append(row)) ctx->metrics.request_log_row(true);
    else ctx->metrics.request_log_row(false);
  }
};

namespace {

std::string utc_now_iso() {
  const auto now = std::chrono::system_clock::now();
  const std::time_t t = std::chrono::system_clock::to_time_t(now);
  const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(now.time_since_epoch()).count() % 1000;
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[40];
  const size_t n = std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%S", &tm);
  std::snprintf(buf + n, sizeof buf - n, ".%03dZ", static_cast<int>(ms));
  return buf;
}

Json revision_of(const AdapterRegistry* reg, const std::string& name) {
  if (!reg) return nullptr;
  auto a = reg->resolve(name);
  return a.ok() ? Json(a->revision) : Json(nullptr);
}

// The adapter(s) a request names, with the revisions they resolve to now (the route resolves
// them again at submit; a reload in between is a race the log cannot see).
void set_adapters(Json& row, const Json& body, const AdapterRegistry* reg) {
  row["adapter"] = nullptr;
  row["adapter_revision"] = nullptr;
  if (!body.is_object()) return;
  if (auto it = body.find("adapters"); it != body.end() && it->is_array() && !it->empty()) {
    Json stack = Json::array();
    for (const auto& a : *it) {
      if (!a.is_object() || !a.contains("name") || !a["name"].is_string()) continue;
      const std::string name = a["name"];
      // The scale as sent: the route refuses one that is not a number, and the row says what it was.
      const Json scale = a.contains("scale") ? a["scale"] : Json(1.0);
      stack.push_back({{"name", name}, {"scale", scale}, {"revision", revision_of(reg, name)}});
    }
    row["adapters"] = std::move(stack);
    return;
  }
  auto it = body.find("adapter");
  if (it != body.end()) {
    if (it->is_string() && !it->get<std::string>().empty()) {
      row["adapter"] = *it;
      row["adapter_revision"] = revision_of(reg, *it);
    }
    return;  // null or "": the base model
  }
  if (reg)
    if (auto d = reg->resolve_default()) {  // none named: the default adapter serves it
      row["adapter"] = d->name;
      row["adapter_revision"] = d->revision;
    }
}

}  // namespace

std::shared_ptr<RequestCapture> begin_request_log(ServerContext& ctx, const char* route, const httplib::Request& req) {
  if (!ctx.request_log) return nullptr;
  auto c = std::make_shared<RequestCapture>();
  c->ctx = &ctx;
  c->log = ctx.request_log;
  c->t0 = std::chrono::steady_clock::now();
  // A body that is not JSON, or nests too deep to serialise safely, is logged as its text.
  Json body = parse_json(req.body, "the request body").value_or(Json(req.body));
  c->row = {{"ts", utc_now_iso()}, {"route", route}, {"model", ctx.model_id}};
  set_adapters(c->row, body, ctx.adapters);
  c->row["request"] = std::move(body);
  return c;
}

void end_request_log(std::shared_ptr<RequestCapture> capture, httplib::Response& res) {
  if (!capture) return;
  if (!res.content_provider_) return capture->finish(res.status, res.body, false);
  const bool stream = res.get_header_value("Content-Type").find("text/event-stream") != std::string::npos;
  // Every byte the client is sent passes through this sink, then on to cpp-httplib's.
  auto inner = res.content_provider_;
  res.content_provider_ = [inner, capture](size_t offset, size_t length, httplib::DataSink& sink) {
    httplib::DataSink tee;
    tee.write = [&sink, capture](const char* d, size_t n) {
      capture->body.append(d, n);
      return sink.write(d, n);
    };
    tee.done = [&sink] { sink.done(); };
    tee.is_writable = [&sink] { return sink.is_writable(); };
    return inner(offset, length, tee);
  };
  const int status = res.status;
  auto release = res.content_provider_resource_releaser_;
  res.content_provider_resource_releaser_ = [release, capture, status, stream](bool ok) {
    if (release) release(ok);
    capture->finish(ok ? status : 499, capture->body, stream);
  };
}

Json reassemble_sse(const std::string& body) {
  struct Choice {
    std::string content, reasoning;
    std::map<int64_t, Json> tool_calls;
    Json finish = nullptr;
  };
  std::map<int64_t, Choice> choices;
  Json out = Json::object(), error = nullptr;
  bool chat = false;
  size_t pos = 0;
  while ((pos = body.find("data: ", pos)) != std::string::npos) {
    const size_t end = body.find("\n\n", pos);
    const std::string data = body.substr(pos + 6, end == std::string::npos ? std::string::npos : end - pos - 6);
    pos = end == std::string::npos ? body.size() : end;
    if (data == "[DONE]") continue;
    Json e = Json::parse(data, nullptr, false);
    if (!e.is_object()) continue;
    if (e.contains("error")) {
      error = e["error"];
      continue;
    }
    for (const char* k : {"id", "created", "model"})
      if (e.contains(k)) out[k] = e[k];
    if (e.value("object", "") == "chat.completion.chunk") chat = true;
    if (e.contains("usage") && !e["usage"].is_null()) out["usage"] = e["usage"];
    if (!e.contains("choices") || !e["choices"].is_array()) continue;
    for (const auto& c : e["choices"]) {
      Choice& ch = choices[c.value("index", int64_t{0})];
      if (c.contains("text") && c["text"].is_string()) ch.content += c["text"].get<std::string>();
      if (c.contains("delta") && c["delta"].is_object()) {
        const Json& d = c["delta"];
        if (d.contains("content") && d["content"].is_string()) ch.content += d["content"].get<std::string>();
        if (d.contains("reasoning_content") && d["reasoning_content"].is_string())
          ch.reasoning += d["reasoning_content"].get<std::string>();
        if (d.contains("tool_calls") && d["tool_calls"].is_array())
          for (const auto& tc : d["tool_calls"]) {
            Json& call = ch.tool_calls[tc.value("index", int64_t{0})];
            const std::string prev = call.is_object() ? call["function"].value("arguments", "") : "";
            Json merged = tc;
            merged.erase("index");
            if (call.is_object() && merged.contains("function"))
              merged["function"]["arguments"] = prev + merged["function"].value("arguments", "");
            call = merged;
          }
      }
      if (c.contains("finish_reason") && !c["finish_reason"].is_null()) ch.finish = c["finish_reason"];
    }
  }
  out["object"] = chat ? "chat.completion" : "text_completion";
  Json list = Json::array();
  for (auto& [index, ch] : choices) {
    Json c = {{"index", index}, {"finish_reason", ch.finish}};
    if (chat) {
      Json m = {{"role", "assistant"}, {"content", ch.content}};
      if (!ch.reasoning.empty()) m["reasoning_content"] = ch.reasoning;
      if (!ch.tool_calls.empty()) {
        m["tool_calls"] = Json::array();
        for (auto& [i, call] : ch.tool_calls) m["tool_calls"].push_back(call);
      }
      c["message"] = std::move(m);
    } else {
      c["text"] = ch.content;
    }
    list.push_back(std::move(c));
  }
  out["choices"] = std::move(list);
  if (!error.is_null()) out["error"] = error;
  return out;
}

namespace {

// Keys whose string values are names and kinds, never anyone's words.
bool keeps_its_value(const std::string& key) {
  static const char* const kKeys[] = {"model", "role", "object", "id", "type", "finish_reason", "adapter", "name",
                                      "service_tier", "reasoning_effort", "tool_choice", "system_fingerprint",
                                      "tool_call_id", "code", "param"};
  for (const char* k : kKeys)
    if (key == k) return true;
  return false;
}

void redact_value(Json& v, const std::string& key) {
  if (key == "logprobs" || key == "prompt_logprobs" || key == "top_logprobs") {
    if (!v.is_null() && !v.is_boolean() && !v.is_number()) v = "[redacted]";
    return;
  }
  if (v.is_string()) {
    if (!keeps_its_value(key)) v = "[redacted: " + std::to_string(v.get_ref<const std::string&>().size()) + " bytes]";
  } else if (v.is_array()) {
    const bool ids = (key == "prompt" || key == "prompts") && !v.empty() && v[0].is_number_integer();
    if (ids) {
      v = "[redacted: " + std::to_string(v.size()) + " tokens]";
      return;
    }
    for (Json& e : v) redact_value(e, key);  // a list's items keep their key's rule
  } else if (v.is_object()) {
    for (auto it = v.begin(); it != v.end(); ++it) redact_value(it.value(), it.key());
  }
}

}  // namespace

void redact_request_log_row(Json& row) {
  for (const char* part : {"request", "response"})
    if (row.contains(part)) redact_value(row[part], part);
}

}  // namespace kiln
