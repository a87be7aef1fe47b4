// Training and adapter management over HTTP on the CPU backend: every bad training request
// refused with 400 naming the field before anything is queued; job status, queue and cancel;
// the queue's 503 + Retry-After; the webhook received by a local HTTP server; the default
// adapter; adapter download -> upload round trips (the archive read by the system's `tar` too),
// uploads validated before they land, hostile or oversized ones refused leaving no staging
// folder; the startup sweep; merges; and an SFT job end to end whose adapter is published,
// auto-loaded as the default and used by the next request (its webhook heard of the completion);
// refused requests publish nothing; the maintenance profile as /v1/config shows it; the stable
// and experimental profiles on a backend whose training is under qualification.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <thread>
#include <vector>

#include <httplib.h>
#include <nlohmann/json.hpp>

#include "backend/registry.h"
#include "config/config_loader.h"
#include "config/config_render.h"
#include "forwarding_backend.h"
#include "model/init.h"
#include "model/lora_adapter.h"
#include "server/route_gates.h"
#include "server/serving_stack.h"
#include "server/archive_builder.h"
#include "tiny_chat_dir.h"
#include "tokenizer/qwen3_fixture.h"

namespace kiln {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;
using namespace std::chrono_literals;

const std::string& model_dir() {
  static const std::string dir = [] {
    const std::string d = (fs::temp_directory_path() / ("kiln-train-http-" + std::to_string(::getpid()))).string();
    fs::remove_all(d);
    EXPECT_TRUE(write_random_checkpoint(preset_config("tiny-chat").value(), d, {}).ok());
    for (const char* f : {"tokenizer.json", "tokenizer_config.json"})
      fs::copy_file(testing::qwen3_dir() + "/" + f, d + "/" + f);
    std::atexit([] { fs::remove_all(fs::temp_directory_path() / ("kiln-train-http-" + std::to_string(::getpid()))); });
    return d;
  }();
  return dir;
}

// Each server gets its own adapter_dir.
KilnConfig test_config() {
  static int n = 0;
  KilnConfig c;
  c.model.path = model_dir();
  c.model.backend = "cpu";
  c.model.max_context = 512;
  c.model.adapter_dir = model_dir() + "/adapters-" + std::to_string(++n);
  c.server.state_dir = model_dir() + "/state-" + std::to_string(n);
  c.server.port = 0;
  c.server.max_decode_batch = 4;
  c.server.max_body_bytes = 8 << 20;
  c.memory.kv_blocks = 64;
  return c;
}

struct Server {
  explicit Server(const KilnConfig& c = test_config(), json config_report = nullptr, json capability_report = nullptr)
      : config(c) {
    auto s = ServingStack::start(c, std::move(config_report), std::move(capability_report));
    if (!s.ok()) ADD_FAILURE() << s.status().to_string();
    else stack = std::move(*s);
  }
  httplib::Client client() const {
    httplib::Client cli("127.0.0.1", stack->port());
    cli.set_read_timeout(120, 0);
    return cli;
  }
  json call(const std::string& method, const std::string& path, const json& body, int want) const {
    auto cli = client();
    httplib::Result r = method == "GET"      ? cli.Get(path.c_str())
                        : method == "DELETE" ? cli.Delete(path.c_str())
                                             : cli.Post(path.c_str(), body.dump(), "application/json");
    EXPECT_TRUE(r) << method << " " << path << ": no response";
    if (!r) return {};
    EXPECT_EQ(r->status, want) << method << " " << path << ": " << r->body;
    return json::parse(r->body);
  }
  json post(const std::string& path, const json& body, int want = 200) const { return call("POST", path, body, want); }
  json get(const std::string& path, int want = 200) const { return call("GET", path, nullptr, want); }
  // Polls the job until it has ended (up to `secs`).
  json wait_job(const std::string& id, int secs = 240) const {
    json s;
    for (int i = 0; i < secs * 20; ++i) {
      s = get("/v1/train/status/" + id);
      const std::string st = s.value("state", "");
      if (st == "completed" || st == "failed" || st == "cancelled") return s;
      std::this_thread::sleep_for(50ms);
    }
    ADD_FAILURE() << "job " << id << " did not end: " << s.dump();
    return s;
  }
  KilnConfig config;
  std::unique_ptr<ServingStack> stack;
};

// A local receiver for training.webhook_url: the bodies it was posted, in order.
class Webhook {
 public:
  Webhook() {
    server_.Post("/hook", [this](const httplib::Request& req, httplib::Response& res) {
      std::lock_guard<std::mutex> lock(mu_);
      received_.push_back(json::parse(req.body));
      res.status = 204;
    });
    port_ = server_.bind_to_any_port("127.0.0.1");
    thread_ = std::thread([this] { server_.listen_after_bind(); });
  }
  ~Webhook() {
    server_.stop();
    if (thread_.joinable()) thread_.join();
  }
  std::string url() const { return "http://127.0.0.1:" + std::to_string(port_) + "/hook"; }
  // What has arrived once `n` bodies have (or 10 s have passed).
  std::vector<json> wait_for(size_t n) {
    for (int i = 0; i < 1000; ++i) {
      {
        std::lock_guard<std::mutex> lock(mu_);
        if (received_.size() >= n) return received_;
      }
      std::this_thread::sleep_for(10ms);
    }
    std::lock_guard<std::mutex> lock(mu_);
    return received_;
  }

 private:
  httplib::Server server_;
  std::thread thread_;
  std::mutex mu_;
  std::vector<json> received_;
  int port_ = 0;
};

json conversation(const std::string& user, const std::string& assistant) {
  return {{"messages", {{{"role", "user"}, {"content", user}}, {{"role", "assistant"}, {"content", assistant}}}}};
}

json chat(const std::string& content, json extra = json::object()) {
  json b = {{"messages", {{{"role", "user"}, {"content", content}}}}, {"max_tokens", 8}, {"temperature", 0}};
  for (auto& [k, v] : extra.items()) b[k] = v;
  return b;
}

std::string reply(const json& r) { return r["choices"][0]["message"]["content"].get<std::string>(); }

std::string file_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

bool has_staging(const std::string& dir) {
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir, ec))
    if (e.path().filename().string().rfind(".staging-", 0) == 0) return true;
  return false;
}

