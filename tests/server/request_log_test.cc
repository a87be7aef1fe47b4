// The durable request log: rotation into gzip files (read back here with zlib itself), the total
// size cap (oldest deleted first), a writer killed mid-stream leaving every completed row
// readable, and through the HTTP server: off by default, and a streamed chat request logged with
// the text its chunks add up to.
#include <gtest/gtest.h>

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>
#include <zlib.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include <httplib.h>
#include <nlohmann/json.hpp>

#include "model/init.h"
#include "server/request_log.h"
#include "server/request_log_capture.h"
#include "server/serving_stack.h"
#include "tokenizer/qwen3_fixture.h"

namespace kiln {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

std::string fresh_dir(const std::string& name) {
  const fs::path d = fs::temp_directory_path() / ("kiln-reqlog-" + std::to_string(::getpid()) + "-" + name);
  fs::remove_all(d);
  return d.string();
}

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// The test's own decompression (zlib's gz* API), independent of the log's reader.
std::string gunzip_file(const std::string& path) {
  gzFile gz = gzopen(path.c_str(), "rb");
  EXPECT_NE(gz, nullptr) << path;
  if (!gz) return {};
  std::string out;
  char buf[4096];
  int n = 0;
  while ((n = gzread(gz, buf, sizeof buf)) > 0) out.append(buf, static_cast<size_t>(n));
  EXPECT_EQ(n, 0) << path << " is not valid gzip";
  gzclose(gz);
  return out;
}

// Splits on '\n' and parses each complete line; the bytes after the last '\n' are returned apart.
std::vector<json> split_rows(const std::string& text, std::string* tail = nullptr) {
  std::vector<json> rows;
  size_t pos = 0;
  for (size_t nl; (nl = text.find('\n', pos)) != std::string::npos; pos = nl + 1)
    rows.push_back(json::parse(text.substr(pos, nl - pos)));
  if (tail) *tail = text.substr(pos);
  return rows;
}

// Every row of the log folder, oldest first, decompressing rotated files with zlib.
std::vector<json> all_rows(const std::string& dir) {
  std::vector<json> rows;
  for (const auto& f : request_log_files(dir)) {
    const std::string text = f.ends_with(".gz") ? gunzip_file(f) : read_file(f);
    for (auto& r : split_rows(text)) rows.push_back(std::move(r));
  }
  return rows;
}

json row(int i) { return {{"i", i}, {"pad", std::string(80, 'x')}}; }

TEST(RequestLog, RotatesIntoGzipFilesThatHoldEveryRowInOrder) {
  const std::string dir = fresh_dir("rotate");
  RequestLogOptions o;
  o.dir = dir;
  o.max_bytes = 0;  // no cap: every row must survive
  o.rotate_bytes = 1000;
  {
    auto log = RequestLog::open(o);
    ASSERT_TRUE(log.ok()) << log.status().to_string();
    for (int i = 0; i < 60; ++i) ASSERT_TRUE((*log)->append(row(i)));
    (*log)->flush();
    EXPECT_EQ((*log)->rows_written(), 60u);
    EXPECT_EQ((*log)->rows_dropped(), 0u);
  }
  const std::string one = row(59).dump() + "\n";  // the longest row
  auto files = request_log_files(dir);
  ASSERT_GE(files.size(), 5u);  // 60 rows of ~100 bytes over 1000-byte files
  int64_t rotated = 0;
  for (const auto& f : files) {
    if (!f.ends_with(".gz")) {
      EXPECT_EQ(fs::path(f).filename(), "requests.jsonl");
      EXPECT_LE(static_cast<int64_t>(fs::file_size(f)), 1000);
      continue;
    }
    ++rotated;
    EXPECT_TRUE(fs::path(f).filename().string().starts_with("requests-")) << f;
    const std::string raw = gunzip_file(f);
    // Each rotated file stopped short of the threshold by less than one row.
    EXPECT_LE(raw.size(), 1000u) << f;
    EXPECT_GT(raw.size() + one.size(), 1000u) << f;
  }
  EXPECT_GE(rotated, 5);
  std::vector<json> rows = all_rows(dir);
  ASSERT_EQ(rows.size(), 60u);
  for (int i = 0; i < 60; ++i) EXPECT_EQ(rows[static_cast<size_t>(i)]["i"], i);
  // The log's own reader agrees on a rotated file.
  auto mine = read_request_log(files.front());
  ASSERT_TRUE(mine.ok()) << mine.status().to_string();
  EXPECT_EQ(*mine, split_rows(gunzip_file(files.front())));
  fs::remove_all(dir);
}

TEST(RequestLog, CapDeletesTheOldestFilesAndHoldsTheTotal) {
  const std::string dir = fresh_dir("cap");
  RequestLogOptions o;
  o.dir = dir;
  o.max_bytes = 2000;
  o.rotate_bytes = 500;
  const int n = 400;
  {
    auto log = RequestLog::open(o);
    ASSERT_TRUE(log.ok()) << log.status().to_string();
    for (int i = 0; i < n; ++i) {
      ASSERT_TRUE((*log)->append(row(i)));
      if (i % 7 == 0) (*log)->flush();  // the cap must hold between batches too
      if (i % 7 == 0) {
        int64_t total = 0;
        for (const auto& f : request_log_files(dir)) total += static_cast<int64_t>(fs::file_size(f));
        ASSERT_LE(total, 2000) << "after row " << i;
      }
    }
  }
  int64_t total = 0;
  for (const auto& f : request_log_files(dir)) total += static_cast<int64_t>(fs::file_size(f));
  EXPECT_LE(total, 2000);
  // What is left is the newest rows, contiguous, ending with the last one; the oldest are gone.
  std::vector<json> rows = all_rows(dir);
  ASSERT_FALSE(rows.empty());
  EXPECT_GT(rows.front()["i"].get<int>(), 0);
  EXPECT_EQ(rows.back()["i"], n - 1);
  for (size_t k = 1; k < rows.size(); ++k) EXPECT_EQ(rows[k]["i"].get<int>(), rows[k - 1]["i"].get<int>() + 1);
  fs::remove_all(dir);
}

TEST(RequestLog, AFullQueueDropsAndCountsRows) {
  const std::string dir = fresh_dir("drop");
  RequestLogOptions o;
  o.dir = dir;
  o.queue_rows = 4;
  auto log = RequestLog::open(o);
  ASSERT_TRUE(log.ok());
  int accepted = 0;
  for (int i = 0; i < 5000; ++i) accepted += (*log)->append(row(i)) ? 1 : 0;
  (*log)->flush();
  EXPECT_EQ((*log)->rows_dropped() + static_cast<uint64_t>(accepted), 5000u);
  EXPECT_EQ((*log)->rows_written(), static_cast<uint64_t>(accepted));
  EXPECT_GT((*log)->rows_dropped(), 0u);  // 5000 appends outrun a writer that syncs every batch
  auto rows = read_request_log(dir + "/requests.jsonl");
  ASSERT_TRUE(rows.ok());
  EXPECT_EQ(rows->size(), static_cast<size_t>(accepted));
  log->reset();
  fs::remove_all(dir);
}

TEST(RequestLog, AWriterKilledMidStreamLeavesEveryCompleteRowReadable) {
  const std::string dir = fresh_dir("crash");
  const std::string cur = dir + "/requests.jsonl";
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {  // writes rows as fast as it can until killed
    RequestLogOptions o;
    o.dir = dir;
    o.max_bytes = 0;
    o.rotate_bytes = int64_t{1} << 40;
    auto log = RequestLog::open(o);
    if (!log.ok()) ::_exit(3);
    for (int i = 0;; ++i) (*log)->append({{"i", i}, {"pad", std::string(static_cast<size_t>(i % 300), 'y')}});
  }
  for (int k = 0; k < 2000; ++k) {
    std::error_code ec;
    if (fs::exists(cur, ec) && fs::file_size(cur, ec) > 200000) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  ::kill(child, SIGKILL);
  int wstatus = 0;
  ::waitpid(child, &wstatus, 0);
  ASSERT_TRUE(WIFSIGNALED(wstatus)) << "the writer exited by itself: " << wstatus;

  // Whatever the kill left: whole lines, numbered 0.. without a gap.
  std::string text = read_file(cur);
  ASSERT_GT(text.size(), 200000u);
  std::string tail;
  auto rows = split_rows(text, &tail);
  for (size_t k = 0; k < rows.size(); ++k) ASSERT_EQ(rows[k]["i"], static_cast<int>(k));

  // A crash inside a row: cut the file in the middle of its second-to-last line.
  const size_t last_nl = text.rfind('\n', text.size() - tail.size() - 2);
  const size_t cut = last_nl - 17;
  fs::resize_file(cur, cut);
  text.resize(cut);
  std::string cut_tail;
  const auto expect = split_rows(text, &cut_tail);
  ASSERT_FALSE(cut_tail.empty());
  size_t partial = 0;
  auto mine = read_request_log(cur, &partial);
  ASSERT_TRUE(mine.ok()) << mine.status().to_string();
  EXPECT_EQ(*mine, expect);
  EXPECT_EQ(partial, cut_tail.size());

  // Reopening cuts the partial row, and the next row starts a line of its own.
  {
    RequestLogOptions o;
    o.dir = dir;
    o.max_bytes = 0;
    auto log = RequestLog::open(o);
    ASSERT_TRUE(log.ok());
    (*log)->append({{"i", "after"}});
  }
  std::string after_tail;
  auto after = split_rows(read_file(cur), &after_tail);
  EXPECT_TRUE(after_tail.empty());
  ASSERT_EQ(after.size(), expect.size() + 1);
  EXPECT_EQ(after.back()["i"], "after");
  fs::remove_all(dir);
}

TEST(RequestLog, ReassemblesStreamsIntoTheirAnswer) {
  // Hand-written chunks: two choices interleaved, a tool call, reasoning, a usage chunk.
  const std::string sse =
      "data: {\"id\":\"c1\",\"object\":\"chat.completion.chunk\",\"created\":5,\"model\":\"m\",\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":\"\"},\"finish_reason\":null}]}\n\n"
      "data: {\"id\":\"c1\",\"object\":\"chat.completion.chunk\",\"created\":5,\"model\":\"m\",\"choices\":[{\"index\":1,\"delta\":{\"reasoning_content\":\"hm\"},\"finish_reason\":null}]}\n\n"
      "data: {\"id\":\"c1\",\"object\":\"chat.completion.chunk\",\"created\":5,\"model\":\"m\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"Hel\"},\"finish_reason\":null}]}\n\n"
      "data: {\"id\":\"c1\",\"object\":\"chat.completion.chunk\",\"created\":5,\"model\":\"m\",\"choices\":[{\"index\":1,\"delta\":{\"tool_calls\":[{\"index\":0,\"id\":\"t\",\"type\":\"function\",\"function\":{\"name\":\"f\",\"arguments\":\"{}\"}}]},\"finish_reason\":null}]}\n\n"
      "data: {\"id\":\"c1\",\"object\":\"chat.completion.chunk\",\"created\":5,\"model\":\"m\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"lo\"},\"finish_reason\":null}]}\n\n"
      "data: {\"id\":\"c1\",\"object\":\"chat.completion.chunk\",\"created\":5,\"model\":\"m\",\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"length\"}]}\n\n"
      "data: {\"id\":\"c1\",\"object\":\"chat.completion.chunk\",\"created\":5,\"model\":\"m\",\"choices\":[{\"index\":1,\"delta\":{},\"finish_reason\":\"tool_calls\"}]}\n\n"
      "data: {\"id\":\"c1\",\"object\":\"chat.completion.chunk\",\"created\":5,\"model\":\"m\",\"choices\":[],\"usage\":{\"prompt_tokens\":3,\"completion_tokens\":4,\"total_tokens\":7}}\n\n"
      "data: [DONE]\n\n";
  const json want = json::parse(R"({"id":"c1","created":5,"model":"m","object":"chat.completion",
    "choices":[{"index":0,"finish_reason":"length","message":{"role":"assistant","content":"Hello"}},
               {"index":1,"finish_reason":"tool_calls","message":{"role":"assistant","content":"","reasoning_content":"hm",
                "tool_calls":[{"id":"t","type":"function","function":{"name":"f","arguments":"{}"}}]}}],
    "usage":{"prompt_tokens":3,"completion_tokens":4,"total_tokens":7}})");
  EXPECT_EQ(reassemble_sse(sse), want);
}

// ---- through the server ----

const std::string& model_dir() {
  static const std::string dir = [] {
    const std::string d = fresh_dir("model");
    EXPECT_TRUE(write_random_checkpoint(preset_config("tiny-chat").value(), d, {}).ok());
    for (const char* f : {"tokenizer.json", "tokenizer_config.json"})
      fs::copy_file(testing::qwen3_dir() + "/" + f, d + "/" + f);
    std::atexit([] { fs::remove_all(fresh_dir("model")); });
    return d;
  }();
  return dir;
}

KilnConfig server_config(const std::string& log_dir, bool on) {
  KilnConfig c;
  c.model.path = model_dir();
  c.model.backend = "cpu";
  c.model.max_context = 1024;
  c.server.port = 0;
  c.memory.kv_blocks = 64;
  c.logging.request_log = on;
  c.logging.request_log_dir = log_dir;
  c.server.state_dir = model_dir();
  return c;
}

json chat(bool stream) {
  json b = {{"messages", {{{"role", "user"}, {"content", "Tell me a story"}}}}, {"max_tokens", 16}, {"temperature", 0}};
  if (stream) b["stream"] = true;
  return b;
}

TEST(RequestLogHttp, OffByDefaultCreatesNothing) {
  EXPECT_FALSE(KilnConfig{}.logging.request_log);
  const std::string dir = fresh_dir("off");
  KilnConfig c = server_config(dir, false);
  auto s = ServingStack::start(c);
  ASSERT_TRUE(s.ok()) << s.status().to_string();
  httplib::Client cli("127.0.0.1", (*s)->port());
  cli.set_read_timeout(60, 0);
  auto r = cli.Post("/v1/chat/completions", chat(false).dump(), "application/json");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200);
  s->reset();
  EXPECT_FALSE(fs::exists(dir));
  EXPECT_FALSE(fs::exists(fs::path(model_dir()) / "request-log"));
}

