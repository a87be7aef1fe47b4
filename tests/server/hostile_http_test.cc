// Hostile requests against a live server (CPU, the tiny-chat model, an API key, small limits):
// each case names the rule it checks, sends what a hostile or broken client sends (raw bytes where
// a client library would refuse to), and expects the status and the error's code or field. After
// all of them the server is healthy and answers a normal chat request, and a file planted outside
// the data folders was never opened (inotify watches it while every path field is tried).
#include <gtest/gtest.h>
#include <sys/inotify.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <thread>

#include <nlohmann/json.hpp>

#include "model/init.h"
#include "raw_http.h"
#include "server/serving_stack.h"
#include "tokenizer/qwen3_fixture.h"

namespace kiln {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;
using Headers = std::vector<std::pair<std::string, std::string>>;

constexpr const char* kKey = "hostile-test-key-7f3a";

struct Env {
  fs::path root;
  fs::path outside;  // the planted file no request may open
  std::unique_ptr<ServingStack> stack;
  int port() const { return stack->port(); }
};

Env& env() {
  static Env* e = [] {
    auto* e = new Env;
    e->root = fs::temp_directory_path() / ("kiln-hostile-" + std::to_string(::getpid()));
    fs::remove_all(e->root);
    const fs::path model = e->root / "model";
    InitOptions o;
    o.quiet = true;
    EXPECT_TRUE(write_random_checkpoint(preset_config("tiny-chat").value(), model.string(), o).ok());
    for (const char* f : {"tokenizer.json", "tokenizer_config.json"})
      fs::copy_file(testing::qwen3_dir() + "/" + f, model / f);
    e->outside = e->root / "outside-secret.jsonl";
    std::ofstream(e->outside) << json({{"messages", {{{"role", "user"}, {"content", "hi"}}, {{"role", "assistant"}, {"content", "yo"}}}}}).dump() << "\n";
    const fs::path data = e->root / "state" / "datasets";
    fs::create_directories(data);
    std::ofstream(data / "good.jsonl") << json({{"messages", {{{"role", "user"}, {"content", "hi"}}, {{"role", "assistant"}, {"content", "yo"}}}}}).dump() << "\n";
    fs::create_symlink(e->outside, data / "link-out.jsonl");
    ::mkfifo((data / "fifo.jsonl").c_str(), 0600);
    KilnConfig c;
    c.model.path = model.string();
    c.model.backend = "cpu";
    c.model.max_context = 512;
    c.server.port = 0;
    c.server.state_dir = (e->root / "state").string();
    c.server.api_key = kKey;
    c.server.allowed_origins = "https://app.example";
    c.server.allowed_hosts = ".example.org";
    c.server.max_body_bytes = 1 << 20;
    c.server.max_queued_requests = 16;
    c.server.max_decode_batch = 8;
    c.memory.kv_blocks = 64;
    c.training.max_dataset_bytes = 256 << 10;
    c.training.max_job_tokens = 5000;
    auto s = ServingStack::start(c);
    EXPECT_TRUE(s.ok()) << s.status().to_string();
    if (s.ok()) e->stack = std::move(*s);
    std::atexit([] { fs::remove_all(fs::temp_directory_path() / ("kiln-hostile-" + std::to_string(::getpid()))); });
    return e;
  }();
  return *e;
}

Headers with_defaults(Headers extra, bool auth = true, bool host = true) {
  Headers h;
  if (host) h.emplace_back("Host", "127.0.0.1");
  if (auth) h.emplace_back("Authorization", std::string("Bearer ") + kKey);
  for (auto& kv : extra) h.push_back(std::move(kv));
  return h;
}

// A JSON request with correct framing.
testing::RawResponse json_request(const std::string& method, const std::string& path, const std::string& body,
                                  Headers extra = {}, bool auth = true) {
  Headers h = with_defaults(std::move(extra), auth);
  bool typed = false;
  for (const auto& [k, v] : h) typed = typed || k == "Content-Type";
  if (!typed) h.emplace_back("Content-Type", "application/json");
  h.emplace_back("Content-Length", std::to_string(body.size()));
  return testing::raw_exchange(env().port(), method, path, h, body);
}

std::string chat_body(const std::string& content = "hello") {
  return json({{"messages", {{{"role", "user"}, {"content", content}}}}, {"max_tokens", 2}, {"temperature", 0}}).dump();
}

std::string nested_objects(int depth) {
  std::string s;
  for (int i = 0; i < depth; ++i) s += "{\"a\":";
  s += "1";
  for (int i = 0; i < depth; ++i) s += "}";
  return s;
}

std::string nested(const std::string& open, const std::string& close, int depth) {
  std::string s;
  for (int i = 0; i < depth; ++i) s += open;
  for (int i = 0; i < depth; ++i) s += close;
  return s;
}

struct Case {
  std::string rule;
  std::function<testing::RawResponse()> send;
  int status;
  std::string expect;  // in the error's code or param, or (for 2xx) in the body; "" : anything
};

void check(const Case& c) {
  const testing::RawResponse r = c.send();
  EXPECT_EQ(r.status, c.status) << c.rule << "\n" << r.body;
  if (c.expect.empty()) return;
  if (c.status >= 400) {
    const json e = json::parse(r.body, nullptr, false);
    ASSERT_TRUE(e.is_object() && e.contains("error")) << c.rule << ": not an OpenAI error: " << r.body;
    const std::string code = e["error"].value("code", json()).is_string() ? e["error"]["code"].get<std::string>() : "";
    const std::string param = e["error"]["param"].is_string() ? e["error"]["param"].get<std::string>() : "";
    EXPECT_TRUE(code == c.expect || param == c.expect) << c.rule << ": code '" << code << "', param '" << param << "'\n" << r.body;
  } else {
    EXPECT_NE(r.body.find(c.expect), std::string::npos) << c.rule << "\n" << r.body;
  }
}

// Watches the planted file for any open or read while it lives.
class OpenWatch {
 public:
  explicit OpenWatch(const fs::path& file) {
    fd_ = inotify_init1(IN_NONBLOCK);
    wd_ = inotify_add_watch(fd_, file.c_str(), IN_OPEN | IN_ACCESS);
  }
  ~OpenWatch() { ::close(fd_); }
  bool armed() const { return fd_ >= 0 && wd_ >= 0; }
  int events() const {
    char buf[4096];
    int n = 0;
    for (ssize_t got; (got = ::read(fd_, buf, sizeof buf)) > 0;)
      for (ssize_t off = 0; off < got; off += sizeof(inotify_event) + reinterpret_cast<inotify_event*>(buf + off)->len) ++n;
    return n;
  }