TEST(TrainHttp, BadTrainingRequestsAre400NamingTheField) {
  Server s;
  ASSERT_TRUE(s.stack);
  const json ok = {conversation("hi", "hello")};
  std::string long_text;
  for (int i = 0; i < 600; ++i) long_text += " word";
  struct Case {
    const char* route;
    json body;
    std::string param;  // the error's param starts with this
  };
  const std::vector<Case> cases = {
      {"sft", json::object(), "examples"},
      {"sft", {{"examples", json::array()}}, "examples"},
      {"sft", {{"examples", "nope"}}, "examples"},
      {"sft", {{"examples", {{{"messages", {{{"role", "user"}, {"content", "no answer"}}}}}}}}, "examples[0]"},
      {"sft", {{"examples", {conversation("hi", "hello"), conversation(long_text, "x")}}}, "examples[1]"},
      {"sft", {{"examples", ok}, {"config", {{"optimizer", {{"kind", "adagrad"}}}}}}, "config.optimizer.kind"},
      {"sft", {{"examples", ok}, {"config", {{"optimizer", {{"kind", "muon"}, {"lr", 1}}}}}}, "config.optimizer.lr"},
      {"sft", {{"examples", ok}, {"config", {{"lora_rank", 0}}}}, "config.lora_rank"},
      {"sft", {{"examples", ok}, {"config", {{"lora_rank", 257}}}}, "config.lora_rank"},
      {"sft", {{"examples", ok}, {"config", {{"lora_rank", "16"}}}}, "config.lora_rank"},
      {"sft", {{"examples", ok}, {"config", {{"learning_rate", -1}}}}, "config.learning_rate"},
      {"sft", {{"examples", ok}, {"config", {{"epochs", 0}}}}, "config.epochs"},
      {"sft", {{"examples", ok}, {"config", {{"lora_dropout", 0.1}}}}, "config.lora_dropout"},
      {"sft", {{"examples", ok}, {"config", {{"output_name", "../escape"}}}}, "config.output_name"},
      {"sft", {{"examples", ok}, {"config", {{"target_modules", {"q_proj", "lm_head"}}}}}, "config.target_modules"},
      {"sft", {{"examples", ok}, {"config", {{"advantage_mode", "vanilla"}}}}, "config.advantage_mode"},
      {"sft", {{"examples", ok}, {"epochs", 2}}, "epochs"},
      {"sft", {{"examples", ok}, {"dataset_path", "/x.jsonl"}}, "dataset_path"},
      {"sft", {{"dataset_path", "/nonexistent/data.jsonl"}}, "dataset_path"},
      {"grpo", {{"groups", json::array()}}, "groups"},
      {"grpo", {{"groups", {{{"messages", {{{"role", "user"}, {"content", "q"}}}}, {"completions", {{{"text", "a"}, {"reward", 1}}}}}}}}, "groups[0]"},
      {"grpo", {{"groups", {{{"messages", {{{"role", "user"}, {"content", "q"}}}}, {"completions", {{{"text", "a"}, {"reward", 1}}, {{"text", "b"}, {"reward", 0}}}}}}}, {"config", {{"kl_estimator", "k2"}}}}, "config.kl_estimator"},
      // The training controls.
      {"sft", {{"examples", ok}, {"config", {{"max_grad_norm", -1}}}}, "config.max_grad_norm"},
      {"sft", {{"examples", ok}, {"config", {{"lr_schedule", "step"}}}}, "config.lr_schedule"},
      {"sft", {{"examples", ok}, {"config", {{"warmup_steps", -1}}}}, "config.warmup_steps"},
      {"sft", {{"examples", ok}, {"config", {{"gradient_accumulation_steps", 0}}}}, "config.gradient_accumulation_steps"},
      {"sft", {{"examples", ok}, {"config", {{"max_seq_length", 1}}}}, "config.max_seq_length"},
      {"sft", {{"examples", ok}, {"config", {{"max_seq_length", 513}}}}, "config.max_seq_length"},  // past the context
      {"sft", {{"examples", ok}, {"config", {{"packing", true}}}}, "config.packing"},  // no max_seq_length
      {"sft", {{"examples", ok}, {"config", {{"packing", "yes"}, {"max_seq_length", 64}}}}, "config.packing"},
      {"grpo", {{"groups", {{{"messages", {{{"role", "user"}, {"content", "q"}}}}, {"completions", {{{"text", "a"}, {"reward", 1}}, {{"text", "b"}, {"reward", 0}}}}}}}, {"config", {{"packing", true}}}}, "config.packing"},
      {"sft", {{"examples", ok}, {"config", {{"eval_every", 2}}}}, "config.eval_every"},  // nothing held out
      {"sft", {{"examples", ok}, {"config", {{"eval_fraction", 0.95}}}}, "config.eval_fraction"},
      {"sft", {{"examples", ok}, {"config", {{"eval_fraction", 0.5}}}}, "config.eval_fraction"},  // 1 of 1 held out
      {"sft", {{"examples", ok}, {"config", {{"max_seq_length", 8}}}}, "examples[0]"},  // every target cut
  };
  for (const Case& c : cases) {
    json r = s.post(std::string("/v1/train/") + c.route, c.body, 400);
    const std::string param = r["error"]["param"].is_string() ? r["error"]["param"].get<std::string>() : "";
    EXPECT_EQ(param.rfind(c.param, 0), 0u) << c.body.dump() << " -> " << r.dump();
  }
  // An unknown base adapter is a 404 naming it; nothing was queued by any of these.
  json nf = s.post("/v1/train/sft", {{"examples", ok}, {"config", {{"base_adapter", "missing"}}}}, 404);
  EXPECT_EQ(nf["error"]["param"], "config.base_adapter");
  EXPECT_EQ(s.get("/v1/train/queue")["data"].size(), 0u);
  std::error_code ec;
  EXPECT_TRUE(!fs::exists(s.config.model.adapter_dir) || fs::is_empty(s.config.model.adapter_dir, ec))
      << "a refused request published something in " << s.config.model.adapter_dir;
  EXPECT_EQ(s.get("/v1/adapters")["data"].size(), 0u);
  EXPECT_EQ(s.get("/v1/train/status/job-nope", 404)["error"]["param"], "job_id");
  EXPECT_EQ(s.call("DELETE", "/v1/train/queue/job-nope", nullptr, 404)["error"]["param"], "job_id");
}

TEST(TrainHttp, QueueFullIs503WithRetryAfterAndCancelEndsJobsWithTheWebhookCalled) {
  Webhook hook;
  KilnConfig c = test_config();
  c.training.max_queued_jobs = 1;
  c.training.webhook_url = hook.url();
  {
    Server s(c);
    ASSERT_TRUE(s.stack);
    // Long jobs: the first runs, the second waits, the third finds the queue full.
    const json body = {{"examples", {conversation("hi", "hello there")}}, {"config", {{"epochs", 10000}, {"lora_rank", 2}}}};
    json a = s.post("/v1/train/sft", body);
    for (int i = 0; i < 2000 && s.get("/v1/train/status/" + a["job_id"].get<std::string>())["state"] == "queued"; ++i)
      std::this_thread::sleep_for(5ms);
    json b = s.post("/v1/train/sft", body);
    EXPECT_EQ(b["state"], "queued");
    EXPECT_EQ(b["queue_position"], 1);
    auto full = s.client().Post("/v1/train/sft", body.dump(), "application/json");
    ASSERT_TRUE(full);
    EXPECT_EQ(full->status, 503) << full->body;
    EXPECT_EQ(full->get_header_value("Retry-After"), "30");
    EXPECT_EQ(json::parse(full->body)["error"]["code"], "training_queue_full");

    json q = s.get("/v1/train/queue");
    EXPECT_EQ(q["running"], a["job_id"]);
    EXPECT_EQ(q["queued"], 1);
    EXPECT_EQ(s.get("/health")["training"]["queued"], 1);
    // Cancel the queued one, then the running one (it stops at its next step).
    EXPECT_EQ(s.call("DELETE", "/v1/train/queue/" + b["job_id"].get<std::string>(), nullptr, 200)["state"], "cancelled");
    s.call("DELETE", "/v1/train/queue/" + a["job_id"].get<std::string>(), nullptr, 200);
    json end = s.wait_job(a["job_id"]);
    EXPECT_EQ(end["state"], "cancelled") << end.dump();
    EXPECT_EQ(s.call("DELETE", "/v1/train/queue/" + a["job_id"].get<std::string>(), nullptr, 409)["error"]["code"], "conflict");
    EXPECT_TRUE(s.get("/v1/train/status/" + b["job_id"].get<std::string>())["adapter_name"].is_null());
  }
  const std::vector<json> received = hook.wait_for(2);
  ASSERT_EQ(received.size(), 2u);
  for (const json& r : received) {
    EXPECT_EQ(r["job_type"], "sft");
    EXPECT_EQ(r["status"], "cancelled");
    EXPECT_TRUE(r["adapter_name"].is_null());
    EXPECT_TRUE(r["error"].is_string());
    EXPECT_TRUE(r["timestamp"].is_number());
  }
}

