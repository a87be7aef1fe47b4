// The kiln binary as a user runs it: help texts name the real options, bad input is refused
// with a message naming it, and generation agrees with the reference model's greedy choice.
#include <gtest/gtest.h>

#include <stdlib.h>
#include <sys/wait.h>

#include <cstdio>
#include <filesystem>
#include <string>

#include <nlohmann/json.hpp>

#include "core/build_stamp.h"
#include "model/safetensors.h"
#include "test_util.h"
#include "run_command.h"

namespace kiln {
namespace {

using testing::CommandResult;

CommandResult kiln(const std::string& args) {
  return testing::run_command(std::string(KILN_BINARY_PATH) + " " + args + " 2>&1");
}

void expect_mentions(const CommandResult& r, std::initializer_list<const char*> words) {
  for (const char* w : words) EXPECT_NE(r.out.find(w), std::string::npos) << "'" << w << "' missing from:\n" << r.out;
}

TEST(Cli, HelpListsTheCommands) {
  CommandResult r = kiln("--help");
  EXPECT_EQ(r.code, 0);
  expect_mentions(r, {"serve", "generate", "model", "bench", "config"});
}

TEST(Cli, EachSubcommandHelpNamesItsOptions) {
  CommandResult g = kiln("generate --help");
  EXPECT_EQ(g.code, 0);
  expect_mentions(g, {"--model", "--prompt-ids", "--max-tokens", "--backend", "--gdn-chunk", "--ignore-eos"});
  CommandResult i = kiln("model init --help");
  EXPECT_EQ(i.code, 0);
  expect_mentions(i, {"--preset", "tiny, tiny-chat, small, demo, qwen3.5-4b", "--seed", "--dtype", "--out"});
  CommandResult sv = kiln("serve --help");
  EXPECT_EQ(sv.code, 0);
  expect_mentions(sv, {"--model", "--port", "--host", "--backend", "--config", "--set", "--profile"});
  CommandResult b = kiln("bench --help");
  EXPECT_EQ(b.code, 0);
  expect_mentions(b, {"--model", "--backend", "--prompt-tokens", "--decode-tokens", "--repeats", "--batches",
                      "--prefill-tile", "--adapters", "--adapter-rank"});
}

TEST(Cli, RefusesBadInputNamingIt) {
  CommandResult r = kiln("generate --model /nonexistent/dir --prompt-ids 1,2");
  EXPECT_EQ(r.code, 1);
  expect_mentions(r, {"model '/nonexistent/dir': no such folder"});
  r = kiln("generate --model " + std::string(KILN_FIXTURES_DIR) + "/reference/gqa_untied --prompt-ids 1,x,3");
  EXPECT_EQ(r.code, 1);
  expect_mentions(r, {"'x' is not a token id"});
  r = kiln("generate --model " + std::string(KILN_FIXTURES_DIR) + "/reference/gqa_untied --prompt-ids 1,300");
  EXPECT_EQ(r.code, 1);
  expect_mentions(r, {"token 300 is outside the vocabulary (300)"});
  r = kiln("generate --model " + std::string(KILN_FIXTURES_DIR) + "/reference/gqa_untied --prompt-ids 1 --backend rocm");
  EXPECT_EQ(r.code, 1);
  expect_mentions(r, {"'rocm' is not built"});
  r = kiln("model init --preset huge --out /tmp/x");
  EXPECT_EQ(r.code, 1);
  expect_mentions(r, {"unknown preset 'huge'"});
  EXPECT_NE(kiln("frobnicate").code, 0);
}

// The engine decode sweep with adapters: every row decodes with one of N random adapters, and the
// roofline's bytes grow by exactly the factors the step reads (N adapters of rank r, each
// 4 r (in + out) bytes per adapted projection: a multiple of 4 N r); bad values name the option.
TEST(Cli, BenchDecodeSweepWithAdaptersCountsTheirBytes) {
  const std::string base = "bench --model " + std::string(KILN_FIXTURES_DIR) +
                           "/reference/gqa_untied --batches 4 --context 16 --decode-tokens 4 --repeats 1 "
                           "--prompt-tokens 16 --adapter-rank 4 ";
  auto point = [&](int adapters) {
    CommandResult r = kiln(base + "--adapters " + std::to_string(adapters));
    EXPECT_EQ(r.code, 0) << r.out;
    // Progress lines on stderr come first; the JSON is the rest.
    const size_t at = r.out.find('{');
    auto j = nlohmann::json::parse(at == std::string::npos ? std::string() : r.out.substr(at), nullptr, false);
    EXPECT_FALSE(j.is_discarded()) << r.out;
    return j.is_discarded() ? nlohmann::json() : j["decode_batches"]["points"][0];
  };
  const nlohmann::json none = point(0), with = point(3);
  ASSERT_TRUE(none.contains("bytes_per_step") && with.contains("bytes_per_step")) << none.dump() << with.dump();
  EXPECT_FALSE(none.contains("adapters"));
  EXPECT_EQ(with["adapters"], 3);
  EXPECT_EQ(with["adapter_rank"], 4);
  const auto extra = with["adapter_bytes_per_step"].get<int64_t>();
  EXPECT_GT(extra, 0);
  EXPECT_EQ(extra % (4 * 3 * 4), 0);
  EXPECT_DOUBLE_EQ(with["bytes_per_step"].get<double>() - none["bytes_per_step"].get<double>(), static_cast<double>(extra));
  EXPECT_GT(with["tokens_per_s"].get<double>(), 0.0);
  CommandResult bad = kiln(base + "--adapters -1");
  EXPECT_NE(bad.code, 0);
  expect_mentions(bad, {"--adapters"});
  bad = kiln(base + "--adapters 2 --adapter-rank 0");
  EXPECT_NE(bad.code, 0);
  expect_mentions(bad, {"--adapter-rank"});
}

// The commit compiled into kiln (the same generated source this test binary links) is what
// --version says and what a bench document records, with the native switches set.
TEST(Cli, VersionAndBenchDocumentsCarryTheBuildStampAndSwitches) {
  CommandResult v = kiln("--version");
  EXPECT_EQ(v.code, 0);
  EXPECT_EQ(v.out, "kiln 0.1.0 (" + build_stamp_label() + ")\n");
  ::setenv("KILN_CUDA_PDL", "0", 1);  // a native switch: recorded beside the stamp
  CommandResult b = kiln("bench --model " + std::string(KILN_FIXTURES_DIR) +
                         "/reference/gqa_untied --decode-tokens 2 --repeats 1 --prompt-tokens 8");
  ::unsetenv("KILN_CUDA_PDL");
  ASSERT_EQ(b.code, 0) << b.out;
  auto j = nlohmann::json::parse(b.out.substr(std::min(b.out.find('{'), b.out.size())), nullptr, false);
  ASSERT_FALSE(j.is_discarded()) << b.out;
  EXPECT_EQ(j["build"], build_stamp_json());
  EXPECT_EQ(j["native_switches"]["KILN_CUDA_PDL"], "0");
}

// The first generated token is the argmax of transformers' logits for the prompt's last position.
TEST(Cli, GenerateFollowsTheReferenceGreedyChoice) {
  const std::string dir = std::string(KILN_FIXTURES_DIR) + "/reference/gqa_untied";
  auto ref = Checkpoint::open_file(dir + "/reference.safetensors").value();
  const Tensor& ids = ref.find("ids")->tensor;
  const Tensor& logits = ref.find("prefill_63")->tensor;
  std::string prompt;
  for (int i = 0; i < 63; ++i) prompt += (i ? "," : "") + std::to_string(ids.data<int32_t>()[i]);
  const int64_t V = logits.dim(1);
  const float* last = logits.data<float>() + 62 * V;
  int64_t best = 0;
  for (int64_t j = 1; j < V; ++j)
    if (last[j] > last[best]) best = j;
  CommandResult r = kiln("generate --model " + dir + " --prompt-ids " + prompt + " --max-tokens 3");
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_EQ(r.out.rfind(std::to_string(best) + ",", 0), 0u) << r.out;
  expect_mentions(r, {"generated 3 tokens"});
}

TEST(Cli, ModelInitWritesALoadableCheckpoint) {
  std::string dir = testing::temp_dir("cli-init");
  CommandResult r = kiln("model init --preset tiny --seed 3 --dtype f32 --out " + dir);
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_TRUE(std::filesystem::exists(dir + "/config.json"));
  auto ck = Checkpoint::open(dir);
  ASSERT_TRUE(ck.ok());
  EXPECT_EQ(ck.value().find("model.norm.weight")->tensor.dtype(), DType::kF32);
  CommandResult g = kiln("generate --model " + dir + " --prompt-ids 5,6,7 --max-tokens 4 --ignore-eos");
  EXPECT_EQ(g.code, 0) << g.out;
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace kiln
