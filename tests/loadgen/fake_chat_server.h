// A stand-in OpenAI chat server for the load generator's tests: httplib::Server on a free port
// of 127.0.0.1, streaming a known number of content chunks with known sleeps. The request's
// `model` field picks the behaviour:
//   "fake"           first_delay_ms, then `chunks` content chunks gap_ms apart, a usage chunk, [DONE]
//   "fake-no-usage"  the same without the usage chunk
//   "fake-pairs"     each content chunk carries two tokens (logprobs.content has two entries)
//   "fake-503"       HTTP 503 with an OpenAI error body
//   "fake-error"     one content chunk, then an `error` object in the stream
//   "fake-no-done"   the content chunks, then the stream just ends
//   "fake-deep"      one chunk whose `error` nests 200,000 arrays deep
// Each SSE event is written in two pieces split inside its JSON, as a real network may deliver it.
#pragma once

#include <httplib.h>

#include <chrono>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

namespace kiln::loadgen::testing {

class FakeChatServer {
 public:
  struct Options {
    int first_delay_ms = 50;
    int gap_ms = 10;
    int chunks = 5;
  };

  explicit FakeChatServer(Options o) : opt_(o) {
    server_.Post("/v1/chat/completions", [this](const httplib::Request& req, httplib::Response& res) { handle(req, res); });
    server_.set_tcp_nodelay(true);
    port_ = server_.bind_to_any_port("127.0.0.1");
    thread_ = std::thread([this] { server_.listen_after_bind(); });
    for (int i = 0; i < 5000 && !server_.is_running(); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  ~FakeChatServer() {
    server_.stop();
    thread_.join();
  }

  std::string base_url() const { return "http://127.0.0.1:" + std::to_string(port_); }

  // Every request body received, in arrival order.
  std::vector<nlohmann::json> bodies() {
    std::lock_guard<std::mutex> lock(mu_);
    return bodies_;
  }

 private:
  static std::string content_chunk(int i, int tokens) {
    std::string text = "t";
    text += std::to_string(i);
    nlohmann::json choice = {{"index", 0}, {"delta", {{"content", text}}}, {"finish_reason", nullptr}};
    if (tokens > 1) {
      nlohmann::json lp = nlohmann::json::array();
      for (int k = 0; k < tokens; ++k) lp.push_back({{"token", "x"}, {"logprob", -0.5}});
      choice["logprobs"] = {{"content", lp}};
    }
    return nlohmann::json{{"object", "chat.completion.chunk"}, {"choices", {choice}}}.dump();
  }

  static bool write_event(httplib::DataSink& sink, const std::string& data) {
    const std::string event = "data: " + data + "\n\n";
    const size_t half = event.size() / 2;
    return sink.write(event.data(), half) && sink.write(event.data() + half, event.size() - half);
  }

  void handle(const httplib::Request& req, httplib::Response& res) {
    nlohmann::json body = nlohmann::json::parse(req.body, nullptr, false);
    {
      std::lock_guard<std::mutex> lock(mu_);
      bodies_.push_back(body);
    }
    const std::string model = body.value("model", "");
    if (model == "fake-503") {
      res.status = 503;
      res.set_header("Retry-After", "1");
      res.set_content(R"({"error": {"message": "queue full", "type": "server_error", "code": null, "param": null}})",
                      "application/json");
      return;
    }
    const Options o = opt_;
    res.set_chunked_content_provider("text/event-stream", [o, model](size_t, httplib::DataSink& sink) {
      std::this_thread::sleep_for(std::chrono::milliseconds(o.first_delay_ms));
      const int tokens = model == "fake-pairs" ? 2 : 1;
      // A role-only first chunk carries no content: it must not count as the first token.
      write_event(sink, R"({"choices": [{"index": 0, "delta": {"role": "assistant"}}]})");
      if (model == "fake-deep") {
        write_event(sink, "{\"error\": " + std::string(200000, '[') + std::string(200000, ']') + "}");
        sink.done();
        return true;
      }
      for (int i = 0; i < o.chunks; ++i) {
        if (i > 0) std::this_thread::sleep_for(std::chrono::milliseconds(o.gap_ms));
        if (!write_event(sink, content_chunk(i, tokens))) return false;
        if (model == "fake-error") {
          write_event(sink, R"({"error": {"message": "engine failed", "type": "server_error"}})");
          sink.done();
          return true;
        }
      }
      if (model != "fake-no-usage") {
        write_event(sink, nlohmann::json{{"choices", nlohmann::json::array()},
                                         {"usage", {{"prompt_tokens", 3}, {"completion_tokens", o.chunks * tokens}}}}
                              .dump());
      }
      if (model != "fake-no-done") write_event(sink, "[DONE]");
      sink.done();
      return true;
    });
  }

  Options opt_;
  httplib::Server server_;
  int port_ = -1;
  std::thread thread_;
  std::mutex mu_;
  std::vector<nlohmann::json> bodies_;
};

}  // namespace kiln::loadgen::testing