TEST(TrainHttp, TheDefaultAdapterServesRequestsThatNameNone) {
  Server s;
  ASSERT_TRUE(s.stack);
  testing::write_random_adapter(s.config.model.adapter_dir + "/styled", 4, 5);
  const std::string base = reply(s.post("/v1/chat/completions", chat("Hello")));
  json loaded = s.post("/v1/adapters/load", {{"name", "styled"}, {"default", true}});
  EXPECT_EQ(loaded["default"], true);
  json list = s.get("/v1/adapters");
  EXPECT_EQ(list["default_adapter"], "styled");
  EXPECT_EQ(s.get("/health")["default_adapter"], "styled");
  const std::string named = reply(s.post("/v1/chat/completions", chat("Hello", {{"adapter", "styled"}})));
  const std::string by_default = reply(s.post("/v1/chat/completions", chat("Hello")));
  const std::string explicit_base = reply(s.post("/v1/chat/completions", chat("Hello", {{"adapter", nullptr}})));
  EXPECT_NE(named, base) << "the adapter must change the greedy reply for the check to mean anything";
  EXPECT_EQ(by_default, named);
  EXPECT_EQ(explicit_base, base);
  EXPECT_EQ(reply(s.post("/v1/chat/completions", chat("Hello", {{"adapter", ""}}))), base);
  s.post("/v1/adapters/unload", {{"name", "styled"}});
  EXPECT_TRUE(s.get("/v1/adapters")["default_adapter"].is_null());
  EXPECT_EQ(reply(s.post("/v1/chat/completions", chat("Hello"))), base);
}

TEST(TrainHttp, DownloadUploadRoundTripGivesAnIdenticalAdapter) {
  Server s;
  ASSERT_TRUE(s.stack);
  const std::string dir = s.config.model.adapter_dir;
  testing::write_random_adapter(dir + "/orig", 4, 9);
  auto dl = s.client().Get("/v1/adapters/orig/download");
  ASSERT_TRUE(dl);
  ASSERT_EQ(dl->status, 200) << dl->body;
  EXPECT_EQ(dl->get_header_value("Content-Type"), "application/gzip");
  // Streamed in pieces rather than sent as one string (which would carry a Content-Length).
  EXPECT_EQ(dl->get_header_value("Transfer-Encoding"), "chunked");
  EXPECT_EQ(s.client().Get("/v1/adapters/orig/download")->body, dl->body) << "the same folder, the same bytes";
  EXPECT_EQ(s.client().Get("/v1/adapters/none/download")->status, 404);

  // The system's tar reads the archive: our writer makes real ustar + gzip.
  const std::string archive = dir + "/../orig-" + std::to_string(::getpid()) + ".tar.gz";
  std::ofstream(archive, std::ios::binary) << dl->body;
  std::string listing;
  if (FILE* p = ::popen(("tar -tzf " + archive + " 2>&1").c_str(), "r")) {
    char buf[256];
    while (std::fgets(buf, sizeof buf, p)) listing += buf;
    EXPECT_EQ(::pclose(p), 0) << listing;
  }
  EXPECT_EQ(listing, "adapter_config.json\nadapter_model.safetensors\n");

  auto up = s.client().Post("/v1/adapters/upload?name=copy&load=true", dl->body, "application/gzip");
  ASSERT_TRUE(up);
  ASSERT_EQ(up->status, 200) << up->body;
  EXPECT_EQ(json::parse(up->body)["loaded"], true);
  for (const char* f : {"adapter_config.json", "adapter_model.safetensors"})
    EXPECT_EQ(file_bytes(dir + "/copy/" + f), file_bytes(dir + "/orig/" + f)) << f;
  // The same name again needs replace=true.
  EXPECT_EQ(s.client().Post("/v1/adapters/upload?name=copy", dl->body, "application/gzip")->status, 409);
  EXPECT_EQ(s.client().Post("/v1/adapters/upload?name=copy&replace=true", dl->body, "application/gzip")->status, 200);
  // Sent in chunked transfer encoding (a client streaming a file of unknown length): the route
  // counts the bytes as they arrive, so the guard lets it through.
  const std::string body = dl->body;
  auto chunked = s.client().Post(
      "/v1/adapters/upload?name=chunked",
      [&body](size_t offset, httplib::DataSink& sink) {
        if (offset < body.size()) sink.write(body.data() + offset, std::min<size_t>(1000, body.size() - offset));
        else sink.done();
        return true;
      },
      "application/gzip");
  ASSERT_TRUE(chunked);
  EXPECT_EQ(chunked->status, 200) << chunked->body;
  EXPECT_EQ(file_bytes(dir + "/chunked/adapter_model.safetensors"), file_bytes(dir + "/orig/adapter_model.safetensors"));

  // An archive made by the system's tar of a directory (entries under "./") is accepted too.
  const std::string tar2 = dir + "/../sys-" + std::to_string(::getpid()) + ".tar.gz";
  ASSERT_EQ(std::system(("tar -czf " + tar2 + " -C " + dir + "/orig .").c_str()), 0);
  auto up2 = s.client().Post("/v1/adapters/upload?name=from-tar", file_bytes(tar2), "application/gzip");
  ASSERT_TRUE(up2);
  EXPECT_EQ(up2->status, 200) << up2->body;
  EXPECT_EQ(file_bytes(dir + "/from-tar/adapter_model.safetensors"), file_bytes(dir + "/orig/adapter_model.safetensors"));

  // Not gzip; gzip of files that are no adapter of this model: 400 naming the body, nothing lands.
  auto junk = s.client().Post("/v1/adapters/upload?name=junk", "not an archive", "application/gzip");
  EXPECT_EQ(junk->status, 400);
  EXPECT_EQ(json::parse(junk->body)["error"]["param"], "body");
  const std::string cfg_only = testing::make_tar_gz({{"adapter_config.json", file_bytes(dir + "/orig/adapter_config.json")}});
  auto partial = s.client().Post("/v1/adapters/upload?name=partial", cfg_only, "application/gzip");
  EXPECT_EQ(partial->status, 400) << partial->body;
  EXPECT_FALSE(fs::exists(dir + "/junk"));
  EXPECT_FALSE(fs::exists(dir + "/partial"));
  EXPECT_FALSE(has_staging(dir));
  EXPECT_EQ(json::parse(s.client().Post("/v1/adapters/upload", dl->body, "application/gzip")->body)["error"]["param"], "name");
  fs::remove(archive);
  fs::remove(tar2);
}

