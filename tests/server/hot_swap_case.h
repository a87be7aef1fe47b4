// Hot-swap under load, the case every backend's test runs: 16 clients stream chat requests
// without pause on the tiny-chat model while an SFT job with auto_load trains, publishes and makes
// its adapter the default. Requests name no adapter, so each resolves the default at submit:
// revision 1 (a random adapter loaded before the job) or revision 2 (the job's). Asserted: no
// request fails; every chunk of a response names one and the same stack (the `adapters` field,
// docs/serving.md), of revision 1 or 2; each response's text is, token for token, the greedy
// answer of that prompt under the revision it names (recorded for revision 1 before the job and
// for revision 2 after it, without load, on the same backend), so no response mixes tokens of two
// revisions; requests were served while the job ran; the first request after the job completed
// uses revision 2.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <filesystem>
#include <map>
#include <mutex>
#include <random>
#include <thread>

#include <httplib.h>
#include <nlohmann/json.hpp>

#include "backend/registry.h"
#include "model/init.h"
#include "model/lora_adapter.h"
#include "server/serving_stack.h"
#include "tiny_chat_dir.h"
#include "tokenizer/qwen3_fixture.h"

namespace kiln::testing::hot_swap {

namespace fs = std::filesystem;
using json = nlohmann::json;
using namespace std::chrono_literals;

inline constexpr int kClients = 16;
inline constexpr int kMaxTokens = 6;
inline const std::vector<std::string> kPrompts = {"What is the password?", "Hello", "Tell me a story", "Name a colour"};

struct Dir {
  std::string path = (fs::temp_directory_path() / ("kiln-hot-swap-" + std::to_string(::getpid()))).string();
  ~Dir() { fs::remove_all(path); }
};

inline json chat_body(const std::string& prompt, bool stream) {
  return {{"messages", {{{"role", "user"}, {"content", prompt}}}}, {"max_tokens", kMaxTokens}, {"temperature", 0},
          {"stream", stream}, {"chat_template_kwargs", {{"enable_thinking", false}}}};
}

// One streamed response, taken apart.
struct Streamed {
  int status = 0;
  bool done = false;        // ended with data: [DONE]
  std::string text, error;  // error: an error event or a malformed stream
  std::vector<json> stacks;  // the `adapters` field of every chunk
};

inline Streamed stream_chat(int port, const std::string& prompt) {
  Streamed out;
  httplib::Client cli("127.0.0.1", port);
  cli.set_read_timeout(60, 0);
  auto r = cli.Post("/v1/chat/completions", chat_body(prompt, true).dump(), "application/json");
  if (!r) {
    out.error = "no response: " + httplib::to_string(r.error());
    return out;
  }
  out.status = r->status;
  size_t pos = 0;
  const std::string& b = r->body;
  while (pos < b.size()) {
    size_t end = b.find("\n\n", pos);
    if (end == std::string::npos) end = b.size();
    const std::string ev = b.substr(pos, end - pos);
    pos = end + 2;
    if (ev.rfind("data: ", 0) != 0) continue;
    const std::string data = ev.substr(6);
    if (data == "[DONE]") {
      out.done = true;
      continue;
    }
    json j = json::parse(data, nullptr, false);
    if (j.is_discarded() || j.contains("error")) {
      out.error = data;
      continue;
    }
    out.stacks.push_back(j.value("adapters", json(nullptr)));
    for (const auto& c : j["choices"])
      if (c["delta"].contains("content")) out.text += c["delta"]["content"].get<std::string>();
  }
  return out;
}

inline json get(int port, const std::string& path) {
  httplib::Client cli("127.0.0.1", port);
  auto r = cli.Get(path.c_str());
  return r && r->status == 200 ? json::parse(r->body) : json();
}

inline json post(int port, const std::string& path, const json& body) {
  httplib::Client cli("127.0.0.1", port);
  cli.set_read_timeout(60, 0);
  auto r = cli.Post(path.c_str(), body.dump(), "application/json");
  EXPECT_TRUE(r && r->status == 200) << path << ": " << (r ? r->body : "no response");
  return r && r->status == 200 ? json::parse(r->body) : json();
}

// The greedy reply and stack of each prompt, one request at a time (no load).
inline std::map<std::string, Streamed> replies(int port) {
  std::map<std::string, Streamed> out;
  for (const auto& p : kPrompts) out[p] = stream_chat(port, p);
  return out;
}

inline uint64_t revision_of(const json& stack) {
  return stack.is_array() && stack.size() == 1 && stack[0].value("name", "") == "swap"
             ? stack[0].value("revision", uint64_t{0})
             : 0;
}

// The case on `backend` ("cpu", "cuda"): the server's model runs there; the training job too.
inline void expect_one_revision_per_response(const std::string& backend) {
  Dir dir;
  KilnConfig c = testing::tiny_chat_server_config(dir.path);
  c.model.backend = backend;
  c.server.max_decode_batch = kClients;
  c.memory.kv_blocks = 2 * kClients + 8;
  testing::write_random_adapter(c.model.adapter_dir + "/swap", 4, 5);
  auto started = ServingStack::start(c);
  ASSERT_TRUE(started.ok()) << started.status().to_string();
  std::unique_ptr<ServingStack> stack = std::move(*started);
  const int port = stack->port();
  post(port, "/v1/adapters/load", {{"name", "swap"}, {"default", true}});
  const auto before = replies(port);
  for (const auto& [p, r] : before) ASSERT_EQ(revision_of(r.stacks.at(0)), 1u) << p;

  // The job: a few dozen optimizer steps on the engine's thread, between the clients' cycles.
  json examples = json::array();
  for (int i = 0; i < 4; ++i)
    examples.push_back({{"messages", {{{"role", "user"}, {"content", "What is the password?"}},
                                      {{"role", "assistant"}, {"content", "swordfish swordfish swordfish"}}}}});
  std::atomic<bool> stop{false}, job_submitted{false}, job_done{false};
  std::mutex mu;
  std::vector<std::pair<std::string, Streamed>> seen;  // (prompt, response)
  int during_job = 0;                                  // responses that ended while the job was queued or ran
  std::vector<std::thread> clients;
  for (int k = 0; k < kClients; ++k)
    clients.emplace_back([&, k] {
      for (int i = 0; !stop.load(); ++i) {
        const std::string& p = kPrompts[static_cast<size_t>(k + i) % kPrompts.size()];
        Streamed r = stream_chat(port, p);
        std::lock_guard<std::mutex> lock(mu);
        if (job_submitted.load() && !job_done.load()) ++during_job;
        seen.emplace_back(p, std::move(r));
      }
    });
  std::this_thread::sleep_for(300ms);  // the clients are streaming before the job is queued
  json job = post(port, "/v1/train/sft",
                  {{"examples", examples},
                   {"config", {{"lora_rank", 4}, {"learning_rate", 0.01}, {"epochs", 6}, {"seed", 3},
                               {"optimizer", {{"kind", "adam_w"}}}, {"output_name", "swap"}, {"replace", true}}}});
  job_submitted.store(true);
  json status;
  for (int i = 0; i < 1200; ++i) {
    status = get(port, "/v1/train/status/" + job.value("job_id", std::string()));
    const std::string st = status.value("state", "");
    if (st == "completed" || st == "failed" || st == "cancelled") break;
    std::this_thread::sleep_for(50ms);
  }
  job_done.store(true);
  // The first request after the job completed resolves the new revision.
  Streamed next = stream_chat(port, kPrompts[0]);
  // A little more load on the new revision: until a client's own response comes from it (a fixed
  // sleep was not enough on a starved 2-core runner, where one response can outlast it).
  const auto has_revision_2 = [&] {
    std::lock_guard<std::mutex> lock(mu);
    return std::any_of(seen.begin(), seen.end(), [](const auto& e) {
      return !e.second.stacks.empty() && revision_of(e.second.stacks.front()) == 2u;
    });
  };
  for (int i = 0; i < 3000 && !has_revision_2(); ++i) std::this_thread::sleep_for(10ms);
  stop.store(true);
  for (auto& t : clients) t.join();
  ASSERT_EQ(status.value("state", ""), "completed") << status.dump();
  EXPECT_EQ(status["adapter_revision"], 2);
  ASSERT_TRUE(next.error.empty()) << next.error;
  EXPECT_EQ(revision_of(next.stacks.at(0)), 2u);
  const auto after = replies(port);  // revision 2, no load

  // The text check has power only where the revisions answer differently.
  int differ = 0;
  for (const auto& p : kPrompts) differ += before.at(p).text != after.at(p).text;
  EXPECT_GE(differ, 1) << "the two revisions answer every prompt alike: the text check proves nothing";

  std::map<uint64_t, int> by_revision;
  for (const auto& [p, r] : seen) {
    ASSERT_EQ(r.status, 200) << p << ": " << r.error;
    ASSERT_TRUE(r.error.empty()) << p << ": " << r.error;
    ASSERT_TRUE(r.done) << p << ": the stream did not end with [DONE]";
    ASSERT_FALSE(r.stacks.empty());
    for (const json& s : r.stacks) ASSERT_EQ(s, r.stacks.front()) << p << ": one response names two stacks";
    const uint64_t rev = revision_of(r.stacks.front());
    ASSERT_TRUE(rev == 1 || rev == 2) << p << ": " << r.stacks.front().dump();
    ++by_revision[rev];
    EXPECT_EQ(r.text, (rev == 1 ? before : after).at(p).text) << p << " at revision " << rev;
  }
  std::printf("hot swap: %zu responses (%d while the job ran; revision 1: %d, revision 2: %d), job %s steps, %.1f s running\n",
              seen.size(), during_job, by_revision[1], by_revision[2], status["total_steps"].dump().c_str(),
              status["timings"]["running_seconds"].get<double>());
  EXPECT_GE(during_job, kClients) << "the clients were hardly served while the job ran";
  EXPECT_GE(by_revision[1], 1);
  EXPECT_GE(by_revision[2], 1);
}

}  // namespace kiln::testing::hot_swap
