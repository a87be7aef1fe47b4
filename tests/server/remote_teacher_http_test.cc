// OPD with a remote teacher (training.teacher_url): a second Kiln serving the same model gives the
// same per-token log-probabilities as the student's own engine, so a job gives the same curves
// with either teacher; a teacher whose tokenizer differs (by its hash, or by its /tokenize of the
// probe text) is refused before any scoring; a teacher answering 500 or too slowly fails the job
// after 1 + training.teacher_retries calls; a request can ask for the remote teacher but never name
// a URL. The answer's two shapes (Kiln's prompt_logprobs entries and vLLM's) are read against the
// ids sent.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <httplib.h>
#include <nlohmann/json.hpp>

#include "loopback_server.h"
#include "proof_server.h"
#include "server/remote_teacher.h"

namespace kiln {
namespace {

using json = nlohmann::json;

json user(const std::string& text) { return json::array({{{"role", "user"}, {"content", text}}}); }

std::string get_text(const testing::ProofServer& s, const std::string& path) {
  httplib::Client cli("127.0.0.1", s.port());
  auto r = cli.Get(path.c_str());
  return r && r->status == 200 ? r->body : "";
}

json get(const testing::ProofServer& s, const std::string& path) { return json::parse(get_text(s, path), nullptr, false); }

// A stand-in teacher on a free port: GET /v1/models, POST /tokenize and /v1/completions answered by
// the test's handlers, each call counted.
struct FakeTeacher {
  std::atomic<int> models{0}, tokenize{0}, completions{0};
  std::mutex mu;
  std::string authorization;  // the last completions call's header
  testing::LoopbackServer server;
  FakeTeacher(std::function<json()> models_answer, std::function<json()> tokenize_answer,
              std::function<void(httplib::Response&)> completions_answer)
      : server([&](httplib::Server& s) {
          s.Get("/v1/models", [this, models_answer](const httplib::Request&, httplib::Response& res) {
            ++models;
            res.set_content(models_answer().dump(), "application/json");
          });
          s.Post("/tokenize", [this, tokenize_answer](const httplib::Request&, httplib::Response& res) {
            ++tokenize;
            res.set_content(tokenize_answer().dump(), "application/json");
          });
          s.Post("/v1/completions", [this, completions_answer](const httplib::Request& req, httplib::Response& res) {
            ++completions;
            {
              std::lock_guard<std::mutex> lock(mu);
              authorization = req.get_header_value("Authorization");
            }
            completions_answer(res);
          });
        }) {}
  std::string url() const { return server.url(); }
};

json opd_body(const std::string& name, const json& teacher) {
  return {{"prompts", {{{"messages", user("Name a colour.")}}, {{"messages", user("Count to three.")}}}},
          {"teacher", teacher},
          {"config", {{"steps", 2}, {"group_size", 2}, {"max_tokens", 4}, {"lora_rank", 2}, {"optimizer", "sgd"},
                      {"learning_rate", 1e-4}, {"seed", 7}, {"output_name", name}, {"auto_load", false}}}};
}

TEST(RemoteTeacherHttp, ASecondKilnScoresAsTheLocalTeacherSoTheCurvesAgree) {
  testing::ProofServer teacher("remote-teacher-t");
  ASSERT_TRUE(teacher.ok());
  testing::ProofServer student("remote-teacher-s", [&](KilnConfig& c) {
    c.training.teacher_url = "http://127.0.0.1:" + std::to_string(teacher.port());
  });
  ASSERT_TRUE(student.ok());
  const std::string sys = "You are terse and answer in one word.";
  const json local = student.wait_job(student.post("/v1/train/opd", opd_body("opd-local", {{"system_prompt", sys}})));
  const json remote =
      student.wait_job(student.post("/v1/train/opd", opd_body("opd-remote", {{"remote", true}, {"system_prompt", sys}})));
  ASSERT_EQ(local.value("state", ""), "completed") << local.dump();
  ASSERT_EQ(remote.value("state", ""), "completed") << remote.dump();
  ASSERT_EQ(local["reverse_kl_curve"].size(), 2u);
  ASSERT_EQ(remote["reverse_kl_curve"].size(), 2u);
  // Both are means of differences of f32 log-probabilities near -12 (a vocabulary of 151,936), each
  // rounded by a forward batched differently in the two engines: about 1e-6 a token apart. A
  // misaligned or foreign teacher is off by far more: the first step's reverse KL is itself 0.05.
  // The small SGD rate keeps the two jobs' adapters after the first step (their gradients differ by
  // that rounding) from drawing different second rollouts: at 0.5 a sampled token flipped under
  // one OpenBLAS kernel, and the second step's curves were 0.79 and 0.74.
  constexpr double kTol = 2e-5;
  for (size_t step = 0; step < 2; ++step) {
    EXPECT_NEAR(local["reverse_kl_curve"][step].get<double>(), remote["reverse_kl_curve"][step].get<double>(), kTol)
        << "step " << step;
    EXPECT_NEAR(local["loss_curve"][step].get<double>(), remote["loss_curve"][step].get<double>(), kTol)
        << "step " << step;
  }
  // The teacher's scores are not the student's own: the first step's reverse KL is not zero (the
  // system prompt and the adapter's start make them differ).
  EXPECT_GT(std::abs(local["reverse_kl_curve"][0].get<double>()), 30 * kTol);
  std::printf("reverse KL local %s remote %s; loss local %s remote %s\n", local["reverse_kl_curve"].dump().c_str(),
              remote["reverse_kl_curve"].dump().c_str(), local["loss_curve"].dump().c_str(),
              remote["loss_curve"].dump().c_str());
  // The remote job's scores came from the second server: one call per prompt per step.
  const std::string metrics = get_text(teacher, "/metrics");
  EXPECT_NE(metrics.find("kiln_requests_total{route=\"/v1/completions\",status=\"200\"} 4\n"), std::string::npos)
      << metrics;
}

TEST(RemoteTeacherHttp, PromptLogprobsOfTokenIdsScoreEveryTokenSent) {
  testing::ProofServer s("remote-teacher-ids");
  ASSERT_TRUE(s.ok());
  const std::vector<int32_t> ids = {9707, 11, 1879, 0, 151645, 198};
  const auto [status, body] = s.post_any("/v1/completions", {{"prompt", ids}, {"max_tokens", 1}, {"prompt_logprobs", 0}});
  ASSERT_EQ(status, 200) << body.dump();
  const json& entries = body["choices"][0]["prompt_logprobs"];
  ASSERT_EQ(entries.size(), ids.size());
  EXPECT_TRUE(entries[0].is_null());
  for (size_t m = 1; m < ids.size(); ++m) {
    EXPECT_EQ(entries[m]["token_id"], ids[m]) << m;
    EXPECT_LE(entries[m]["logprob"].get<double>(), 0.0) << m;
  }
  Result<std::vector<float>> read = read_prompt_logprobs(entries, ids);
  ASSERT_TRUE(read.ok()) << read.status().to_string();
  ASSERT_EQ(read->size(), ids.size() - 1);
  for (size_t m = 1; m < ids.size(); ++m) EXPECT_EQ((*read)[m - 1], entries[m]["logprob"].get<float>());
  // The hash the student compares with is the served tokenizer's, in its /v1/models entry.
  EXPECT_EQ(get(s, "/v1/models")["data"][0]["tokenizer_sha256"], tokenizer_content_sha256(testing::qwen3_dir()).value());
}

TEST(RemoteTeacher, ReadsKilnsAndVllmsPromptLogprobsAgainstTheIdsSent) {
  const std::vector<int32_t> ids = {5, 17, 3};
  const json kiln = {nullptr,
                     {{"token", "a"}, {"token_id", 17}, {"logprob", -0.25}, {"top_logprobs", json::array()}},
                     {{"token", "b"}, {"token_id", 3}, {"logprob", -2.5}, {"top_logprobs", json::array()}}};
  EXPECT_EQ(read_prompt_logprobs(kiln, ids).value(), (std::vector<float>{-0.25f, -2.5f}));
  // vLLM: the sent token beside the top-k, keyed by id; its own entry is the one read.
  const json vllm = {nullptr,
                     {{"9", {{"logprob", -0.1}, {"rank", 1}}}, {"17", {{"logprob", -1.5}, {"rank", 2}}}},
                     {{"3", {{"logprob", -0.75}, {"rank", 1}, {"decoded_token", "b"}}}}};
  EXPECT_EQ(read_prompt_logprobs(vllm, ids).value(), (std::vector<float>{-1.5f, -0.75f}));
  struct Bad {
    json entries;
    std::string says;
  };
  const std::vector<Bad> bad = {
      {json::array({nullptr, kiln[1]}), "list of 3"},
      {json::array({nullptr, kiln[1], {{"token_id", 4}, {"logprob", -1}}}), "prompt_logprobs[2] scores token 4"},
      {json::array({nullptr, vllm[1], {{"4", {{"logprob", -1}}}}}), "prompt_logprobs[2] does not score"},
      {json::array({nullptr, kiln[1], {{"token_id", 3}, {"logprob", 0.5}}}), "not a log-probability"},
      {json::array({nullptr, kiln[1], {{"token_id", 3}, {"logprob", nullptr}}}), "not a log-probability"},
      {json::array({nullptr, kiln[1], "x"}), "no log-probability"},
  };
  for (const Bad& b : bad) {
    Result<std::vector<float>> r = read_prompt_logprobs(b.entries, ids);
    ASSERT_FALSE(r.ok()) << b.entries.dump();
    EXPECT_NE(r.status().message().find(b.says), std::string::npos) << r.status().message();
  }
}

// The hash a remote teacher is checked by: the same content in another layout (keys in another
// order, other whitespace) hashes the same; one merge more does not; the served model reports it.
TEST(RemoteTeacher, TheTokenizerHashFollowsTheContentNotTheLayout) {
  const std::string dir = ::testing::TempDir();
  std::ifstream in(testing::qwen3_dir() + "/tokenizer.json");
  const json j = json::parse(in);
  const std::string hash = tokenizer_content_sha256(testing::qwen3_dir()).value();
  EXPECT_EQ(hash.size(), 64u);
  EXPECT_EQ(hash.find_first_not_of("0123456789abcdef"), std::string::npos) << hash;
  std::vector<std::string> keys;
  for (const auto& [k, v] : j.items()) keys.push_back(k);
  std::string text = "{\n";  // the top-level keys in reverse order, indented
  for (size_t i = keys.size(); i-- > 0;) text += "  \"" + keys[i] + "\" :  " + j[keys[i]].dump(3) + (i > 0 ? ",\n" : "\n");
  std::ofstream(dir + "/layout.json") << text << "}\n";
  EXPECT_EQ(tokenizer_content_sha256(dir + "/layout.json").value(), hash);
  json more = j;
  more["model"]["merges"].push_back(more["model"]["merges"][0]);
  std::ofstream(dir + "/more.json") << more.dump();
  EXPECT_NE(tokenizer_content_sha256(dir + "/more.json").value(), hash);
  EXPECT_FALSE(tokenizer_content_sha256(dir + "/absent.json").ok());
}

// A job against `teacher`, which must fail; its error.
std::string failed_job_error(FakeTeacher& teacher, const std::string& name, int64_t retries = 1, int64_t timeout = 30) {
  testing::ProofServer s(name, [&](KilnConfig& c) {
    c.training.teacher_url = teacher.url();
    c.training.teacher_retries = retries;
    c.training.teacher_timeout_seconds = timeout;
    c.training.teacher_api_key = "sk-teacher-secret";
  });
  EXPECT_TRUE(s.ok());
  if (!s.ok()) return "";
  const json st = s.wait_job(s.post("/v1/train/opd", opd_body(name, {{"remote", true}})));
  EXPECT_EQ(st.value("state", ""), "failed") << st.dump();
  const std::string error = st.value("error", "");
  EXPECT_NE(error.find("training.teacher_url"), std::string::npos) << error;
  EXPECT_NE(error.find(teacher.url()), std::string::npos) << error;
  EXPECT_EQ(error.find("sk-teacher-secret"), std::string::npos) << error;
  return error;
}

TEST(RemoteTeacherHttp, ATeacherWithAnotherTokenizerIsRefusedBeforeAnyScoring) {
  const std::string other(64, 'a');
  {  // Kiln-style: a hash that is not the student's
    FakeTeacher t([&] { return json{{"data", {{{"id", "big"}, {"tokenizer_sha256", other}}}}}; },
                  [] { return json(); }, [](httplib::Response& res) { res.status = 500; });
    const std::string error = failed_job_error(t, "remote-teacher-hash");
    EXPECT_NE(error.find("tokenizer_sha256 \"" + other + "\""), std::string::npos) << error;
    EXPECT_NE(error.find("step 1"), std::string::npos) << error;
    EXPECT_EQ(t.models.load(), 1);
    EXPECT_EQ(t.completions.load(), 0);
  }
  {  // vLLM-style: no hash, and its ids of the probe are not the student's
    FakeTeacher t([] { return json{{"data", {{{"id", "big"}}}}}; }, [] { return json{{"tokens", {1, 2, 3}}}; },
                  [](httplib::Response& res) { res.status = 500; });
    const std::string error = failed_job_error(t, "remote-teacher-probe");
    EXPECT_NE(error.find("/tokenize of the probe text differs from the student's at token 0 (1 against"),
              std::string::npos) << error;
    EXPECT_EQ(t.tokenize.load(), 1);
    EXPECT_EQ(t.completions.load(), 0);
  }
}

TEST(RemoteTeacherHttp, AFailingTeacherFailsTheJobAfterItsRetries) {
  // The student's tokenizer (the one the failing jobs' server serves): this teacher's passes.
  const std::string hash = tokenizer_content_sha256(testing::qwen3_dir()).value();
  auto models = [&] { return json{{"data", {{{"id", "big"}, {"tokenizer_sha256", hash}}}}}; };
  {
    FakeTeacher t(models, [] { return json(); }, [](httplib::Response& res) {
      res.status = 500;
      res.set_content("overloaded", "text/plain");
    });
    const std::string error = failed_job_error(t, "remote-teacher-500", /*retries=*/2);
    EXPECT_NE(error.find("HTTP 500: overloaded"), std::string::npos) << error;
    EXPECT_NE(error.find("after 3 attempts"), std::string::npos) << error;
    EXPECT_NE(error.find("prompts[0]"), std::string::npos) << error;
    EXPECT_NE(error.find("step 1"), std::string::npos) << error;
    EXPECT_EQ(t.completions.load(), 3);
    std::lock_guard<std::mutex> lock(t.mu);
    EXPECT_EQ(t.authorization, "Bearer sk-teacher-secret");
  }
  {
    FakeTeacher t(models, [] { return json(); }, [](httplib::Response& res) {
      std::this_thread::sleep_for(std::chrono::milliseconds(2500));
      res.set_content("{}", "application/json");
    });
    const std::string error = failed_job_error(t, "remote-teacher-slow", /*retries=*/1, /*timeout=*/1);
    EXPECT_NE(error.find("after 2 attempts"), std::string::npos) << error;
    EXPECT_NE(error.find("prompts[0]"), std::string::npos) << error;
    EXPECT_EQ(t.completions.load(), 2);
  }
}

TEST(RemoteTeacherHttp, ARequestAsksForTheRemoteTeacherButNeverNamesItsUrl) {
  FakeTeacher t([] { return json(); }, [] { return json(); }, [](httplib::Response&) {});
  testing::ProofServer with("remote-teacher-400", [&](KilnConfig& c) { c.training.teacher_url = t.url(); });
  testing::ProofServer without("remote-teacher-none");
  ASSERT_TRUE(with.ok() && without.ok());
  struct Case {
    const testing::ProofServer* server;
    json teacher;
    std::string param;
  };
  const std::vector<Case> cases = {
      {&with, {{"url", t.url()}}, "teacher.url"},
      {&with, {{"remote", true}, {"url", t.url()}}, "teacher.url"},
      {&with, {{"remote", "yes"}}, "teacher.remote"},
      {&with, {{"remote", true}, {"adapter", "style"}}, "teacher.adapter"},
      {&with, {{"remote", true}, {"teacher_url", "http://x/"}}, "teacher.teacher_url"},
      {&without, {{"remote", true}}, "teacher.remote"},
  };
  for (const Case& c : cases) {
    const auto [status, body] = c.server->post_any("/v1/train/opd", opd_body("refused", c.teacher));
    EXPECT_EQ(status, 400) << c.teacher.dump() << " -> " << body.dump();
    EXPECT_EQ(body["error"].value("param", ""), c.param) << c.teacher.dump() << " -> " << body.dump();
  }
  EXPECT_EQ(t.models.load() + t.completions.load(), 0);  // nothing was called
}

}  // namespace
}  // namespace kiln