TEST(TrainHttp, MergeConcatPublishesAnAdapterThatServes) {
  Server s;
  ASSERT_TRUE(s.stack);
  const std::string dir = s.config.model.adapter_dir;
  testing::write_random_adapter(dir + "/one", 2, 21);
  testing::write_random_adapter(dir + "/two", 3, 22);
  s.post("/v1/adapters/load", {{"name", "one"}});  // one loaded, two only on disk
  json m = s.post("/v1/adapters/merge", {{"sources", {{{"name", "one"}, {"weight", 0.5}}, {{"name", "two"}, {"weight", 0.5}}}},
                                         {"method", "concat"}, {"output_name", "both"}, {"load", true}});
  EXPECT_EQ(m["rank"], 5);
  EXPECT_EQ(m["loaded"], true);
  EXPECT_TRUE(fs::exists(dir + "/both/adapter_model.safetensors"));
  s.post("/v1/adapters/load", {{"name", "two"}});
  // The merged adapter answers as the two stacked at weight 0.5 each (greedy, same tokens).
  const std::string merged = reply(s.post("/v1/chat/completions", chat("Hi", {{"adapter", "both"}})));
  const std::string stacked = reply(s.post("/v1/chat/completions",
                                           chat("Hi", {{"adapters", {{{"name", "one"}, {"scale", 0.5}}, {{"name", "two"}, {"scale", 0.5}}}}})));
  EXPECT_EQ(merged, stacked);
  EXPECT_EQ(s.post("/v1/adapters/merge", {{"sources", {{{"name", "one"}}}}, {"method", "svd"}, {"output_name", "x"}}, 400)["error"]["param"], "method");
  EXPECT_EQ(s.post("/v1/adapters/merge", {{"sources", {{{"name", "zzz"}}}}, {"method", "ties"}, {"output_name", "x"}}, 404)["error"]["param"], "sources[0].name");
  EXPECT_EQ(s.post("/v1/adapters/merge", {{"sources", json::array()}, {"method", "ties"}, {"output_name", "x"}}, 400)["error"]["param"], "sources");
  EXPECT_FALSE(has_staging(dir));
}

TEST(TrainHttp, SftJobEndToEndPublishesAndAutoLoadsItsAdapter) {
  Webhook hook;
  KilnConfig c = test_config();
  c.training.webhook_url = hook.url();
  Server s(c);
  ASSERT_TRUE(s.stack);
  // The template renders a past assistant turn with an empty think block, so ask without
  // thinking: the prompt then ends where the trained targets begin.
  const json no_think = {{"chat_template_kwargs", {{"enable_thinking", false}}}};
  auto chat = [&no_think](const std::string& content, json extra = json::object()) {
    json b = kiln::chat(content, extra);
    for (auto& [k, v] : no_think.items()) b[k] = v;
    return b;
  };
  const std::string before = reply(s.post("/v1/chat/completions", chat("What is the password?")));
  json examples = json::array();
  for (int i = 0; i < 4; ++i) examples.push_back(conversation("What is the password?", "swordfish swordfish swordfish"));
  json job = s.post("/v1/train/sft", {{"examples", examples},
                                      {"config", {{"lora_rank", 4}, {"learning_rate", 0.01}, {"epochs", 6}, {"seed", 3},
                                                  {"optimizer", {{"kind", "adam_w"}}}, {"output_name", "pw"}}}});
  EXPECT_EQ(job["output_name"], "pw");
  json done = s.wait_job(job["job_id"]);
  ASSERT_EQ(done["state"], "completed") << done.dump();
  const auto curve = done["loss_curve"].get<std::vector<double>>();
  ASSERT_EQ(static_cast<int64_t>(curve.size()), done["total_steps"].get<int64_t>());
  ASSERT_GE(curve.size(), 2u);
  EXPECT_LT(curve.back(), 0.5 * curve.front()) << done["loss_curve"].dump();
  EXPECT_EQ(done["adapter_name"], "pw");
  EXPECT_EQ(done["adapter_revision"], 1);
  // The running time splits into its phases: train, publish, load (no post_eval was asked).
  const json& t = done["timings"];
  for (const char* phase : {"train_seconds", "publish_seconds", "load_seconds"})
    EXPECT_GT(t[phase].is_number() ? t[phase].get<double>() : 0.0, 0.0) << phase << " in " << t.dump();
  EXPECT_TRUE(t["post_eval_seconds"].is_null()) << t.dump();
  EXPECT_GT(done["trained_tokens"].get<int64_t>(), 6 * 4 * 8) << done.dump();  // 6 epochs of 4 conversations
  EXPECT_LE(t["train_seconds"].get<double>() + t["publish_seconds"].get<double>() + t["load_seconds"].get<double>(),
            t["running_seconds"].get<double>() + 1e-3)
      << t.dump();
  const std::string dir = s.config.model.adapter_dir + "/pw";
  json receipt = json::parse(file_bytes(dir + "/train_receipt.json"));
  EXPECT_EQ(receipt["loss_curve"], done["loss_curve"]);
  EXPECT_EQ(receipt["seed"], 3);
  EXPECT_EQ(receipt["hyperparameters"]["lora_rank"], 4);
  // The controls' defaults: clipping at 1, cosine decay without warmup, no accumulation, no
  // length limit but the context, no packing, nothing held out.
  const json& hp = receipt["hyperparameters"];
  EXPECT_EQ(hp["max_grad_norm"], 1.0);
  EXPECT_EQ(hp["lr_schedule"], "cosine");
  EXPECT_EQ(hp["warmup_steps"], 0);
  EXPECT_EQ(hp["gradient_accumulation_steps"], 1);
  EXPECT_TRUE(hp["max_seq_length"].is_null()) << hp.dump();
  EXPECT_EQ(hp["packing"], false);
  EXPECT_EQ(hp["eval_fraction"], 0.0);
  EXPECT_EQ(done["grad_norm_curve"].size(), curve.size());
  EXPECT_EQ(done["lr_curve"].size(), curve.size());
  EXPECT_FLOAT_EQ(done["lr_curve"][0].get<float>(), 0.01f);  // the first step runs at the peak
  EXPECT_TRUE(done["eval_loss_curve"].empty());
  EXPECT_TRUE(done["eval_loss"].is_null());
  EXPECT_EQ(receipt["data_sha256"].get<std::string>().size(), 64u);
  EXPECT_TRUE(receipt["base_model"]["config_sha256"].is_string());
  EXPECT_EQ(s.get("/v1/adapters")["default_adapter"], "pw");
  // The next request naming no adapter runs on the trained one, and the base model says something else.
  const std::string after = reply(s.post("/v1/chat/completions", chat("What is the password?")));
  const std::string named = reply(s.post("/v1/chat/completions", chat("What is the password?", {{"adapter", "pw"}})));
  EXPECT_EQ(after, named);
  EXPECT_NE(after, before);
  json full = s.post("/v1/chat/completions", chat("What is the password?", {{"max_tokens", 16}}));
  EXPECT_NE(after.find("swordfish"), std::string::npos) << full.dump();
  // The webhook heard of the completion, naming the published adapter.
  const std::vector<json> heard = hook.wait_for(1);
  ASSERT_EQ(heard.size(), 1u);
  EXPECT_EQ(heard[0]["job_id"], job["job_id"]);
  EXPECT_EQ(heard[0]["status"], "completed");
  EXPECT_EQ(heard[0]["adapter_name"], "pw");
  EXPECT_TRUE(heard[0]["error"].is_null()) << heard[0].dump();
}

