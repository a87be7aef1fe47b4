// The HTTP server end to end on the CPU backend, through a real HTTP client: routes and their
// OpenAI shapes, streaming == non-streaming, seeds, n, stop strings, a table of bad requests
// (each refused with the right status naming the field), client disconnects, a full queue, body
// and context limits, adapters loaded, used, unloaded and deleted — and after each, every K/V block and GDN slot back in the free pools.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <thread>

#include <httplib.h>
#include <nlohmann/json.hpp>

#include "backend/fallback.h"
#include "backend/registry.h"
#include "model/init.h"
#include "model/lora_adapter.h"
#include "server/serving_stack.h"
#include "test_util.h"
#include "tokenizer/qwen3_fixture.h"

namespace kiln {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

// A random-weight `tiny-chat` checkpoint with the Qwen3 tokenizer, made once per test binary.
const std::string& model_dir() {
  static const std::string dir = [] {
    const std::string d = (fs::temp_directory_path() / ("kiln-http-test-" + std::to_string(::getpid()))).string();
    fs::remove_all(d);
    EXPECT_TRUE(write_random_checkpoint(preset_config("tiny-chat").value(), d, {}).ok());
    for (const char* f : {"tokenizer.json", "tokenizer_config.json"})
      fs::copy_file(testing::qwen3_dir() + "/" + f, d + "/" + f);
    std::atexit([] { fs::remove_all((fs::temp_directory_path() / ("kiln-http-test-" + std::to_string(::getpid())))); });
    return d;
  }();
  return dir;
}

KilnConfig test_config() {
  KilnConfig c;
  c.model.path = model_dir();
  c.model.backend = "cpu";
  c.model.max_context = 1024;
  c.server.port = 0;
  c.server.max_decode_batch = 8;
  c.server.max_queued_requests = 16;
  c.server.max_body_bytes = 1 << 20;
  c.server.state_dir = model_dir();
  c.memory.kv_blocks = 256;
  return c;
}

struct Server {
  explicit Server(const KilnConfig& c = test_config()) {
    auto s = ServingStack::start(c);
    if (!s.ok()) ADD_FAILURE() << s.status().to_string();
    else stack = std::move(*s);
  }
  httplib::Client client() const {
    httplib::Client cli("127.0.0.1", stack->port());
    cli.set_read_timeout(60, 0);
    return cli;
  }
  httplib::Result post(const std::string& path, const std::string& body) const {
    return client().Post(path.c_str(), body, "application/json");
  }
  json post_json(const std::string& path, const json& body, int want_status = 200) const {
    auto r = post(path, body.dump());
    EXPECT_TRUE(r) << "no response";
    if (!r) return {};
    EXPECT_EQ(r->status, want_status) << r->body;
    return json::parse(r->body);
  }
  // The metrics page, once it holds `needle` (up to 5 s): a response written by a content provider
  // is counted when cpp-httplib releases the provider, which may be just after the client read it.
  std::string metrics_once_they_show(const std::string& needle) const {
    std::string m;
    for (int i = 0; i < 500; ++i) {
      auto r = client().Get("/metrics");
      m = r ? r->body : std::string();
      if (m.find(needle) != std::string::npos) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    return m;
  }
  json health() const {
    auto r = client().Get("/health");
    return r ? json::parse(r->body) : json();
  }
  // Waits (up to 10 s) until nothing runs or waits and every block and slot is free or cached.
  void expect_idle_and_whole() const {
    json h;
    for (int i = 0; i < 1000; ++i) {
      h = health()["engine"];
      if (h["running"] == 0 && h["waiting"] == 0 &&
          h["kv_blocks_free"].get<int64_t>() + h["kv_blocks_cached"].get<int64_t>() == h["kv_blocks_total"].get<int64_t>() &&
          h["gdn_slots_free"].get<int64_t>() + h["gdn_slots_cached"].get<int64_t>() == h["gdn_slots_total"].get<int64_t>())
        return;
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    ADD_FAILURE() << "engine not back to its free pools: " << h.dump();
  }
  std::unique_ptr<ServingStack> stack;
};

json chat(const std::string& content, json extra = json::object()) {
  json b = {{"messages", {{{"role", "user"}, {"content", content}}}}, {"max_tokens", 12}, {"temperature", 0}};
  for (auto& [k, v] : extra.items()) b[k] = v;
  return b;
}

// Data lines of an SSE body, parsed (the final [DONE] excluded and reported).
std::vector<json> sse_events(const std::string& body, bool& done) {
  std::vector<json> out;
  done = false;
  size_t pos = 0;
  while ((pos = body.find("data: ", pos)) != std::string::npos) {
    size_t end = body.find("\n\n", pos);
    std::string data = body.substr(pos + 6, end - pos - 6);
    if (data == "[DONE]") done = true;
    else out.push_back(json::parse(data));
    pos = end;
  }
  return out;
}

TEST(Http, ModelsHealthAndConfigRoutes) {
  Server s;
  ASSERT_TRUE(s.stack);
  auto models = json::parse(s.client().Get("/v1/models")->body);
  ASSERT_EQ(models["data"].size(), 1u);
  EXPECT_EQ(models["data"][0]["id"], s.stack->model_id());
  auto one = s.client().Get(("/v1/models/" + s.stack->model_id()).c_str());
  EXPECT_EQ(one->status, 200);
  EXPECT_EQ(json::parse(one->body)["id"], s.stack->model_id());
  EXPECT_EQ(s.client().Get("/v1/models/gpt-4")->status, 404);
  json h = s.health();
  EXPECT_EQ(h["status"], "ready");
  EXPECT_EQ(h["backend"], "cpu");
  EXPECT_EQ(h["engine"]["kv_blocks_total"], 256);
  EXPECT_EQ(h["engine"]["kv_dtype"], "f32");  // the fixture is f32, and the cpu keeps f32 K/V
  // The CPU backend's memory: this process's resident set (a loaded model and a K/V pool: more
  // than a megabyte) out of the machine's RAM.
  ASSERT_TRUE(h["memory"]["device_used_bytes"].is_number()) << h.dump();
  EXPECT_GT(h["memory"]["device_used_bytes"].get<int64_t>(), int64_t{1} << 20);
  EXPECT_GT(h["memory"]["device_total_bytes"].get<int64_t>(), h["memory"]["device_used_bytes"].get<int64_t>());
  auto missing = s.client().Get("/v1/nope");
  EXPECT_EQ(missing->status, 404);
  EXPECT_NE(json::parse(missing->body)["error"]["message"].get<std::string>().find("/v1/nope"), std::string::npos);
}

// memory.kv_cache_fp8 on a backend without an e4m3 K/V cache stops the start, naming the setting
// and what the backend keeps (never a silent f32 cache under an fp8 setting).
TEST(Http, Fp8KvOnTheCpuBackendRefusesToStart) {
  KilnConfig c = test_config();
  c.memory.kv_cache_fp8 = true;
  auto s = ServingStack::start(c);
  ASSERT_FALSE(s.ok());
  const std::string m = s.status().to_string();
  EXPECT_NE(m.find("memory.kv_cache_fp8"), std::string::npos) << m;
  EXPECT_NE(m.find("cpu backend keeps K/V in f32"), std::string::npos) << m;
}

TEST(Http, ChatCompletionHasTheOpenAiShape) {
  Server s;
  ASSERT_TRUE(s.stack);
  json r = s.post_json("/v1/chat/completions", chat("Hello there"));
  EXPECT_EQ(r["object"], "chat.completion");
  ASSERT_EQ(r["choices"].size(), 1u);
  EXPECT_EQ(r["choices"][0]["message"]["role"], "assistant");
  EXPECT_TRUE(r["choices"][0]["message"]["content"].is_string());
  EXPECT_EQ(r["choices"][0]["finish_reason"], "length");  // random weights rarely say <|im_end|> in 12 tokens
  EXPECT_EQ(r["usage"]["completion_tokens"], 12);
  EXPECT_EQ(r["usage"]["total_tokens"], r["usage"]["prompt_tokens"].get<int>() + 12);
  s.expect_idle_and_whole();
}

TEST(Http, StreamingConcatenatesToTheNonStreamingAnswer) {
  Server s;
  ASSERT_TRUE(s.stack);
  json whole = s.post_json("/v1/chat/completions", chat("Tell me a story", {{"max_tokens", 24}}));
  auto r = s.post("/v1/chat/completions",
                  chat("Tell me a story", {{"max_tokens", 24}, {"stream", true}, {"stream_options", {{"include_usage", true}}}}).dump());
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200);
  EXPECT_NE(r->get_header_value("Content-Type").find("text/event-stream"), std::string::npos);
  bool done = false;
  auto events = sse_events(r->body, done);
  EXPECT_TRUE(done);
  std::string text, finish;
  json usage;
  for (const auto& e : events) {
    EXPECT_EQ(e["object"], "chat.completion.chunk");
    if (e.contains("usage")) usage = e["usage"];
    for (const auto& c : e["choices"]) {
      if (c["delta"].contains("content")) text += c["delta"]["content"].get<std::string>();
      if (!c["finish_reason"].is_null()) finish = c["finish_reason"];
    }
  }
  EXPECT_EQ(text, whole["choices"][0]["message"]["content"].get<std::string>());
  EXPECT_EQ(finish, whole["choices"][0]["finish_reason"]);
  EXPECT_EQ(usage["completion_tokens"], whole["usage"]["completion_tokens"]);
  s.expect_idle_and_whole();
}

TEST(Http, SeedsAndChoices) {
  Server s;
  ASSERT_TRUE(s.stack);
  json body = chat("Pick words", {{"temperature", 1.0}, {"seed", 42}, {"n", 3}, {"max_tokens", 16}});
  json a = s.post_json("/v1/chat/completions", body);
  json b = s.post_json("/v1/chat/completions", body);
  ASSERT_EQ(a["choices"].size(), 3u);
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(a["choices"][i]["index"], i);
    EXPECT_EQ(a["choices"][i]["message"]["content"], b["choices"][i]["message"]["content"]) << "same seed, same text";
  }
  // Choice i uses seed + i: different seeds give different samples (16 tokens at temperature 1
  // from a 151936-word vocabulary collide with negligible probability).
  EXPECT_NE(a["choices"][0]["message"]["content"], a["choices"][1]["message"]["content"]);
  body["seed"] = 43;
  json c = s.post_json("/v1/chat/completions", body);
  EXPECT_EQ(c["choices"][0]["message"]["content"], a["choices"][1]["message"]["content"]);
  EXPECT_EQ(a["usage"]["completion_tokens"], 48);
  s.expect_idle_and_whole();
}

TEST(Http, StopStringEndsTheChoiceBeforeIt) {
  Server s;
  ASSERT_TRUE(s.stack);
  // Completions on token ids keep the text free of chat formatting.
  json base = {{"prompt", {1, 2, 3, 4, 5, 6}}, {"max_tokens", 24}, {"temperature", 0}};
  json whole = s.post_json("/v1/completions", base);
  const std::string text = whole["choices"][0]["text"];
  ASSERT_GT(text.size(), 8u);
  // A stop string from the middle of the text that occurs there once, at a character boundary.
  std::string stop;
  size_t at = 0;
  for (size_t i = text.size() / 3; i + 3 < text.size() && stop.empty(); ++i) {
    if ((static_cast<unsigned char>(text[i]) & 0xC0) == 0x80) continue;
    auto char_end = [&](size_t p) {
      do ++p;
      while (p < text.size() && (static_cast<unsigned char>(text[p]) & 0xC0) == 0x80);
      return p;
    };
    const size_t end = char_end(char_end(i));  // two whole characters
    if (end > text.size()) break;
    std::string cand = text.substr(i, end - i);
    if (text.find(cand) == i && text.find(cand, i + 1) == std::string::npos) {
      stop = cand;
      at = i;
    }
  }
  ASSERT_FALSE(stop.empty()) << text;
  json b = base;
  b["stop"] = stop;
  json cut = s.post_json("/v1/completions", b);
  EXPECT_EQ(cut["choices"][0]["text"], text.substr(0, at));
  EXPECT_EQ(cut["choices"][0]["finish_reason"], "stop");
  s.expect_idle_and_whole();
}

TEST(Http, CompletionsEchoLogprobsAndBatch) {
  Server s;
  ASSERT_TRUE(s.stack);
  json r = s.post_json("/v1/completions", {{"prompt", "Once upon a time"}, {"max_tokens", 4}, {"temperature", 0},
                                           {"echo", true}, {"logprobs", 2}});
  const std::string text = r["choices"][0]["text"];
  EXPECT_EQ(text.rfind("Once upon a time", 0), 0u);
  const int prompt_tokens = r["usage"]["prompt_tokens"];
  const json& lp = r["choices"][0]["logprobs"];
  // echo + logprobs scores the prompt too (OpenAI's scoring idiom): prompt tokens, then generated.
  ASSERT_EQ(lp["tokens"].size(), static_cast<size_t>(prompt_tokens + 4));
  EXPECT_TRUE(lp["token_logprobs"][0].is_null());
  for (size_t i = 1; i < lp["tokens"].size(); ++i) {
    EXPECT_LE(lp["token_logprobs"][i].get<double>(), 0.0);
    EXPECT_EQ(lp["top_logprobs"][i].size(), 2u);
  }
  EXPECT_EQ(lp["text_offset"][0], 0);
  std::string joined;
  for (const auto& t : lp["tokens"]) joined += t.get<std::string>();
  EXPECT_EQ(joined, text);
  // prompt_logprobs gives the same scores of the prompt.
  json p = s.post_json("/v1/completions", {{"prompt", "Once upon a time"}, {"max_tokens", 1}, {"temperature", 0},
                                           {"prompt_logprobs", 1}});
  const json& pl = p["choices"][0]["prompt_logprobs"];
  ASSERT_EQ(pl.size(), static_cast<size_t>(prompt_tokens));
  EXPECT_TRUE(pl[0].is_null());
  for (int i = 1; i < prompt_tokens; ++i) {
    EXPECT_NEAR(pl[i]["logprob"].get<double>(), lp["token_logprobs"][i].get<double>(), 1e-6) << i;
    EXPECT_EQ(pl[i]["top_logprobs"].size(), 1u);
  }
  // prompt_logprobs 0, and echo with logprobs 0, ask for each prompt token's own logprob alone,
  // which the backend computes without every position's logits: the same scores, no alternatives,
  // the same completions.
  json own = s.post_json("/v1/completions", {{"prompt", "Once upon a time"}, {"max_tokens", 1}, {"temperature", 0},
                                             {"prompt_logprobs", 0}});
  const json& ol = own["choices"][0]["prompt_logprobs"];
  ASSERT_EQ(ol.size(), static_cast<size_t>(prompt_tokens));
  EXPECT_TRUE(ol[0].is_null());
  for (int i = 1; i < prompt_tokens; ++i) {
    EXPECT_NEAR(ol[i]["logprob"].get<double>(), lp["token_logprobs"][i].get<double>(), 1e-4) << i;
    EXPECT_TRUE(ol[i]["top_logprobs"].empty()) << i;
  }
  EXPECT_EQ(own["choices"][0]["text"], p["choices"][0]["text"]);
  json echo0 = s.post_json("/v1/completions", {{"prompt", "Once upon a time"}, {"max_tokens", 4}, {"temperature", 0},
                                               {"echo", true}, {"logprobs", 0}});
  EXPECT_EQ(echo0["choices"][0]["text"], text);
  const json& el = echo0["choices"][0]["logprobs"];
  ASSERT_EQ(el["token_logprobs"].size(), static_cast<size_t>(prompt_tokens + 4));
  for (int i = 1; i < prompt_tokens; ++i) {
    EXPECT_NEAR(el["token_logprobs"][i].get<double>(), lp["token_logprobs"][i].get<double>(), 1e-4) << i;
    EXPECT_TRUE(el["top_logprobs"][i].empty()) << i;
  }
  json batch = s.post_json("/v1/completions/batch",
                           {{"prompts", {"a b c", {7, 8, 9}}}, {"n", 2}, {"max_tokens", 3}, {"temperature", 0}});
  ASSERT_EQ(batch["choices"].size(), 4u);
  for (int i = 0; i < 4; ++i) {
    EXPECT_EQ(batch["choices"][i]["index"], i);
    EXPECT_EQ(batch["choices"][i]["prompt_index"], i / 2);
  }
  EXPECT_EQ(batch["choices"][0]["text"], batch["choices"][1]["text"]);  // greedy: n copies agree
  EXPECT_EQ(batch["usage"]["completion_tokens"], 12);
  s.expect_idle_and_whole();
}

std::string many_words(int n) {
  std::string s;
  for (int i = 0; i < n; ++i) s += "w" + std::to_string(i * 7919 % 100003) + " ";
  return s;
}

struct BadRequest {
  const char* route;
  std::string body;
  int status;
  const char* names;  // a substring the error's param or message must contain
};

TEST(Http, BadRequestsGetTheRightStatusNamingTheField) {
  Server s;
  ASSERT_TRUE(s.stack);
  const char* C = "/v1/chat/completions";
  const char* P = "/v1/completions";
  auto with = [](json extra) { return chat("hi", std::move(extra)).dump(); };
  std::string invalid_utf8 = R"({"messages":[{"role":"user","content":"a)" + std::string("\xff\xfe") + R"("}]})";
  const std::vector<BadRequest> table = {
      {C, "{", 400, "JSON"},
      {C, "[]", 400, "JSON object"},
      {C, R"({"max_tokens":3})", 400, "messages"},
      {C, R"({"messages":"hi"})", 400, "messages"},
      {C, R"({"messages":[]})", 400, "messages"},
      {C, R"({"messages":[3]})", 400, "messages[0]"},
      {C, R"({"messages":[{"role":"wizard","content":"x"}]})", 400, "messages[0].role"},
      {C, R"({"messages":[{"role":"user"}]})", 400, "messages[0].content"},
      {C, R"({"messages":[{"role":"user","content":5}]})", 400, "messages[0].content"},
      {C, R"({"messages":[{"role":"user","content":[{"type":"image_url","image_url":{}}]}]})", 400, "messages[0].content[0]"},
      {C, invalid_utf8, 400, "UTF-8"},
      {C, with({{"temperature", -1}}), 400, "temperature"},
      {C, with({{"temperature", "hot"}}), 400, "temperature"},
      {C, with({{"top_p", 0}}), 400, "top_p"},
      {C, with({{"top_p", 1.5}}), 400, "top_p"},
      {C, with({{"top_k", -5}}), 400, "top_k"},
      {C, with({{"min_p", 2}}), 400, "min_p"},
      {C, with({{"presence_penalty", 3}}), 400, "presence_penalty"},
      {C, with({{"frequency_penalty", -3}}), 400, "frequency_penalty"},
      {C, with({{"repetition_penalty", 0}}), 400, "repetition_penalty"},
      {C, with({{"max_tokens", -1}}), 400, "max_tokens"},
      {C, with({{"max_tokens", 0}}), 400, "max_tokens"},
      {C, with({{"max_tokens", 1000000000}}), 400, "max_tokens"},
      {C, with({{"max_tokens", 1.5}}), 400, "max_tokens"},
      {C, with({{"max_tokens", 2000}}), 400, "max_tokens"},  // more than the 1024-token context leaves
      {C, with({{"n", 0}}), 400, "n"},
      {C, with({{"n", 100}}), 400, "n"},
      {C, with({{"stop", 5}}), 400, "stop"},
      {C, with({{"stop", {""}}}), 400, "stop"},
      {C, with({{"seed", "x"}}), 400, "seed"},
      {C, with({{"logprobs", "yes"}}), 400, "logprobs"},
      {C, with({{"logprobs", true}, {"top_logprobs", 30}}), 400, "top_logprobs"},
      {C, with({{"top_logprobs", 2}}), 400, "top_logprobs"},
      {C, with({{"stream", "true"}}), 400, "stream"},
      {C, with({{"stream_options", {{"include_usage", true}}}}), 400, "stream_options"},
      {C, with({{"temprature", 0.5}}), 400, "temprature"},
      {C, with({{"model", "gpt-4"}}), 404, "model"},
      {C, with({{"adapter", "nope"}}), 404, "adapter"},
      {C, with({{"adapters", {{{"name", "x"}, {"scale", 1}}}}}), 404, "adapters[0].name"},
      {C, with({{"tools", "get_weather"}}), 400, "tools"},
      {C, with({{"tools", {{{"type", "function"}, {"function", {{"description", "no name"}}}}}}}), 400, "tools[0].function.name"},
      {C, with({{"tool_choice", "required"}}), 400, "tool_choice"},
      {C, with({{"chat_template_kwargs", 3}}), 400, "chat_template_kwargs"},
      {C, with({{"thinking_budget_tokens", -1}}), 400, "thinking_budget_tokens"},
      {C, with({{"response_format", {{"type", "json_schema"}}}}), 400, "response_format.json_schema"},
      {C, with({{"response_format", {{"type", "yaml"}}}}), 400, "response_format.type"},
      {C, with({{"response_format", {{"type", "json_schema"}, {"json_schema", {{"name", "n"}, {"schema", {{"type", "object"}, {"properties", {{"n", {{"type", "integer"}, {"multipleOf", 3}}}}}}}}}}}}), 400,
       "/properties/n/multipleOf"},
      // A schema past the request's compile limit: refused, not compiled for a second.
      {C, with({{"response_format", {{"type", "json_schema"}, {"json_schema", {{"name", "n"}, {"schema", {{"type", "string"}, {"maxLength", 9000}}}}}}}}), 400,
       "response_format.json_schema.schema"},
      {C, with({{"grammar", "root ::= \"a\""}, {"regex", "a+"}}), 400, "regex"},
      {C, with({{"grammar", "root ::= [a"}}), 400, "grammar"},
      {C, with({{"regex", "(a"}}), 400, "regex"},
      {C, with({{"logit_bias", {{"abc", 1}}}}), 400, "logit_bias.abc"},
      {C, with({{"logit_bias", {{"5", 500}}}}), 400, "logit_bias.5"},
      {C, with({{"logit_bias", {{"999999999", 1}}}}), 400, "logit_bias.999999999"},
      {C, with({{"tools", {{{"type", "function"}, {"function", {{"name", "f"}}}}}}, {"tool_choice", {{"type", "function"}, {"function", {{"name", "g"}}}}}}), 400,
       "tool_choice.function.name 'g'"},
      {C, with({{"regex", "a+"}, {"ignore_eos", true}}), 400, "ignore_eos"},
      {P, R"({"prompt":"x","grammar":"root ::= (\"a\""})", 400, "grammar"},
      {P, R"({"prompt":"x","logit_bias":{"1":-101}})", 400, "logit_bias.1"},
      {C, chat(many_words(1500)).dump(), 413, "messages"},  // > 1024 tokens
      {P, R"({"max_tokens":3})", 400, "prompt"},
      {P, R"({"prompt":[-1]})", 400, "prompt"},
      {P, R"({"prompt":[999999]})", 400, "prompt"},
      {P, R"({"prompt":""})", 400, "prompt"},
      {P, R"({"prompt":"x","logprobs":50})", 400, "logprobs"},
      {P, R"({"prompt":"x","suffix":"y"})", 400, "suffix"},
      {"/v1/completions/batch", R"({"prompts":"x"})", 400, "prompts"},
      {C, "{\"messages\":[{\"role\":\"user\",\"content\":\"" + std::string(2 << 20, 'a') + "\"}]}", 413, "body"},
  };
  ASSERT_GE(table.size(), 30u);
  for (const auto& t : table) {
    auto r = s.post(t.route, t.body);
    ASSERT_TRUE(r) << "no response to " << t.body.substr(0, 120);
    EXPECT_EQ(r->status, t.status) << t.body.substr(0, 200) << "\n-> " << r->body;
    json e = json::parse(r->body, nullptr, false);
    ASSERT_FALSE(e.is_discarded()) << r->body;
    ASSERT_TRUE(e.contains("error")) << r->body;
    const std::string said = e["error"]["message"].get<std::string>() + " | " +
                             (e["error"]["param"].is_string() ? e["error"]["param"].get<std::string>() : "");
    EXPECT_NE(said.find(t.names), std::string::npos) << t.body.substr(0, 200) << "\n-> " << r->body;
  }
  EXPECT_EQ(s.health()["status"], "ready");
  s.expect_idle_and_whole();
  // Still serving.
  s.post_json("/v1/chat/completions", chat("still there?"));
}

TEST(Http, ClientDisconnectMidStreamCancelsAndFreesEverything) {
  Server s;
  ASSERT_TRUE(s.stack);
  const json before = s.health()["engine"];
  httplib::Request req;
  req.method = "POST";
  req.path = "/v1/chat/completions";
  req.set_header("Content-Type", "application/json");
  req.body = chat("Go on forever", {{"max_tokens", 900}, {"stream", true}}).dump();
  int chunks = 0;
  req.content_receiver = [&](const char*, size_t, uint64_t, uint64_t) { return ++chunks < 3; };  // then hang up
  httplib::Response res;
  httplib::Error err;
  auto cli = s.client();
  cli.send(req, res, err);
  EXPECT_EQ(chunks, 3);
  s.expect_idle_and_whole();
  json after = s.health()["engine"];
  EXPECT_EQ(after["kv_blocks_free"].get<int64_t>() + after["kv_blocks_cached"].get<int64_t>(),
            before["kv_blocks_total"].get<int64_t>());
  // Far fewer than 900 tokens were generated.
  auto metrics = s.client().Get("/metrics")->body;
  const size_t at = metrics.find("\nkiln_generated_tokens_total ");
  ASSERT_NE(at, std::string::npos);
  EXPECT_LT(std::stod(metrics.substr(at + 29)), 900.0);
}

TEST(Http, ClientDisconnectWhileWaitingForANonStreamingAnswerCancelsIt) {
  Server s;
  ASSERT_TRUE(s.stack);
  auto cli = s.client();
  cli.set_read_timeout(0, 300000);  // gives up after 0.3 s and closes the connection
  auto r = cli.Post("/v1/chat/completions", chat("Go on forever", {{"max_tokens", 900}, {"ignore_eos", true}}).dump(),
                    "application/json");
  EXPECT_FALSE(r);  // timed out
  s.expect_idle_and_whole();
  auto metrics = s.client().Get("/metrics")->body;
  const size_t at = metrics.find("\nkiln_generated_tokens_total ");
  ASSERT_NE(at, std::string::npos);
  EXPECT_LT(std::stod(metrics.substr(at + 29)), 900.0);
}

// Host fallbacks are exported per backend and operand count, and a recorded one moves its line.
TEST(Http, MetricsCountHostFallbacksPerBackendAndArity) {
  Server s;
  ASSERT_TRUE(s.stack);
  auto count = [&](const std::string& labels) {
    const std::string body = s.client().Get("/metrics")->body, key = "\nkiln_host_fallbacks_total{" + labels + "} ";
    const size_t at = body.find(key);
    return at == std::string::npos ? -1.0 : std::stod(body.substr(at + key.size()));
  };
  for (const char* b : {"cpu", "cuda", "vulkan", "rocm", "metal"})
    for (int a = 1; a <= 3; ++a)
      EXPECT_GE(count("backend=\"" + std::string(b) + "\",arity=\"" + std::to_string(a) + "\""), 0.0) << b << a;
  const double before = count("backend=\"vulkan\",arity=\"2\"");
  FallbackCounters::global().record("vulkan", 2);
  EXPECT_EQ(count("backend=\"vulkan\",arity=\"2\""), before + 1);
}

TEST(Http, FullQueueAnswers503WithRetryAfter) {
  KilnConfig c = test_config();
  c.server.max_decode_batch = 1;
  c.server.max_queued_requests = 1;
  Server s(c);
  ASSERT_TRUE(s.stack);
  // One long request runs, one waits; the third finds the queue full.
  std::vector<std::thread> clients;
  std::atomic<int> ok{0};
  for (int i = 0; i < 2; ++i) {
    clients.emplace_back([&] {
      auto r = s.post("/v1/chat/completions", chat("long", {{"max_tokens", 400}, {"ignore_eos", true}}).dump());
      if (r && r->status == 200) ++ok;
      else ADD_FAILURE() << (r ? std::to_string(r->status) + " " + r->body : "no response");
    });
    for (int w = 0; w < 1000; ++w) {  // until the engine has it
      json h = s.health()["engine"];
      if (h["running"].get<int>() + h["waiting"].get<int>() == i + 1) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
  }
  auto r = s.post("/v1/chat/completions", chat("third").dump());
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 503) << r->body;
  EXPECT_FALSE(r->get_header_value("Retry-After").empty());
  for (auto& t : clients) t.join();
  EXPECT_EQ(ok.load(), 2);
  s.expect_idle_and_whole();
}

TEST(Http, MetricsCountRequestsTokensAndLatency) {
  Server s;
  ASSERT_TRUE(s.stack);
  s.post_json("/v1/chat/completions", chat("one", {{"max_tokens", 5}}));
  s.post_json("/v1/chat/completions", chat("two", {{"max_tokens", 5}, {"temperature", -3}}), 400);
  const std::string m = s.metrics_once_they_show("kiln_requests_total{route=\"/v1/chat/completions\",status=\"200\"} 1");
  for (const char* want : {"kiln_requests_total{route=\"/v1/chat/completions\",status=\"200\"} 1",
                           "kiln_requests_total{route=\"/v1/chat/completions\",status=\"400\"} 1",
                           "kiln_generated_tokens_total 5", "kiln_time_to_first_token_seconds_count 1",
                           "kiln_inter_token_latency_seconds_count 4", "kiln_kv_blocks{state=\"free\"}",
                           "kiln_prefix_cache_misses_total 1", "kiln_queue_depth 0",
                           "kiln_decode_replays_total 0"})  // the CPU runs every step eagerly
    EXPECT_NE(m.find(want), std::string::npos) << want << " missing from\n" << m;
}

TEST(Http, MaintenanceProfileRefusesInference) {
  KilnConfig c = test_config();
  c.server.profile = "maintenance";
  Server s(c);
  ASSERT_TRUE(s.stack);
  auto r = s.post("/v1/chat/completions", chat("hi").dump());
  EXPECT_EQ(r->status, 503);
  EXPECT_NE(r->body.find("maintenance"), std::string::npos);
  EXPECT_EQ(s.health()["status"], "maintenance");
}

// A LoRA adapter of the tiny-chat model with every B drawn large (init gives B = 0, which would
// change nothing), saved in PEFT's layout to `dir`.
void write_adapter(const std::string& dir, uint64_t seed) {
  auto backend = create_backend("cpu").value();
  const ModelConfig mc = preset_config("tiny-chat").value();
  LoraConfig cfg;
  cfg.rank = 4;
  cfg.alpha = 8;
  for (int t = 0; t < kLoraTargetCount; ++t) cfg.targets.push_back(static_cast<LoraTarget>(t));
  LoraAdapter a = LoraAdapter::init(cfg, mc, seed, backend->storage()).value();
  for (int64_t l = 0; l < a.num_layers(); ++l)
    for (int t = 0; t < kLoraTargetCount; ++t) {
      LoraFactors& f = a.factors(l, static_cast<LoraTarget>(t));
      if (!f.defined()) continue;
      Tensor b = testing::random_tensor(f.b.shape(), static_cast<uint32_t>(seed * 1000 + l * 10 + t), 1.f);
      ASSERT_TRUE(backend->storage().copy_from_host(b, f.b).ok());
    }
  ASSERT_TRUE(a.save(dir, backend->storage()).ok());
}

std::string content_of(const json& r) { return r["choices"][0]["message"]["content"].get<std::string>(); }

TEST(Http, AdaptersLoadListServeUnloadAndDelete) {
  Server s;
  ASSERT_TRUE(s.stack);
  const fs::path dir = fs::path(model_dir()) / "adapters" / "style";
  write_adapter(dir.string(), 11);
  json loaded = s.post_json("/v1/adapters/load", {{"name", "style"}});  // path: <model dir>/adapters/style
  EXPECT_EQ(loaded["name"], "style");
  EXPECT_EQ(loaded["revision"], 1);
  EXPECT_EQ(loaded["path"], dir.string());
  EXPECT_EQ(loaded["rank"], 4);
  EXPECT_EQ(loaded["alpha"], 8.0);
  EXPECT_EQ(loaded["targets"].size(), 10u);
  json list = json::parse(s.client().Get("/v1/adapters")->body);
  ASSERT_EQ(list["data"].size(), 1u);
  EXPECT_EQ(list["data"][0]["name"], "style");
  EXPECT_EQ(list["data"][0]["revision"], 1);

  const json ask = chat("Tell me about the sea.", {{"ignore_eos", true}});
  auto with = [&ask](json extra) {
    json b = ask;
    for (auto& [k, v] : extra.items()) b[k] = v;
    return b;
  };
  const std::string base = content_of(s.post_json("/v1/chat/completions", ask));
  const std::string adapted = content_of(s.post_json("/v1/chat/completions", with({{"adapter", "style"}})));
  EXPECT_NE(adapted, base);
  EXPECT_EQ(content_of(s.post_json("/v1/chat/completions", with({{"adapters", {{{"name", "style"}, {"scale", 1}}}}}))),
            adapted);
  EXPECT_EQ(content_of(s.post_json("/v1/chat/completions", ask)), base);

  // A reload is the next revision; a second name can load the same files from a given path.
  EXPECT_EQ(s.post_json("/v1/adapters/load", {{"name", "style"}})["revision"], 2);
  EXPECT_EQ(s.post_json("/v1/adapters/load", {{"name", "copy"}, {"path", dir.string()}})["path"], dir.string());
  EXPECT_EQ(json::parse(s.client().Get("/v1/adapters")->body)["data"].size(), 2u);

  EXPECT_EQ(s.post_json("/v1/adapters/unload", {{"name", "style"}})["unloaded"], true);
  json gone = s.post_json("/v1/chat/completions", with({{"adapter", "style"}}), 404);
  EXPECT_EQ(gone["error"]["param"], "adapter");
  EXPECT_NE(gone["error"]["message"].get<std::string>().find("'style'"), std::string::npos) << gone.dump();
  json gone2 = s.post_json("/v1/chat/completions", with({{"adapters", {{{"name", "copy"}}, {{"name", "style"}}}}}), 404);
  EXPECT_EQ(gone2["error"]["param"], "adapters[1].name");
  json again = s.post_json("/v1/adapters/unload", {{"name", "style"}}, 404);
  EXPECT_EQ(again["error"]["param"], "name");

  // DELETE removes the directory (whether or not the adapter is loaded), then knows nothing of it.
  auto del = s.client().Delete("/v1/adapters/style");
  ASSERT_TRUE(del);
  EXPECT_EQ(del->status, 200) << del->body;
  EXPECT_FALSE(fs::exists(dir));
  auto del2 = s.client().Delete("/v1/adapters/style");
  ASSERT_TRUE(del2);
  EXPECT_EQ(del2->status, 404);
  EXPECT_EQ(json::parse(del2->body)["error"]["param"], "name");
  // "copy" was loaded from the deleted files and stays loaded: weights live in memory.
  EXPECT_EQ(content_of(s.post_json("/v1/chat/completions", with({{"adapter", "copy"}}))), adapted);
  s.expect_idle_and_whole();
}

TEST(Http, AdapterRoutesRefuseBadNamesAndPaths) {
  Server s;
  ASSERT_TRUE(s.stack);
  struct Bad {
    json body;
    int status;
    std::string param;
  };
  const fs::path adapters = fs::path(model_dir()) / "adapters";
  const fs::path broken = adapters / "broken-adapter";
  const fs::path empty = adapters / "empty-folder";
  fs::create_directories(empty);
  fs::create_directories(broken);
  std::ofstream(broken / "adapter_config.json") << "{ not json";
  const std::vector<Bad> loads = {
      {json::object(), 400, "name"},
      {{{"name", ""}}, 400, "name"},
      {{{"name", "a/b"}}, 400, "name"},
      {{{"name", ".."}}, 400, "name"},
      {{{"name", std::string(65, 'x')}}, 400, "name"},
      {{{"name", 5}}, 400, "name"},
      {{{"name", "ok"}, {"colour", "red"}}, 400, "colour"},
      {{{"name", "absent"}}, 404, "path"},  // no <adapter_dir>/absent
      {{{"name", "ok"}, {"path", "/nonexistent/kiln/adapter"}}, 400, "path"},  // outside model.adapter_dir
      {{{"name", "ok"}, {"path", model_dir()}}, 400, "path"},                  // outside model.adapter_dir
      {{{"name", "ok"}, {"path", "../"}}, 400, "path"},
      {{{"name", "ok"}, {"path", "missing-folder"}}, 404, "path"},              // inside, nothing there
      {{{"name", "ok"}, {"path", empty.string()}}, 404, "path"},  // a directory without adapter_config.json
      {{{"name", "ok"}, {"path", "broken-adapter"}}, 400, "path"},  // an adapter_config.json that is not JSON
      {{{"name", "post-eval.x"}}, 400, "name"},                      // a name Kiln keeps for itself
      {{{"name", "x.checkpoints"}}, 400, "name"},
      {{{"name", "-x"}}, 400, "name"},
  };
  for (const auto& b : loads) {
    json e = s.post_json("/v1/adapters/load", b.body, b.status);
    EXPECT_EQ(e["error"]["param"], b.param) << b.body.dump() << " -> " << e.dump();
  }
  EXPECT_EQ(s.post_json("/v1/adapters/unload", {{"name", "ghost"}}, 404)["error"]["param"], "name");
  EXPECT_EQ(s.post_json("/v1/adapters/unload", {{"name", "a b"}}, 400)["error"]["param"], "name");
  EXPECT_EQ(s.post("/v1/adapters/unload", "[1]")->status, 400);
  for (const char* path : {"/v1/adapters/bad%20name", "/v1/adapters/.."}) {
    auto r = s.client().Delete(path);
    ASSERT_TRUE(r) << path;
    EXPECT_EQ(r->status, 400) << path << " -> " << r->body;
    EXPECT_EQ(json::parse(r->body)["error"]["param"], "name") << r->body;
  }
  fs::remove_all(broken);
  fs::remove_all(empty);
  auto r = s.client().Delete("/v1/adapters/never-there");
  EXPECT_EQ(r->status, 404);
  EXPECT_TRUE(fs::exists(model_dir()));
  EXPECT_EQ(json::parse(s.client().Get("/v1/adapters")->body)["data"].size(), 0u);
}

}  // namespace
}  // namespace kiln