 private:
  int fd_ = -1, wd_ = -1;
};

std::vector<Case> guard_cases() {
  auto get = [](const std::string& path, Headers extra = {}, bool auth = true) {
    return [=] { return testing::raw_exchange(env().port(), "GET", path, with_defaults(extra, auth)); };
  };
  auto post = [](const std::string& path, const std::string& body, Headers extra = {}, bool auth = true) {
    return [=] { return json_request("POST", path, body, extra, auth); };
  };
  auto raw = [](const std::string& method, const std::string& path, Headers headers, std::string body = "") {
    return [=] { return testing::raw_exchange(env().port(), method, path, headers, body); };
  };
  const std::string ok_chat = chat_body();
  const Headers host = {{"Host", "127.0.0.1"}};
  const std::string auth = std::string("Bearer ") + kKey;
  return {
      // The API key.
      {"no Authorization header: 401", get("/v1/models", {}, false), 401, "invalid_api_key"},
      {"a wrong key: 401", get("/v1/models", {{"Authorization", "Bearer wrong"}}, false), 401, "invalid_api_key"},
      {"the key with a byte more: 401", get("/v1/models", {{"Authorization", auth + "x"}}, false), 401, "invalid_api_key"},
      {"the key as a prefix: 401", get("/v1/models", {{"Authorization", auth.substr(0, auth.size() - 1)}}, false), 401, "invalid_api_key"},
      {"Basic instead of Bearer: 401", get("/v1/models", {{"Authorization", std::string("Basic ") + kKey}}, false), 401, "invalid_api_key"},
      {"Bearer without a token: 401", get("/v1/models", {{"Authorization", "Bearer"}}, false), 401, "invalid_api_key"},
      {"the scheme in lower case is accepted", get("/v1/models", {{"Authorization", std::string("bearer ") + kKey}}, false), 200, "\"object\":\"list\""},
      {"/health needs no key", get("/health", {}, false), 200, "ready"},
      {"the dashboard's files need no key", get("/ui/", {}, false), 200, ""},
      {"/metrics needs the key unless metrics_public", get("/metrics", {}, false), 401, "invalid_api_key"},
      {"/v1/config needs the key", get("/v1/config", {}, false), 401, "invalid_api_key"},
      {"training needs the key", post("/v1/train/sft", "{}", {}, false), 401, "invalid_api_key"},
      {"adapter deletion needs the key", raw("DELETE", "/v1/adapters/x", host), 401, "invalid_api_key"},
      {"a dataset upload needs the key", raw("POST", "/v1/datasets?name=d", {{"Host", "127.0.0.1"}, {"Content-Type", "application/jsonl"}, {"Content-Length", "3"}}, "{}\n"), 401, "invalid_api_key"},
      {"with the key, /metrics answers", get("/metrics"), 200, "kiln_requests_refused_total"},
      // The Host header (DNS rebinding).
      {"Host evil.com: 421", raw("GET", "/v1/models", {{"Host", "evil.com"}, {"Authorization", auth}}), 421, "Host"},
      {"Host evil.com on /health too: 421", raw("GET", "/health", {{"Host", "evil.com"}}), 421, "misdirected_request"},
      {"a suffix that only looks allowed: 421", raw("GET", "/health", {{"Host", "example.org.evil.com"}}), 421, "Host"},
      {"an allowed subdomain", raw("GET", "/health", {{"Host", "api.example.org:443"}}), 200, ""},
      {"localhost with any port", raw("GET", "/health", {{"Host", "localhost:1"}}), 200, ""},
      {"[::1]", raw("GET", "/health", {{"Host", "[::1]:8420"}}), 200, ""},
      // The Origin of state-changing requests (cross-site requests).
      {"a foreign Origin may not POST: 403", post("/v1/adapters/unload", "{\"name\":\"x\"}", {{"Origin", "http://evil.com"}}), 403, "cross_origin_refused"},
      {"Origin null may not POST: 403", post("/v1/train/sft", "{}", {{"Origin", "null"}}), 403, "Origin"},
      {"a foreign Origin may not DELETE: 403", raw("DELETE", "/v1/adapters/x", {{"Host", "127.0.0.1"}, {"Authorization", auth}, {"Origin", "http://evil.com"}}), 403, "cross_origin_refused"},
      {"the server's own Origin may POST", post("/v1/adapters/unload", "{\"name\":\"x\"}", {{"Origin", "http://127.0.0.1"}}), 404, "adapter_not_found"},
      {"a configured Origin may POST", post("/v1/adapters/unload", "{\"name\":\"x\"}", {{"Origin", "https://app.example"}}), 404, "adapter_not_found"},
      {"a foreign Origin may read (the browser keeps the answer from it)", get("/v1/models", {{"Origin", "http://evil.com"}}), 200, ""},
      {"a preflight from a configured Origin: 204", raw("OPTIONS", "/v1/chat/completions", {{"Host", "127.0.0.1"}, {"Origin", "https://app.example"}, {"Access-Control-Request-Method", "POST"}}), 204, ""},
      {"a preflight from a foreign Origin is not answered", raw("OPTIONS", "/v1/chat/completions", {{"Host", "127.0.0.1"}, {"Origin", "http://evil.com"}, {"Access-Control-Request-Method", "POST"}}), 401, ""},
      // The body's framing, size and type.
      {"text/plain: 415", post("/v1/chat/completions", ok_chat, {{"Content-Type", "text/plain"}}), 415, "Content-Type"},
      {"a form: 415", post("/v1/chat/completions", ok_chat, {{"Content-Type", "application/x-www-form-urlencoded"}}), 415, "unsupported_media_type"},
      {"multipart: 415", post("/v1/chat/completions", ok_chat, {{"Content-Type", "multipart/form-data; boundary=x"}}), 415, "Content-Type"},
      {"no Content-Type: 415", raw("POST", "/v1/chat/completions", {{"Host", "127.0.0.1"}, {"Authorization", auth}, {"Content-Length", std::to_string(ok_chat.size())}}, ok_chat), 415, "Content-Type"},
      {"JSON with a charset parameter is JSON", post("/v1/chat/completions", ok_chat, {{"Content-Type", "application/json; charset=utf-8"}}), 200, "chat.completion"},
      {"a gzip body (a decompression bomb's carrier): 415", post("/v1/chat/completions", ok_chat, {{"Content-Encoding", "gzip"}}), 415, "Content-Encoding"},
      {"a chunked JSON body: 411", raw("POST", "/v1/chat/completions", {{"Host", "127.0.0.1"}, {"Authorization", auth}, {"Content-Type", "application/json"}, {"Transfer-Encoding", "chunked"}}, "5\r\nhello\r\n0\r\n\r\n"), 411, "length_required"},
      {"POST without Content-Length: 411", raw("POST", "/v1/adapters/unload", {{"Host", "127.0.0.1"}, {"Authorization", auth}}), 411, "Content-Length"},
      {"Content-Length with Transfer-Encoding: 400", raw("POST", "/v1/chat/completions", {{"Host", "127.0.0.1"}, {"Authorization", auth}, {"Content-Type", "application/json"}, {"Content-Length", "5"}, {"Transfer-Encoding", "chunked"}}, "0\r\n\r\n"), 400, "invalid_framing"},
      {"two Content-Lengths: 400", raw("POST", "/v1/chat/completions", {{"Host", "127.0.0.1"}, {"Authorization", auth}, {"Content-Type", "application/json"}, {"Content-Length", "2"}, {"Content-Length", "3"}}, "{}"), 400, "invalid_framing"},
      {"a Content-Length that is not a number: 400", raw("POST", "/v1/chat/completions", {{"Host", "127.0.0.1"}, {"Authorization", auth}, {"Content-Type", "application/json"}, {"Content-Length", "abc"}}), 400, "Content-Length"},
      {"a negative Content-Length: 400", raw("POST", "/v1/chat/completions", {{"Host", "127.0.0.1"}, {"Authorization", auth}, {"Content-Type", "application/json"}, {"Content-Length", "-5"}}), 400, "Content-Length"},
      {"a body over server.max_body_bytes: 413", post("/v1/chat/completions", chat_body(std::string(1100 << 10, 'a'))), 413, "body_too_large"},
      {"a Content-Length of a petabyte: 413", raw("POST", "/v1/chat/completions", {{"Host", "127.0.0.1"}, {"Authorization", auth}, {"Content-Type", "application/json"}, {"Content-Length", "1125899906842624"}}), 413, "body_too_large"},
      {"JSON to the archive route: 415", post("/v1/adapters/upload?name=x", "{}"), 415, "Content-Type"},
      {"text/plain to the dataset route: 415", post("/v1/datasets?name=x", "{}\n", {{"Content-Type", "text/plain"}}), 415, "Content-Type"},
      // Hostile JSON.
      {"the 400 KB chat_template_kwargs nesting that crashed the server: 400",
       post("/v1/chat/completions", "{\"messages\": [{\"role\": \"user\", \"content\": \"hi\"}], \"chat_template_kwargs\": {\"x\": " + nested("[", "]", 200000) + "}}"),
       400, "invalid_value"},
      {"65 levels of nesting inside the body limit: 400",
       post("/v1/chat/completions", "{\"messages\": [{\"role\": \"user\", \"content\": \"hi\"}], \"chat_template_kwargs\": {\"x\": " + nested("[", "]", 64) + "}}"),
       400, "invalid_value"},
      {"nested objects in a message: 400", post("/v1/chat/completions", "{\"messages\": [{\"role\": \"user\", \"content\": " + nested_objects(70) + "}]}"), 400, "invalid_value"},
      {"invalid JSON: 400", post("/v1/chat/completions", "{\"messages\": [}"), 400, "invalid_value"},
      {"a JSON array body: 400", post("/v1/chat/completions", "[1, 2]"), 400, ""},
      {"a JSON string body: 400", post("/v1/chat/completions", "\"hi\""), 400, ""},
      {"an empty body: 400", post("/v1/chat/completions", ""), 400, ""},
      {"invalid UTF-8 in a string: 400", post("/v1/chat/completions", "{\"messages\": [{\"role\": \"user\", \"content\": \"\xff\xfe\"}]}"), 400, ""},
      {"NaN is not JSON: 400", post("/v1/chat/completions", "{\"messages\": [], \"temperature\": NaN}"), 400, ""},
      {"a number past double: 400", post("/v1/chat/completions", "{\"messages\": [{\"role\": \"user\", \"content\": \"x\"}], \"temperature\": 1e999}"), 400, ""},
      {"an unknown field is named: 400", post("/v1/chat/completions", "{\"messages\": [{\"role\": \"user\", \"content\": \"x\"}], \"evil\": 1}"), 400, "evil"},
      // Bounded work per request.
      {"n over 16: 400", post("/v1/chat/completions", json({{"messages", {{{"role", "user"}, {"content", "x"}}}}, {"n", 17}}).dump()), 400, "n"},
      {"65 stop token ids: 400", post("/v1/chat/completions", json({{"messages", {{{"role", "user"}, {"content", "x"}}}}, {"stop_token_ids", std::vector<int>(65, 1)}}).dump()), 400, "stop_token_ids"},
      {"9 stacked adapters: 400", post("/v1/chat/completions", json({{"messages", {{{"role", "user"}, {"content", "x"}}}}, {"adapters", std::vector<json>(9, json{{"name", "a"}})}}).dump()), 400, "adapters"},
      {"129 tools: 400", post("/v1/chat/completions", json({{"messages", {{{"role", "user"}, {"content", "x"}}}}, {"tools", std::vector<json>(129, json{{"type", "function"}, {"function", {{"name", "f"}}}})}}).dump()), 400, "tools"},
      {"17 stop strings: 400", post("/v1/chat/completions", json({{"messages", {{{"role", "user"}, {"content", "x"}}}}, {"stop", std::vector<std::string>(17, "a")}}).dump()), 400, "stop"},
      {"top_logprobs over 20: 400", post("/v1/completions", json({{"prompt", "x"}, {"logprobs", 21}}).dump()), 400, "logprobs"},
      {"max_tokens past the context: 400", post("/v1/completions", json({{"prompt", "x"}, {"max_tokens", 100000}}).dump()), 400, "max_tokens"},
      {"prompts x n past the queue: 400", post("/v1/completions/batch", json({{"prompts", std::vector<std::string>(5, "x")}, {"n", 4}}).dump()), 400, "prompts"},
      {"a token id outside the vocabulary: 400", post("/v1/completions", json({{"prompt", {1, 2, 99999999}}}).dump()), 400, "prompt"},
      {"17 merge sources: 400", post("/v1/adapters/merge", json({{"sources", std::vector<json>(17, json{{"name", "a"}})}, {"method", "concat"}, {"output_name", "m"}}).dump()), 400, "sources"},
      {"a merge rank past the backend's: 400", post("/v1/adapters/merge", json({{"sources", {{{"name", "a"}}}}, {"method", "ties"}, {"output_name", "m"}, {"rank", 100000}}).dump()), 400, "rank"},
      {"epochs past training.max_job_tokens: 400", post("/v1/train/sft", json({{"dataset_path", "good.jsonl"}, {"config", {{"epochs", 10000}}}}).dump()), 400, "config.epochs"},
      // Names: one rule, and Kiln's own folders reserved.
      {"an adapter name with a slash: 400", post("/v1/adapters/load", "{\"name\": \"a/b\"}"), 400, "name"},
      {"an adapter name starting with a dot: 400", post("/v1/adapters/load", "{\"name\": \".staging-x\"}"), 400, "name"},
      {"a checkpoint folder's name: 400", post("/v1/adapters/load", "{\"name\": \"job.checkpoints\"}"), 400, "name"},
      {"output_name kept for the post-training eval: 400", post("/v1/train/sft", json({{"dataset_path", "good.jsonl"}, {"config", {{"output_name", "post-eval.x"}}}}).dump()), 400, "config.output_name"},
      {"a merge output named for checkpoints: 400", post("/v1/adapters/merge", json({{"sources", {{{"name", "a"}}}}, {"method", "concat"}, {"output_name", "x.checkpoints"}}).dump()), 400, "output_name"},
      {"a merge source named '..': 400", post("/v1/adapters/merge", json({{"sources", {{{"name", ".."}}}}, {"method", "concat"}, {"output_name", "m"}}).dump()), 400, "sources[0].name"},
      {"a dataset name with '..': 400", post("/v1/datasets?name=..%2Fx", "{}\n", {{"Content-Type", "application/jsonl"}}), 400, "name"},
      {"a suite name starting with '-': 400", post("/v1/eval/suites", json({{"name", "-x"}, {"examples", {{{"messages", {{{"role", "user"}, {"content", "q"}}}}, {"expected", "a"}}}}}).dump()), 400, "name"},
      {"a download name with an encoded slash is no route: 404", get("/v1/adapters/..%2F..%2Fetc/download"), 404, "not_found"},
      {"a dataset deletion out of the folder is no route: 404", raw("DELETE", "/v1/datasets/..%2Foutside-secret.jsonl", {{"Host", "127.0.0.1"}, {"Authorization", auth}}), 404, "not_found"},
      {"a dataset deletion of a staging file: 400", raw("DELETE", "/v1/datasets/.staging-x", {{"Host", "127.0.0.1"}, {"Authorization", auth}}), 400, "name"},
      // Methods and routes.
      {"an unknown route: 404", get("/v1/nothing-here"), 404, "not_found"},
      {"PUT on a POST route is not routed", [=] { return json_request("PUT", "/v1/chat/completions", ok_chat); }, 404, ""},
      {"a request line over 8 KB: 414", get("/v1/models?x=" + std::string(9000, 'a')), 414, ""},
      {"dot segments do not reach files outside /ui/", get("/ui/../../../../etc/passwd"), 404, ""},
  };
}

TEST(HostileHttp, EveryRuleAnswersItsStatusNamingTheFieldAndTheServerStaysUp) {
  ASSERT_TRUE(env().stack);
  const std::vector<Case> cases = guard_cases();
  EXPECT_GE(cases.size(), 60u);
  for (const Case& c : cases) {
    SCOPED_TRACE(c.rule);
    check(c);
  }
  const auto health = testing::raw_exchange(env().port(), "GET", "/health", {{"Host", "127.0.0.1"}});
  EXPECT_EQ(health.status, 200) << health.body;
  const auto chat = json_request("POST", "/v1/chat/completions", chat_body());
  EXPECT_EQ(chat.status, 200) << chat.body;
  EXPECT_NE(chat.body.find("\"choices\""), std::string::npos) << chat.body;
}

// Every path a client may name is confined to Kiln's folders: the planted file is tried through
// each path field, by absolute path, by '..', by a link, and none of them opens it.
TEST(HostileHttp, NoPathFieldOpensAFileOutsideTheDataFolders) {
  ASSERT_TRUE(env().stack);
  OpenWatch watch(env().outside);
  ASSERT_TRUE(watch.armed());
  const std::string outside = env().outside.string();
  const std::vector<std::string> ways = {outside, "../" + env().outside.filename().string(), "link-out.jsonl", "/dev/zero", "fifo.jsonl",
                                         "/proc/self/environ"};
  for (const std::string& p : ways) {
    SCOPED_TRACE(p);
    for (const char* route : {"/v1/train/sft", "/v1/train/grpo", "/v1/eval/synthesize"}) {
      json body = {{"dataset_path", p}};
      if (std::string(route) == "/v1/eval/synthesize") body["name"] = "s";
      const auto r = json_request("POST", route, body.dump());
      EXPECT_EQ(r.status, 400) << route << ": " << r.body;
      EXPECT_EQ(json::parse(r.body, nullptr, false)["error"]["param"], "dataset_path") << route << ": " << r.body;
    }
    const auto load = json_request("POST", "/v1/adapters/load", json({{"name", "x"}, {"path", p}}).dump());
    EXPECT_TRUE(load.status == 400 || load.status == 404) << load.body;
    EXPECT_EQ(json::parse(load.body, nullptr, false)["error"]["param"], "path") << load.body;
  }
  EXPECT_EQ(watch.events(), 0) << outside << " was opened";
  // And the same job inside the folder is admitted: the rule is the folder, not the field.
  const auto ok = json_request("POST", "/v1/train/sft", json({{"dataset_path", "good.jsonl"}, {"config", {{"epochs", 1}, {"lora_rank", 2}, {"output_name", "inside"}}}}).dump());
  EXPECT_EQ(ok.status, 200) << ok.body;
}

// A refused body is never read as the next request on its connection: a refusal with a small body
// drains it and keeps the connection; one with a body it does not read closes the connection.
TEST(HostileHttp, ARefusedBodyIsNeverReadAsTheNextRequest) {
  ASSERT_TRUE(env().stack);
  const std::string smuggled = "GET /v1/models HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer " + std::string(kKey) + "\r\n\r\n";
  {  // 415 with a small body sent after the headers: drained, the connection stays usable.
    testing::RawConnection c(env().port());
    ASSERT_TRUE(c.send("POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer " + std::string(kKey) +
                       "\r\nContent-Type: text/plain\r\nContent-Length: " + std::to_string(smuggled.size()) + "\r\n\r\n"));
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    c.send(smuggled);
    const auto first = c.read_response();
    EXPECT_EQ(first.status, 415);
    EXPECT_FALSE(first.closed);
    ASSERT_TRUE(c.send("GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"));
    const auto second = c.read_response();
    EXPECT_EQ(second.status, 200);
    EXPECT_NE(second.body.find("\"status\""), std::string::npos) << "the next answer is /health's, not /v1/models': " << second.body;
  }
  {  // 411 for a chunked body: not read, so the connection closes after the answer.
    testing::RawConnection c(env().port());
    ASSERT_TRUE(c.send("POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer " + std::string(kKey) +
                       "\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n"));
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    char size[16];
    std::snprintf(size, sizeof size, "%zx\r\n", smuggled.size());
    c.send(size + smuggled + "\r\n0\r\n\r\n");
    const auto first = c.read_response();
    EXPECT_EQ(first.status, 411);
    EXPECT_TRUE(first.closed) << "the unread body's bytes must not be taken for a request";
  }
}

// A dataset upload streams to disk within training.max_dataset_bytes, chunked or not; what passes
// the cap or is not JSONL leaves nothing behind.
TEST(HostileHttp, DatasetUploadsAreCappedCheckedAndLeaveNothingWhenRefused) {
  ASSERT_TRUE(env().stack);
  const fs::path data = env().root / "state" / "datasets";
  const std::string line = json({{"messages", {{{"role", "user"}, {"content", "q"}}, {{"role", "assistant"}, {"content", "a"}}}}}).dump() + "\n";
  const Headers jsonl = {{"Content-Type", "application/jsonl"}};
  auto staging_left = [&] {
    for (const auto& e : fs::directory_iterator(data))
      if (e.path().filename().string().rfind(".", 0) == 0) return true;  // a staging leftover
    return false;
  };
  const auto up = json_request("POST", "/v1/datasets?name=small.jsonl", line + line, jsonl);
  ASSERT_EQ(up.status, 200) << up.body;
  EXPECT_EQ(json::parse(up.body)["lines"], 2);
  EXPECT_EQ(json_request("POST", "/v1/datasets?name=small.jsonl", line, jsonl).status, 409);  // exists, no replace
  EXPECT_EQ(json_request("POST", "/v1/datasets?name=small.jsonl&replace=true", line, jsonl).status, 200);
  const auto bad = json_request("POST", "/v1/datasets?name=bad.jsonl", line + "{nope\n", jsonl);
  EXPECT_EQ(bad.status, 400) << bad.body;
  EXPECT_NE(bad.body.find("line 2"), std::string::npos) << bad.body;
  EXPECT_FALSE(fs::exists(data / "bad.jsonl"));
  // Chunked, past the cap: refused mid-stream, and the connection closes.
  testing::RawConnection c(env().port());
  ASSERT_TRUE(c.send("POST /v1/datasets?name=big.jsonl HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer " + std::string(kKey) +
                     "\r\nContent-Type: application/jsonl\r\nTransfer-Encoding: chunked\r\n\r\n"));
  const std::string chunk(64 << 10, ' ');
  char size[16];
  std::snprintf(size, sizeof size, "%zx\r\n", chunk.size());
  for (int i = 0; i < 8 && c.send(size + chunk + "\r\n"); ++i) {
  }
  c.send("0\r\n\r\n");
  const auto big = c.read_response();
  EXPECT_EQ(big.status, 413) << big.body;
  EXPECT_FALSE(fs::exists(data / "big.jsonl"));
  EXPECT_FALSE(staging_left());
  // Listed, used by a job by name, deleted.
  const auto list = testing::raw_exchange(env().port(), "GET", "/v1/datasets", with_defaults({}));
  EXPECT_NE(list.body.find("\"small.jsonl\""), std::string::npos) << list.body;
  EXPECT_EQ(list.body.find("\".staging-"), std::string::npos) << list.body;
  const auto del = testing::raw_exchange(env().port(), "DELETE", "/v1/datasets/small.jsonl", with_defaults({}));
  EXPECT_EQ(del.status, 200) << del.body;
  EXPECT_FALSE(fs::exists(data / "small.jsonl"));
}

}  // namespace
}  // namespace kiln