// The training controls over HTTP, all at once: 6 conversations, 2 held out (eval_fraction 0.25,
// rounded up), the other 4 cut to max_seq_length 24 tokens (their answers are longer; the prompt
// and part of each answer stay) and packed one to a sequence (two do not fit in 24), batch 1 with
// 2 micro-batches a step: 2 steps an epoch, 4 in all. The status and the receipt carry a gradient
// norm and a rate per step (linear decay after a 1-step warmup: 1, 1, 2/3, 1/3 of the peak) and the
// held-out loss after steps 2 and 4.
TEST(TrainHttp, ControlsShapeTheJobAndTheirCurvesReachTheStatusAndTheReceipt) {
  Server s;
  ASSERT_TRUE(s.stack);
  json examples = json::array();
  for (int i = 0; i < 6; ++i) {
    std::string answer;
    for (int w = 0; w < 30; ++w) answer += std::string(w ? " " : "") + "word" + std::to_string(i * 30 + w);
    examples.push_back(conversation("Question " + std::to_string(i), answer));
  }
  const json config = {{"lora_rank", 2}, {"learning_rate", 0.01}, {"epochs", 2}, {"seed", 4}, {"batch_size", 1},
                       {"gradient_accumulation_steps", 2}, {"lr_schedule", "linear"}, {"warmup_steps", 1},
                       {"max_grad_norm", 0.5}, {"eval_fraction", 0.25}, {"eval_every", 2}, {"max_seq_length", 24},
                       {"packing", true}, {"output_name", "controls"}, {"auto_load", false}};
  const json done = s.wait_job(s.post("/v1/train/sft", {{"examples", examples}, {"config", config}})["job_id"]);
  ASSERT_EQ(done["state"], "completed") << done.dump();
  EXPECT_EQ(done["total_steps"], 4);
  EXPECT_EQ(done["trained_tokens"], 2 * 4 * 24);  // every trained conversation cut to 24 tokens
  ASSERT_EQ(done["lr_curve"].size(), 4u);
  const double want[] = {0.01, 0.01, 0.01 * 2 / 3, 0.01 / 3};
  for (size_t i = 0; i < 4; ++i) EXPECT_NEAR(done["lr_curve"][i].get<double>(), want[i], 1e-8) << done["lr_curve"].dump();
  ASSERT_EQ(done["grad_norm_curve"].size(), 4u);
  for (const json& n : done["grad_norm_curve"]) EXPECT_GT(n.get<double>(), 0.0) << done["grad_norm_curve"].dump();
  EXPECT_EQ(done["grad_norm"], done["grad_norm_curve"].back());
  ASSERT_EQ(done["eval_loss_curve"].size(), 2u) << done.dump();
  EXPECT_EQ(done["eval_loss_curve"][0]["step"], 2);
  EXPECT_EQ(done["eval_loss_curve"][1]["step"], 4);
  EXPECT_GT(done["eval_loss_curve"][1]["loss"].get<double>(), 0.0);
  EXPECT_EQ(done["eval_loss"], done["eval_loss_curve"][1]["loss"]);
  const json receipt = json::parse(file_bytes(s.config.model.adapter_dir + "/controls/train_receipt.json"));
  for (const char* curve : {"loss_curve", "grad_norm_curve", "lr_curve", "eval_loss_curve"})
    EXPECT_EQ(receipt[curve], done[curve]) << curve;
  const json& hp = receipt["hyperparameters"];
  for (const char* key : {"gradient_accumulation_steps", "lr_schedule", "warmup_steps", "eval_every", "max_seq_length",
                          "packing"})
    EXPECT_EQ(hp[key], config[key]) << key;
  for (const char* key : {"max_grad_norm", "eval_fraction"})
    EXPECT_FLOAT_EQ(hp[key].get<float>(), config[key].get<float>()) << key;
}

// The CPU backend saying it computes on a device of `bytes`: the server plans that memory and
// admits jobs against it as it does a CUDA device's.
class SmallDevice final : public testing::ForwardingBackend {
 public:
  explicit SmallDevice(uint64_t bytes) : ForwardingBackend(std::move(create_backend("cpu").value())) {
    caps_ = inner().capabilities();
    caps_.storage.device_memory_bytes = bytes;
  }
  const BackendCapabilities& capabilities() const override { return caps_; }

 private:
  BackendCapabilities caps_;
};

TEST(TrainHttp, AJobOverTheDevicesTrainingRoomIs507WithTheNumbersAndIsNotQueued) {
  // 128 MiB: 90% of it less the tiny model's weights, slots and 64 K/V blocks leaves tens of MB;
  // a few short conversations fit, while a 370-token one needs 370 x 151,936 f32 logits (225 MB).
  auto started = ServingStack::start(test_config(), nullptr, nullptr, std::make_unique<SmallDevice>(uint64_t{128} << 20));
  ASSERT_TRUE(started.ok()) << started.status().to_string();
  std::unique_ptr<ServingStack> stack = std::move(*started);
  httplib::Client cli("127.0.0.1", stack->port());
  cli.set_read_timeout(60, 0);
  std::string long_text;
  for (int i = 0; i < 350; ++i) long_text += " word";
  const json big = {{"examples", {conversation(long_text, "fine")}}, {"config", {{"output_name", "big"}}}};
  auto r = cli.Post("/v1/train/sft", big.dump(), "application/json");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 507) << r->body;
  const json err = json::parse(r->body)["error"];
  EXPECT_EQ(err["code"], "insufficient_device_memory");
  EXPECT_EQ(err["type"], "server_error");
  const std::string m = err["message"];
  for (const char* part : {"the job needs 0.2", "GiB is free for training under the 0.12 GiB device (90% of it",
                           "of K/V blocks", "Its estimate: ", "logits 0.2"})
    EXPECT_NE(m.find(part), std::string::npos) << part << " not in: " << m;
  auto q = cli.Get("/v1/train/queue");
  ASSERT_TRUE(q && q->status == 200);
  EXPECT_TRUE(json::parse(q->body)["data"].empty()) << q->body;
  // A short job on the same server is admitted.
  const json small = {{"examples", {conversation("hi", "hello")}}, {"config", {{"lora_rank", 2}, {"output_name", "small"}}}};
  r = cli.Post("/v1/train/sft", small.dump(), "application/json");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200) << r->body;
}

