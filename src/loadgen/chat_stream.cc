#include "loadgen/chat_stream.h"

#include <algorithm>
#include <chrono>

#include "core/json_text.h"
#include "loadgen/sse_reader.h"

namespace kiln::loadgen {
namespace {

using Clock = std::chrono::steady_clock;

double ms_between(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double, std::milli>(b - a).count();
}

bool non_empty_string(const nlohmann::json& obj, const char* key) {
  auto it = obj.find(key);
  return it != obj.end() && it->is_string() && !it->get_ref<const std::string&>().empty();
}

// The tokens a chunk's first choice carries: 0 when it carries no content, else the length of
// its logprobs.content (when present and non-empty), else 1.
int64_t content_tokens(const nlohmann::json& chunk) {
  auto choices = chunk.find("choices");
  if (choices == chunk.end() || !choices->is_array() || choices->empty()) return 0;
  const nlohmann::json& choice = (*choices)[0];
  if (!choice.is_object()) return 0;
  auto delta = choice.find("delta");
  if (delta == choice.end() || !delta->is_object()) return 0;
  auto tools = delta->find("tool_calls");
  const bool has_tools = tools != delta->end() && tools->is_array() && !tools->empty();
  if (!non_empty_string(*delta, "content") && !non_empty_string(*delta, "reasoning_content") && !has_tools) return 0;
  if (auto lp = choice.find("logprobs"); lp != choice.end() && lp->is_object()) {
    if (auto c = lp->find("content"); c != lp->end() && c->is_array() && !c->empty()) {
      return static_cast<int64_t>(c->size());
    }
  }
  return 1;
}

std::string error_message(const nlohmann::json& error) {
  if (error.is_object()) {
    if (auto m = error.find("message"); m != error.end() && m->is_string()) return m->get<std::string>();
  }
  return error.dump();
}

// Folds SSE events into the record as they arrive.
class StreamMeter {
 public:
  StreamMeter(RequestRecord& rec, Clock::time_point sent) : rec_(rec), sent_(sent) {}

  // Returns false when the stream must stop (an error).
  bool on_event(const SseEvent& e, Clock::time_point now) {
    // The server is outside data too: its chunks get the nesting limit of every JSON read.
    auto parsed = parse_json(e.data, "stream chunk");
    if (!parsed.ok() || !parsed->is_object()) {
      rec_.error = (parsed.ok() ? std::string("stream chunk is not a JSON object") : parsed.status().message()) + ": " +
                   e.data.substr(0, 200);
      return false;
    }
    const nlohmann::json chunk = std::move(*parsed);
    if (auto err = chunk.find("error"); err != chunk.end() && !err->is_null()) {
      rec_.error = "error in stream: " + error_message(*err);
      return false;
    }
    if (auto usage = chunk.find("usage"); usage != chunk.end() && usage->is_object()) {
      if (auto ct = usage->find("completion_tokens"); ct != usage->end() && ct->is_number_integer()) {
        rec_.output_tokens = ct->get<int64_t>();
        rec_.usage_reported = true;
      }
    }
    const int64_t tokens = content_tokens(chunk);
    if (tokens == 0) return true;
    ++rec_.content_chunks;
    counted_tokens_ += tokens;
    if (rec_.ttft_ms < 0) {
      rec_.ttft_ms = ms_between(sent_, now);
    } else {
      const double per_token = ms_between(last_content_, now) / static_cast<double>(tokens);
      rec_.inter_token_ms.insert(rec_.inter_token_ms.end(), static_cast<size_t>(tokens), per_token);
    }
    last_content_ = now;
    return true;
  }

  void finish() {
    if (!rec_.usage_reported) rec_.output_tokens = counted_tokens_;
  }

 private:
  RequestRecord& rec_;
  Clock::time_point sent_;
  Clock::time_point last_content_;
  int64_t counted_tokens_ = 0;
};

}  // namespace

std::string http_error(int status, const std::string& body) {
  std::string what = "HTTP " + std::to_string(status);
  const nlohmann::json j = parse_json(body, "the error body").value_or(nlohmann::json());
  if (j.is_object() && j.contains("error")) return what + ": " + error_message(j["error"]);
  if (body.empty()) return what;
  return what + ": " + body.substr(0, 200);
}

nlohmann::json chat_request_body(const ChatRequest& r) {
  nlohmann::json body = {{"model", r.model},
                         {"messages", r.messages != nullptr ? *r.messages : nlohmann::json::array()},
                         {"max_tokens", r.max_tokens},
                         {"seed", r.seed},
                         {"temperature", r.temperature},
                         {"stream", true},
                         {"stream_options", {{"include_usage", true}}}};
  if (!r.adapter.empty()) body["adapter"] = r.adapter;
  return body;
}

RequestRecord stream_chat_completion(httplib::Client& client, const ChatRequest& r) {
  RequestRecord rec;
  SseReader reader;
  std::vector<SseEvent> events;
  std::string error_body;  // the body of a non-200 response, capped

  httplib::Request req;
  req.method = "POST";
  req.path = r.path;
  req.body = chat_request_body(r).dump();
  req.set_header("Content-Type", "application/json");
  req.set_header("Accept", "text/event-stream");

  const Clock::time_point sent = Clock::now();
  StreamMeter meter(rec, sent);
  req.response_handler = [&](const httplib::Response& res) {
    rec.http_status = res.status;
    return true;
  };
  req.content_receiver = [&](const char* data, size_t n, uint64_t, uint64_t) {
    if (rec.http_status != 200) {
      if (error_body.size() < 4096) error_body.append(data, std::min(n, 4096 - error_body.size()));
      return true;
    }
    const Clock::time_point now = Clock::now();  // one arrival time for every event in this read
    events.clear();
    reader.feed(std::string_view(data, n), events);
    for (const SseEvent& e : events) {
      if (!meter.on_event(e, now)) return false;
      if (r.disconnect_after_chunks > 0 && rec.content_chunks >= r.disconnect_after_chunks) {
        rec.disconnected = true;  // closes the connection mid-stream
        return false;
      }
    }
    return true;
  };

  httplib::Response res;
  httplib::Error err = httplib::Error::Success;
  const bool sent_ok = client.send(req, res, err);
  rec.latency_ms = ms_between(sent, Clock::now());
  if (!rec.error.empty() || rec.disconnected) return rec;  // the read was cancelled: an error, or as asked
  if (!sent_ok) {
    rec.error = "transport error: " + httplib::to_string(err);
    return rec;
  }
  if (rec.http_status == 0) rec.http_status = res.status;
  if (rec.http_status != 200) {
    rec.error = http_error(rec.http_status, error_body.empty() ? res.body : error_body);
    return rec;
  }
  if (!reader.done()) {
    rec.error = "the stream ended without data: [DONE]";
    return rec;
  }
  meter.finish();
  return rec;
}

}  // namespace kiln::loadgen
