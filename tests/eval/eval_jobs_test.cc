// run_suite: every example is generated and scored in order; a hostile regex scorer costs its
// own example (scored false, the reason naming the limit) and the run goes on.
#include <gtest/gtest.h>

#include <atomic>
#include <string>

#include "eval/eval_jobs.h"

namespace kiln {
namespace {

using json = nlohmann::json;

TEST(RunSuite, AHostileRegexFailsItsExampleAndTheRunCompletes) {
  EvalSuite suite;
  auto e = parse_suite({{"name", "hostile"},
                        {"examples", {{{"prompt", "a"}, {"expected", "(a+)+$"}, {"scorer", "regex"}},
                                      {{"prompt", "b"}, {"expected", "4"}}}}},
                       suite);
  ASSERT_FALSE(e) << e->field << ": " << e->message;
  // The model answers the first prompt with the text that makes the pattern backtrack.
  GenerateFn gen = [](const GenerateRequest& r) -> Result<GenerateResult> {
    const bool first = (*r.messages)[0]["content"] == "a";
    return GenerateResult{first ? std::string(10'000, 'a') + "b" : "4", "stop", 0};
  };
  std::atomic<bool> cancel{false};
  auto outs = run_suite(suite, gen, "", 0, 0, 64, cancel, nullptr);
  ASSERT_TRUE(outs.ok()) << outs.status().to_string();
  ASSERT_EQ(outs->size(), 2u);
  EXPECT_FALSE((*outs)[0].passed);
  EXPECT_EQ((*outs)[0].scorer, "regex");
  EXPECT_EQ((*outs)[0].detail,
            "the pattern '(a+)+$' exceeded its match limit (1,000,000 steps) on 10,001 bytes of text");
  EXPECT_TRUE((*outs)[1].passed) << (*outs)[1].detail;
}

}  // namespace
}  // namespace kiln