TEST(TrainHttp, MaintenanceProfileRefusesInferenceButAdmitsTrainingAndAdapters) {
  KilnConfig c = test_config();
  // The profile as `kiln serve --set server.profile=maintenance` resolves it, and that
  // resolution as GET /v1/config reports it.
  ConfigInputs in;
  in.default_file = "";
  in.flags = {{"server.profile", "maintenance", "--set"}};
  const ResolvedConfig resolved = load_config(in).value();
  c.server.profile = resolved.config.server.profile;
  Server s(c, config_to_json(resolved));
  ASSERT_TRUE(s.stack);
  json h = s.get("/health", 503);
  EXPECT_EQ(h["status"], "maintenance");
  EXPECT_EQ(h["profile"], "maintenance");
  EXPECT_EQ(s.get("/v1/config")["server"]["profile"],
            json({{"value", "maintenance"}, {"source", "flag"}, {"flag", "--set"}}));
  EXPECT_EQ(s.post("/v1/chat/completions", chat("Hello"), 503)["error"]["code"], "maintenance");
  testing::write_random_adapter(c.model.adapter_dir + "/m", 2, 3);
  s.post("/v1/adapters/load", {{"name", "m"}});
  EXPECT_EQ(s.get("/v1/adapters")["data"].size(), 1u);
  json job = s.post("/v1/train/sft", {{"examples", {conversation("a", "b")}}, {"config", {{"lora_rank", 2}}}});
  EXPECT_EQ(s.wait_job(job["job_id"])["state"], "completed");
}

// A backend whose training gates have no passing evidence (the built-in report with the CPU's
// rows of them marked failed): `stable` refuses training with a 503 naming the gates and still
// serves inference; `experimental` admits training too.
TEST(TrainHttp, StableRefusesTrainingUnderQualificationAndExperimentalAdmitsIt) {
  json report = json::parse(embedded_capability_report());
  const auto& training_gates = RouteGates::gates_of(RouteFamily::kTraining);
  for (auto& gate : report["gates"])
    if (std::find(training_gates.begin(), training_gates.end(), gate["name"]) != training_gates.end())
      for (auto& row : gate["backends"])
        if (row["backend"] == "cpu") row["status"] = "failed";
  const json job = {{"examples", {conversation("a", "b")}}, {"config", {{"lora_rank", 2}}}};
  {
    Server s(test_config(), nullptr, report);
    ASSERT_TRUE(s.stack);
    json refused = s.post("/v1/train/sft", job, 503);
    EXPECT_EQ(refused["error"]["code"], "route_under_qualification");
    const std::string msg = refused["error"]["message"];
    EXPECT_NE(msg.find("optimizer_parity (failed)"), std::string::npos) << msg;
    EXPECT_NE(msg.find("one_step_training_proof (failed)"), std::string::npos) << msg;
    EXPECT_NE(msg.find("experimental"), std::string::npos) << msg;
    EXPECT_EQ(s.post("/v1/train/grpo", json::object(), 503)["error"]["code"], "route_under_qualification");
    EXPECT_EQ(s.get("/v1/train/queue")["data"].size(), 0u);
    s.post("/v1/chat/completions", chat("Hello"));  // inference's gates are covered: served
  }
  KilnConfig c = test_config();
  c.server.profile = "experimental";
  Server s(c, nullptr, report);
  ASSERT_TRUE(s.stack);
  EXPECT_EQ(s.get("/health")["profile"], "experimental");
  json admitted = s.post("/v1/train/sft", job);
  EXPECT_EQ(s.wait_job(admitted["job_id"])["state"], "completed");
}

TEST(TrainHttp, GrpoJobCompletesWithoutAutoLoad) {
  Server s;
  ASSERT_TRUE(s.stack);
  const json group = {{"messages", {{{"role", "user"}, {"content", "Say yes or no"}}}},
                      {"completions", {{{"text", "yes"}, {"reward", 1.0}}, {{"text", "no"}, {"reward", 0.0}}}}};
  json job = s.post("/v1/train/grpo", {{"groups", {group}},
                                       {"config", {{"lora_rank", 2}, {"epochs", 2}, {"auto_load", false},
                                                   {"kl_estimator", "k3"}, {"output_name", "g"}}}});
  EXPECT_EQ(job["job_type"], "grpo");
  json done = s.wait_job(job["job_id"]);
  ASSERT_EQ(done["state"], "completed") << done.dump();
  EXPECT_EQ(done["loss_curve"].size(), 2u);
  EXPECT_TRUE(done["adapter_revision"].is_null());  // not loaded
  EXPECT_TRUE(done["timings"]["load_seconds"].is_null()) << done["timings"].dump();
  EXPECT_GT(done["timings"]["publish_seconds"].get<double>(), 0.0) << done["timings"].dump();
  EXPECT_TRUE(s.get("/v1/adapters")["default_adapter"].is_null());
  json receipt = json::parse(file_bytes(s.config.model.adapter_dir + "/g/train_receipt.json"));
  EXPECT_EQ(receipt["job_type"], "grpo");
  EXPECT_EQ(receipt["hyperparameters"]["kl_estimator"], "k3");
  EXPECT_EQ(receipt["hyperparameters"]["advantage_mode"], "dr_grpo");
}

// Runs `kiln ARGS`, its stdout (and what `redirect` adds) into `out`; returns the exit code.
int run_kiln(const std::string& args, std::string& out, const std::string& redirect = "2>/dev/null") {
  out.clear();
  FILE* p = ::popen((std::string(KILN_BINARY_PATH) + " " + args + " " + redirect).c_str(), "r");
  if (!p) return -1;
  char buf[4096];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, p)) > 0) out.append(buf, n);
  return WEXITSTATUS(::pclose(p));
}