TEST(RequestLogHttp, StreamedChatIsLoggedAsItsReassembledText) {
  const std::string dir = fresh_dir("on");
  auto s = ServingStack::start(server_config(dir, true));
  ASSERT_TRUE(s.ok()) << s.status().to_string();
  httplib::Client cli("127.0.0.1", (*s)->port());
  cli.set_read_timeout(60, 0);
  auto whole = cli.Post("/v1/chat/completions", chat(false).dump(), "application/json");
  ASSERT_TRUE(whole);
  ASSERT_EQ(whole->status, 200);
  auto streamed = cli.Post("/v1/chat/completions", chat(true).dump(), "application/json");
  ASSERT_TRUE(streamed);
  ASSERT_EQ(streamed->status, 200);
  const json bad = {{"messages", "not a list"}};
  auto refused = cli.Post("/v1/chat/completions", bad.dump(), "application/json");
  ASSERT_TRUE(refused);
  ASSERT_EQ(refused->status, 400);
  // A response written by a content provider is logged when cpp-httplib releases it, which may be
  // just after the client has read it: wait for the count.
  std::string metrics;
  for (int k = 0; k < 200; ++k) {
    auto m = cli.Get("/metrics");
    ASSERT_TRUE(m);
    metrics = m->body;
    if (metrics.find("kiln_request_log_rows_total{outcome=\"queued\"} 3\n") != std::string::npos) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_NE(metrics.find("kiln_request_log_rows_total{outcome=\"queued\"} 3\n"), std::string::npos) << metrics;
  EXPECT_NE(metrics.find("kiln_request_log_rows_total{outcome=\"dropped\"} 0\n"), std::string::npos) << metrics;
  s->reset();  // the log writes every queued row before it closes

  // The client's own concatenation of the stream's deltas (the template may open a reasoning span).
  std::string text, reasoning, finish;
  size_t pos = 0;
  while ((pos = streamed->body.find("data: ", pos)) != std::string::npos) {
    const size_t end = streamed->body.find("\n\n", pos);
    const std::string data = streamed->body.substr(pos + 6, end - pos - 6);
    pos = end;
    if (data == "[DONE]") continue;
    const json event = json::parse(data);
    for (const auto& c : event["choices"]) {
      if (c["delta"].contains("content")) text += c["delta"]["content"].get<std::string>();
      if (c["delta"].contains("reasoning_content")) reasoning += c["delta"]["reasoning_content"].get<std::string>();
      if (!c["finish_reason"].is_null()) finish = c["finish_reason"];
    }
  }
  ASSERT_FALSE(text.empty() && reasoning.empty()) << streamed->body;

  std::string tail;
  auto logged = split_rows(read_file(dir + "/requests.jsonl"), &tail);
  EXPECT_TRUE(tail.empty());
  ASSERT_EQ(logged.size(), 3u);
  // Rows are in the order the responses finished, which need not be the order sent.
  std::vector<json> rows(3);
  for (const auto& r : logged) rows[r["request"] == chat(false) ? 0 : r["request"] == chat(true) ? 1 : 2] = r;
  for (const auto& r : rows) {
    EXPECT_EQ(r["route"], "/v1/chat/completions");
    EXPECT_EQ(r["model"], fs::path(model_dir()).filename().string());
    EXPECT_TRUE(r["ts"].get<std::string>().ends_with("Z"));
    EXPECT_GT(r["duration_ms"].get<double>(), 0.0);
    EXPECT_TRUE(r["adapter"].is_null());
  }
  // Non-streaming: the answer exactly as the client got it, and its usage.
  const json whole_body = json::parse(whole->body);
  EXPECT_EQ(rows[0]["status"], 200);
  EXPECT_EQ(rows[0]["stream"], false);
  EXPECT_EQ(rows[0]["request"], chat(false));
  EXPECT_EQ(rows[0]["response"], whole_body);
  EXPECT_EQ(rows[0]["usage"], whole_body["usage"]);
  EXPECT_EQ(rows[0]["usage"]["completion_tokens"], 16);
  // Streaming: the text the chunks add up to (greedy, so also the non-streaming answer's).
  EXPECT_EQ(rows[1]["status"], 200);
  EXPECT_EQ(rows[1]["stream"], true);
  EXPECT_EQ(rows[1]["request"], chat(true));
  EXPECT_EQ(rows[1]["response"]["object"], "chat.completion");
  EXPECT_EQ(rows[1]["response"]["choices"][0]["message"]["content"], text);
  EXPECT_EQ(rows[1]["response"]["choices"][0]["message"].value("reasoning_content", ""), reasoning);
  EXPECT_EQ(rows[1]["response"]["choices"][0]["finish_reason"], finish);
  EXPECT_EQ(text, whole_body["choices"][0]["message"]["content"].get<std::string>());
  EXPECT_EQ(reasoning, whole_body["choices"][0]["message"].value("reasoning_content", ""));
  EXPECT_TRUE(rows[1]["usage"].is_null());  // the stream did not ask for usage
  // Refused: its status and the error the client got.
  EXPECT_EQ(rows[2]["status"], 400);
  EXPECT_EQ(rows[2]["request"], bad);
  EXPECT_EQ(rows[2]["error"], json::parse(refused->body)["error"]);
  EXPECT_TRUE(rows[2]["response"].is_null());
  fs::remove_all(dir);
}

// Rows are serialised recursively: a body nested past the JSON limit is logged as its text, and
// an adapter scale that is not a number as it was sent, both beside the 400 the route answers.
TEST(RequestLogHttp, HostileBodiesAreLoggedAsSentWithoutBreakingTheServer) {
  const std::string dir = fresh_dir("hostile");
  auto s = ServingStack::start(server_config(dir, true));
  ASSERT_TRUE(s.ok()) << s.status().to_string();
  httplib::Client cli("127.0.0.1", (*s)->port());
  cli.set_read_timeout(60, 0);
  const std::string deep = "{\"messages\":" + std::string(200000, '[') + std::string(200000, ']') + "}";
  auto r1 = cli.Post("/v1/chat/completions", deep, "application/json");
  ASSERT_TRUE(r1);
  EXPECT_EQ(r1->status, 400);
  json scaled = chat(false);
  scaled["adapters"] = {{{"name", "a"}, {"scale", "x"}}};
  auto r2 = cli.Post("/v1/chat/completions", scaled.dump(), "application/json");
  ASSERT_TRUE(r2);
  EXPECT_EQ(r2->status, 400);
  auto health = cli.Get("/health");
  ASSERT_TRUE(health);
  EXPECT_EQ(health->status, 200);
  s->reset();

  auto rows = split_rows(read_file(dir + "/requests.jsonl"));
  ASSERT_EQ(rows.size(), 2u);
  EXPECT_EQ(rows[0]["request"], deep);
  EXPECT_EQ(rows[0]["status"], 400);
  EXPECT_EQ(rows[1]["request"], scaled);
  EXPECT_EQ(rows[1]["adapters"][0]["scale"], "x");
  EXPECT_EQ(rows[1]["status"], 400);
  fs::remove_all(dir);
}

// The log's files are the owner's alone, and with logging.request_log_redact a row keeps its shape
// and its numbers but no one's words.
TEST(RequestLogHttp, FilesAreOwnerOnlyAndRedactionKeepsNoText) {
  const std::string dir = fresh_dir("redact");
  KilnConfig c = server_config(dir, true);
  c.logging.request_log_redact = true;
  auto s = ServingStack::start(c);
  ASSERT_TRUE(s.ok()) << s.status().to_string();
  httplib::Client cli("127.0.0.1", (*s)->port());
  cli.set_read_timeout(60, 0);
  const json secret_chat = {{"messages", {{{"role", "user"}, {"content", "my password is hunter2"}}}},
                            {"max_tokens", 4}, {"temperature", 0}, {"logprobs", true}, {"top_logprobs", 2}};
  auto r = cli.Post("/v1/chat/completions", secret_chat.dump(), "application/json");
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200);
  const json answer = json::parse(r->body);
  auto ids = cli.Post("/v1/completions", json({{"prompt", {11, 22, 33}}, {"max_tokens", 2}}).dump(), "application/json");
  ASSERT_TRUE(ids);
  ASSERT_EQ(ids->status, 200);
  s->reset();
  EXPECT_EQ(fs::status(dir).permissions() & fs::perms::all, fs::perms::owner_all);
  EXPECT_EQ(fs::status(dir + "/requests.jsonl").permissions() & fs::perms::all, fs::perms::owner_read | fs::perms::owner_write);
  const std::string raw = read_file(dir + "/requests.jsonl");
  EXPECT_EQ(raw.find("hunter2"), std::string::npos) << raw;
  const std::string said = answer["choices"][0]["message"]["content"].get<std::string>();
  if (said.size() > 3) EXPECT_EQ(raw.find(said), std::string::npos) << said;
  auto rows = split_rows(raw);
  ASSERT_EQ(rows.size(), 2u);
  const json& chat_row = rows[0]["route"] == "/v1/chat/completions" ? rows[0] : rows[1];
  const json& ids_row = rows[0]["route"] == "/v1/chat/completions" ? rows[1] : rows[0];
  EXPECT_EQ(chat_row["request"]["messages"][0]["role"], "user");
  EXPECT_EQ(chat_row["request"]["messages"][0]["content"], "[redacted: 22 bytes]");
  EXPECT_EQ(chat_row["request"]["max_tokens"], 4);
  EXPECT_EQ(chat_row["response"]["choices"][0]["message"]["content"],
            "[redacted: " + std::to_string(said.size()) + " bytes]");
  EXPECT_EQ(chat_row["response"]["choices"][0]["logprobs"], "[redacted]");
  EXPECT_EQ(chat_row["response"]["model"], answer["model"]);
  EXPECT_EQ(chat_row["usage"], answer["usage"]);
  EXPECT_EQ(ids_row["request"]["prompt"], "[redacted: 3 tokens]");
  fs::remove_all(dir);
}

}  // namespace
}  // namespace kiln