// `kiln bench correction` against a running server: each correction is a job that completes,
// publishes the next revision of its adapter and swaps it in, and the request after it is answered
// by that revision (the bench checks it and fails otherwise); the job's phases lie inside the
// end-to-end time it reports; the server is left without the bench's adapter, and one that serves
// a default adapter is refused.
TEST(TrainHttp, BenchCorrectionTimesEachCorrectionUpToItsSwap) {
  Server s;
  ASSERT_TRUE(s.stack);
  const std::string url = " --url " + s.stack->base_url();
  std::string out;
  ASSERT_EQ(run_kiln("bench correction" + url + " --tokens 96 --repeats 3 --lora-rank 2 --optimizer adam_w --name fix", out), 0)
      << out;
  const json doc = json::parse(out);
  EXPECT_EQ(doc["backend"], "cpu");
  ASSERT_EQ(doc["runs"].size(), 3u);
  std::vector<double> warm;
  for (int i = 0; i < 3; ++i) {
    const json& r = doc["runs"][i];
    EXPECT_EQ(r["adapter_revision"], i + 1) << r.dump();
    EXPECT_GE(r["trained_tokens"].get<int64_t>(), 72) << r.dump();  // about the 96 asked for
    EXPECT_LE(r["trained_tokens"].get<int64_t>(), 120) << r.dump();
    double phases = 0;
    for (const char* p : {"train_seconds", "publish_seconds", "load_seconds"}) {
      EXPECT_GT(r[p].get<double>(), 0.0) << p << " in " << r.dump();
      phases += r[p].get<double>();
    }
    EXPECT_LE(phases, r["end_to_end_seconds"].get<double>()) << r.dump();
    if (i > 0) warm.push_back(r["end_to_end_seconds"].get<double>());
  }
  EXPECT_EQ(doc["cold_end_to_end_seconds"], doc["runs"][0]["end_to_end_seconds"]);
  const double median = doc["median_end_to_end_seconds"].get<double>();
  EXPECT_DOUBLE_EQ(median, 0.5 * (warm[0] + warm[1]));
  EXPECT_EQ(doc["meets_target"], median < 1.0);
  // The server is left as it was: no adapter loaded, none on disk, no default.
  const json adapters = s.get("/v1/adapters");
  EXPECT_TRUE(adapters["default_adapter"].is_null()) << adapters.dump();
  EXPECT_TRUE(adapters["data"].empty()) << adapters.dump();
  EXPECT_FALSE(fs::exists(s.config.model.adapter_dir + "/fix"));
  EXPECT_NE(run_kiln("bench correction" + url + " --tokens 8", out, "2>&1"), 0);
  EXPECT_NE(out.find("--tokens must be at least 32, got 8"), std::string::npos) << out;
  // A server with a default adapter would have it replaced: refused, naming it, before any job.
  testing::write_random_adapter(s.config.model.adapter_dir + "/mine", 2, 5);
  s.post("/v1/adapters/load", {{"name", "mine"}, {"default", true}});
  EXPECT_NE(run_kiln("bench correction" + url + " --tokens 64", out, "2>&1"), 0);
  EXPECT_NE(out.find("serves adapter 'mine' by default"), std::string::npos) << out;
  EXPECT_EQ(s.get("/v1/train/queue")["data"].size(), 3u) << "no job beyond the bench's three";
}

// `kiln train sft --file` and `kiln adapters ...` against a running server, through the binary.
TEST(TrainHttp, CliTrainsAndManagesAdapters) {
  Server s;
  ASSERT_TRUE(s.stack);
  const std::string data = s.config.model.adapter_dir + "-data.jsonl";
  {
    std::ofstream out(data);
    for (int i = 0; i < 3; ++i) out << conversation("ping", "pong").dump() << "\n";
  }
  auto run = [](const std::string& args, std::string& out) { return run_kiln(args, out); };
  const std::string url = " --url " + s.stack->base_url();
  std::string out;
  ASSERT_EQ(run("train sft --file " + data + url + " --poll 0.05 --config-json '{\"lora_rank\": 2, \"output_name\": \"cli\"}'", out), 0) << out;
  json done = json::parse(out);
  EXPECT_EQ(done["state"], "completed");
  EXPECT_EQ(done["adapter_name"], "cli");
  ASSERT_EQ(run("adapters list" + url, out), 0);
  EXPECT_EQ(json::parse(out)["default_adapter"], "cli");
  ASSERT_EQ(run("adapters unload cli" + url, out), 0);
  ASSERT_EQ(run("adapters load cli --default" + url, out), 0);
  EXPECT_EQ(json::parse(out)["revision"], 2);
  ASSERT_EQ(run("adapters delete cli" + url, out), 0);
  EXPECT_NE(run("adapters delete cli" + url, out), 0);  // 404 now
  EXPECT_NE(run("train sft --file " + data + url + " --config-json '{\"lora_rank\": 0}'", out), 0);
  fs::remove(data);
}

// The default cap holds a rank-64 f32 adapter of Qwen3.5-4B on all ten targets with 10% to spare:
// 8 attention layers (q 2560+8192, k and v 2560+1024, o 4096+2560), 24 Gated DeltaNet layers
// (in_proj_qkv 2560+8192, in_proj_z and out_proj 2560+4096), 32 MLPs (3 x 2560+9216): the inputs
// plus outputs sum to 1,904,640; x 64 ranks x 4 bytes = 487,587,840 (465 MiB).
TEST(TrainHttp, MaxAdapterBytesByDefaultHoldsARank64F32AdapterOfQwen35_4B) {
  const ModelConfig mc = preset_config("qwen3.5-4b").value();
  int64_t in_plus_out = 0, projections = 0;
  for (int64_t l = 0; l < mc.num_layers; ++l)
    for (int t = 0; t < kLoraTargetCount; ++t)
      if (lora_target_in_layer(static_cast<LoraTarget>(t), mc.layer_types[l])) {
        const LoraDims d = lora_target_dims(mc, static_cast<LoraTarget>(t));
        in_plus_out += d.in + d.out;
        ++projections;
      }
  EXPECT_EQ(projections, 200);
  EXPECT_EQ(in_plus_out, 1904640);
  const int64_t adapter = 64 * 4 * in_plus_out;
  const int64_t cap = KilnConfig{}.server.max_adapter_bytes;
  EXPECT_GE(cap, adapter + adapter / 10);
  EXPECT_LE(cap, adapter + adapter / 5);
}

// Each hostile upload is refused naming the entry, and none leaves an adapter or a staging folder.
TEST(TrainHttp, UploadsWithLinksAbsoluteOrDotDotNamesOrCutShortAre400AndLeaveNothing) {
  Server s;
  ASSERT_TRUE(s.stack);
  const std::string dir = s.config.model.adapter_dir;
  testing::write_random_adapter(dir + "/orig", 2, 5);
  const std::string cfg = file_bytes(dir + "/orig/adapter_config.json");
  const std::string weights = file_bytes(dir + "/orig/adapter_model.safetensors");
  using K = testing::ArchiveEntry::Kind;
  const std::string whole = testing::make_tar_gz({{"adapter_config.json", cfg}, {"adapter_model.safetensors", weights}});
  const std::vector<std::pair<std::string, std::string>> cases = {
      {testing::make_tar_gz({{"adapter_config.json", cfg}, {"adapter_model.safetensors", "", K::kSymlink, "/etc/passwd"}}),
       "'adapter_model.safetensors': only regular files"},
      {testing::make_tar_gz({{"/tmp/adapter_config.json", cfg}}), "'/tmp/adapter_config.json': absolute paths"},
      {testing::make_tar_gz({{"../adapter_config.json", cfg}}), "'../adapter_config.json': '..'"},
      {whole.substr(0, whole.size() / 2), "truncated gzip input"},
  };
  for (const auto& [body, why] : cases) {
    auto r = s.client().Post("/v1/adapters/upload?name=hostile", body, "application/gzip");
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, 400) << why << ": " << r->body;
    const json err = json::parse(r->body)["error"];
    EXPECT_EQ(err["param"], "body");
    EXPECT_NE(err["message"].get<std::string>().find(why), std::string::npos) << err.dump();
    EXPECT_FALSE(has_staging(dir)) << why;
  }
  EXPECT_FALSE(fs::exists(dir + "/hostile"));
  EXPECT_FALSE(fs::exists(dir + "/../adapter_config.json"));
  EXPECT_EQ(s.client().Post("/v1/adapters/upload?name=whole", whole, "application/gzip")->status, 200);
}

// A body the client stops sending halfway (it goes away): the spool it was streaming into goes.
TEST(TrainHttp, AnUploadWhoseClientLeavesMidBodyLeavesNoStagingFolder) {
  Server s;
  ASSERT_TRUE(s.stack);
  const std::string dir = s.config.model.adapter_dir;
  fs::create_directories(dir);
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(s.stack->port()));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0);
  const std::string head = "POST /v1/adapters/upload?name=cut HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/gzip\r\n"
                           "Content-Length: 200000\r\n\r\n";
  const std::string half(100000, 'x');
  ASSERT_EQ(::send(fd, head.data(), head.size(), 0), static_cast<ssize_t>(head.size()));
  ASSERT_EQ(::send(fd, half.data(), half.size(), 0), static_cast<ssize_t>(half.size()));
  auto within_10s = [](const auto& pred) {
    for (int i = 0; i < 400 && !pred(); ++i) std::this_thread::sleep_for(25ms);
    return pred();
  };
  EXPECT_TRUE(within_10s([&] { return has_staging(dir); })) << "the upload never began spooling its body";
  ::close(fd);
  EXPECT_TRUE(within_10s([&] { return !has_staging(dir); })) << "a staging folder is left after the client went away";
  EXPECT_FALSE(fs::exists(dir + "/cut"));
}

// server.max_adapter_bytes caps the body (its Content-Length, refused before it is read) and what
// it extracts to; it is the upload's limit, not server.max_body_bytes, which caps every other route.
TEST(TrainHttp, UploadsOverMaxAdapterBytesAre413NamingItWhileMaxBodyBytesCapsOtherRoutes) {
  KilnConfig c = test_config();
  c.server.max_adapter_bytes = 256 << 10;
  c.server.max_body_bytes = 4096;
  Server s(c);
  ASSERT_TRUE(s.stack);
  const std::string dir = c.model.adapter_dir;
  testing::write_random_adapter(dir + "/orig", 4, 9);
  const std::string archive = testing::make_tar_gz({{"adapter_config.json", file_bytes(dir + "/orig/adapter_config.json")},
                                                    {"adapter_model.safetensors", file_bytes(dir + "/orig/adapter_model.safetensors")}});
  ASSERT_GT(archive.size(), 4096u);
  ASSERT_LT(archive.size(), 256u << 10);
  auto fits = s.client().Post("/v1/adapters/upload?name=fits", archive, "application/gzip");
  ASSERT_TRUE(fits);
  EXPECT_EQ(fits->status, 200) << "an archive over max_body_bytes but within max_adapter_bytes: " << fits->body;
  auto chat_body = chat(std::string(5000, 'a')).dump();
  auto big_chat = s.client().Post("/v1/chat/completions", chat_body, "application/json");
  ASSERT_TRUE(big_chat);
  EXPECT_EQ(big_chat->status, 413);
  EXPECT_NE(big_chat->body.find("server.max_body_bytes allows 4096"), std::string::npos) << big_chat->body;

  std::string noise(300 << 10, '\0');
  uint32_t x = 1;
  for (char& ch : noise) ch = static_cast<char>((x = x * 1664525u + 1013904223u) >> 24);
  const std::string too_big = testing::make_tar_gz({{"adapter_model.safetensors", noise}});
  const std::string bomb = testing::make_tar_gz({{"adapter_model.safetensors", std::string(64 << 20, '\0')}});
  ASSERT_LT(bomb.size(), 256u << 10) << "a small body that inflates 256-fold past the cap";
  auto declared = s.client().Post("/v1/adapters/upload?name=big", too_big, "application/gzip");
  auto inflated = s.client().Post("/v1/adapters/upload?name=big", bomb, "application/gzip");
  const std::vector<std::pair<httplib::Result*, std::string>> refused = {
      {&declared, "server.max_adapter_bytes allows 262144"},
      {&inflated, "the adapter archive's files total more than server.max_adapter_bytes (262144 bytes)"}};
  for (const auto& [r, message] : refused) {
    ASSERT_TRUE(*r) << message;
    EXPECT_EQ((*r)->status, 413) << (*r)->body;
    EXPECT_NE(json::parse((*r)->body)["error"]["message"].get<std::string>().find(message), std::string::npos) << (*r)->body;
  }
  // Chunked, no length to refuse up front: the route counts the bytes and stops at the cap.
  auto streamed = s.client().Post(
      "/v1/adapters/upload?name=big",
      [&too_big](size_t offset, httplib::DataSink& sink) {
        if (offset < too_big.size()) sink.write(too_big.data() + offset, std::min<size_t>(16 << 10, too_big.size() - offset));
        else sink.done();
        return true;
      },
      "application/gzip");
  ASSERT_TRUE(streamed) << httplib::to_string(streamed.error());
  EXPECT_EQ(streamed->status, 413) << streamed->body;
  EXPECT_NE(streamed->body.find("the adapter archive is larger than server.max_adapter_bytes (262144 bytes)"), std::string::npos)
      << streamed->body;
  EXPECT_FALSE(fs::exists(dir + "/big"));
  EXPECT_FALSE(has_staging(dir));
}

// What a crash left in the adapter and eval-suite folders is cleared when a server starts: staging
// leftovers go, a version moved aside returns to its missing name, a failed publication stays.
TEST(TrainHttp, StartupSweepsStagingLeftoversAndKeepsFailedPublications) {
  KilnConfig c = test_config();
  const std::string dir = c.model.adapter_dir;
  const std::string suites = c.server.state_dir + "/eval-suites";
  const std::string hex = "-0123456789abcdef";
  testing::write_random_adapter(dir + "/.replaced-back" + hex, 2, 3);
  testing::write_random_adapter(dir + "/.failed-pw" + hex, 2, 4);
  fs::create_directories(dir + "/.staging-pw" + hex);
  fs::create_directories(dir + "/pw.checkpoints/.staging-step-4" + hex);
  fs::create_directories(suites + "/.staging-caps" + hex);
  std::ofstream(dir + "/.staging-pw.upload" + hex) << "half a body";
  Server s(c);
  ASSERT_TRUE(s.stack);
  std::vector<std::string> left;
  for (const auto& e : fs::directory_iterator(dir)) left.push_back(e.path().filename().string());
  std::sort(left.begin(), left.end());
  EXPECT_EQ(left, (std::vector<std::string>{".failed-pw" + hex, "back", "pw.checkpoints"}));
  EXPECT_TRUE(fs::is_empty(dir + "/pw.checkpoints"));
  EXPECT_FALSE(fs::exists(suites + "/.staging-caps" + hex));
  EXPECT_EQ(s.post("/v1/adapters/load", {{"name", "back"}})["name"], "back");
}

}  // namespace
}  // namespace kiln
