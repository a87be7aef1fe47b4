// Suite registration: every malformed body refused naming the field; scorers resolved (own,
// suite default, auto-detection); the store's files read back to the same suite; synthesis of
// a dataset with a seeded held-out split.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "eval/suite.h"
#include "eval/synthesize.h"

namespace kiln {
namespace {

using json = nlohmann::json;
namespace fs = std::filesystem;

json user(const std::string& c) { return json::array({{{"role", "user"}, {"content", c}}}); }

TEST(Suite, MalformedBodiesNameTheField) {
  const json ok = {{"messages", user("q")}, {"expected", "a"}};
  struct Bad { json body; std::string field; };
  const Bad bad[] = {
      {{{"examples", {ok}}}, "name"},
      {{{"name", "../x"}, {"examples", {ok}}}, "name"},
      {{{"name", "s"}}, "examples"},
      {{{"name", "s"}, {"examples", json::array()}}, "examples"},
      {{{"name", "s"}, {"examples", {ok}}, {"bogus", 1}}, "bogus"},
      {{{"name", "s"}, {"examples", {ok, ok, ok, {{"messages", user("q")}}}}}, "examples[3].expected"},
      {{{"name", "s"}, {"examples", {ok, {{"messages", json::array()}, {"expected", "a"}}}}}, "examples[1].messages"},
      {{{"name", "s"}, {"examples", {{{"messages", {{{"role", "robot"}, {"content", "x"}}}}, {"expected", "a"}}}}},
       "examples[0].messages[0].role"},
      {{{"name", "s"}, {"examples", {{{"messages", {{{"role", "user"}}}}, {"expected", "a"}}}}}, "examples[0].messages[0].content"},
      {{{"name", "s"}, {"examples", {ok, {{"prompt", "q"}, {"expected", "a"}, {"scorer", "fuzzy"}}}}}, "examples[1].scorer"},
      {{{"name", "s"}, {"examples", {{{"prompt", "q"}, {"expected", "(x"}, {"scorer", "regex"}}}}}, "examples[0].expected"},
      {{{"name", "s"}, {"examples", {{{"prompt", "q"}, {"expected", std::string(5000, 'x')}, {"scorer", "regex"}}}}},
       "examples[0].expected"},
      {{{"name", "s"}, {"examples", {{{"prompt", "q"}, {"expected", "many"}, {"scorer", "numeric_tolerance"}}}}},
       "examples[0].expected"},
      {{{"name", "s"}, {"examples", {{{"prompt", "q"}, {"expected", "a"}, {"extra", 1}}}}}, "examples[0].extra"},
      {{{"name", "s"}, {"examples", {ok}}, {"max_tokens", 0}}, "max_tokens"},
      {{{"name", "s"}, {"examples", {ok}}, {"scorer", {{"type", "nope"}}}}, "scorer.type"},
      {{{"name", "s"}, {"examples", {{{"prompt", "q"}, {"expected", "a"}, {"scorer", "json_schema"}}}}}, "examples[0].expected"},
  };
  for (const Bad& b : bad) {
    EvalSuite s;
    auto e = parse_suite(b.body, s);
    ASSERT_TRUE(e) << b.body.dump();
    EXPECT_EQ(e->field, b.field) << b.body.dump() << ": " << e->message;
  }
}

TEST(Suite, JsonSchemaScorerTakesItsSchemaOrTheExpectedOne) {
  EvalSuite s;
  const json schema = {{"type", "object"}, {"required", {"a"}}};
  auto e = parse_suite({{"name", "s"},
                        {"scorer", {{"type", "json_schema"}, {"schema", schema}}},
                        {"examples", {{{"prompt", "a"}, {"expected", ""}}, {{"prompt", "b"}, {"expected", schema}, {"scorer", "json_schema"}}}}},
                       s);
  ASSERT_FALSE(e) << e->field << ": " << e->message;
  EXPECT_EQ(s.examples[0].resolved.schema, schema);
  EXPECT_TRUE(score(s.examples[0].resolved, s.examples[0].expected, R"({"a": 1})").passed);
  EXPECT_FALSE(score(s.examples[1].resolved, s.examples[1].expected, R"({"b": 1})").passed);
}

TEST(Suite, ScorersResolveOwnThenDefaultThenAuto) {
  EvalSuite s;
  auto e = parse_suite({{"name", "s"},
                        {"examples", {{{"prompt", "a"}, {"expected", "12"}},
                                      {{"prompt", "b"}, {"expected", "Paris"}, {"scorer", "contains"}},
                                      {{"prompt", "c"}, {"expected", 7}}}}},
                       s);
  ASSERT_FALSE(e) << e->field << ": " << e->message;
  EXPECT_EQ(s.examples[0].resolved.type, ScorerType::kNumericTolerance);
  EXPECT_EQ(s.examples[1].resolved.type, ScorerType::kContains);
  EXPECT_EQ(s.examples[2].expected, "7");  // a number is kept as its text
  EvalSuite d;
  ASSERT_FALSE(parse_suite({{"name", "d"}, {"scorer", "contains"}, {"examples", {{{"prompt", "a"}, {"expected", "12"}}}}}, d));
  EXPECT_EQ(d.examples[0].resolved.type, ScorerType::kContains);
}

TEST(Suite, StoreRoundTripsAndRefusesOverwrite) {
  const fs::path dir = fs::temp_directory_path() / ("kiln-eval-suites-" + std::to_string(::getpid()));
  fs::remove_all(dir);
  SuiteStore store(dir.string());
  EvalSuite s;
  ASSERT_FALSE(parse_suite({{"name", "caps"}, {"description", "d"}, {"chat_template_kwargs", {{"enable_thinking", false}}},
                            {"examples", {{{"prompt", "France?"}, {"expected", "Paris"}, {"scorer", "contains"}},
                                          {{"prompt", "2+2"}, {"expected", "4"}}}}},
                           s));
  ASSERT_TRUE(store.save(s, false).ok());
  EXPECT_EQ(store.save(s, false).code(), ErrorCode::kFailedPrecondition);
  ASSERT_TRUE(store.save(s, true).ok());
  auto entries = [&dir] {
    std::vector<std::string> names;
    for (const auto& e : fs::directory_iterator(dir)) names.push_back(e.path().filename().string());
    return names;
  };
  EXPECT_EQ(entries(), std::vector<std::string>{"caps"}) << "a replacement leaves no staging or old folder";
  // A leading '.' is reserved for staging folders.
  EvalSuite hidden;
  auto refused = parse_suite({{"name", ".staging-caps"}, {"examples", {{{"prompt", "a"}, {"expected", "b"}}}}}, hidden);
  ASSERT_TRUE(refused);
  EXPECT_EQ(refused->field, "name");
  // The files are the readable format docs/evals.md describes.
  std::ifstream in(dir / "caps" / "examples.jsonl");
  std::string first;
  std::getline(in, first);
  EXPECT_EQ(first, R"({"messages":[{"content":"France?","role":"user"}],"expected":"Paris","scorer":"contains"})");
  auto back = store.load("caps");
  ASSERT_TRUE(back.ok()) << back.status().to_string();
  EXPECT_EQ(back->sha256(), s.sha256());
  EXPECT_EQ(back->description, "d");
  EXPECT_EQ(back->chat_template_kwargs, json({{"enable_thinking", false}}));
  EXPECT_EQ(back->examples[1].resolved.type, ScorerType::kNumericTolerance);
  EXPECT_EQ(store.list().size(), 1u);
  EXPECT_EQ(store.load("nope").status().code(), ErrorCode::kNotFound);
  EXPECT_TRUE(store.remove("caps").ok());
  EXPECT_EQ(store.remove("caps").code(), ErrorCode::kNotFound);
  EXPECT_TRUE(entries().empty());
  fs::remove_all(dir);
}

TEST(Suite, SynthesizeTakesTheFinalAssistantTurnAndASeededHoldout) {
  json data = json::array();
  for (int i = 0; i < 10; ++i)
    data.push_back({{"messages", {{{"role", "system"}, {"content", "be brief"}},
                                  {{"role", "user"}, {"content", "q" + std::to_string(i)}},
                                  {{"role", "assistant"}, {"content", "a" + std::to_string(i)}}}}});
  SynthesizeSpec spec;
  spec.name = "held";
  spec.holdout_fraction = 0.3;
  spec.seed = 5;
  EvalSuite s;
  ASSERT_FALSE(synthesize_suite(spec, data, "examples", s));
  ASSERT_EQ(s.examples.size(), 3u);  // round(0.3 x 10)
  const auto idx = s.holdout["source_indices"].get<std::vector<int64_t>>();
  ASSERT_EQ(idx.size(), 3u);
  for (size_t k = 0; k < 3; ++k) {
    EXPECT_EQ(s.examples[k].expected, "a" + std::to_string(idx[k]));
    EXPECT_EQ(s.examples[k].messages.size(), 2u);  // system + user: the prompt before the answer
    EXPECT_EQ(s.examples[k].messages[1]["content"], "q" + std::to_string(idx[k]));
  }
  EXPECT_EQ(holdout_indices(10, 0.3, 5), idx);         // the seed fixes the split
  EXPECT_NE(holdout_indices(10, 0.3, 6), idx);         // (differs for this other seed)
  EXPECT_EQ(holdout_indices(4, 0, 1).size(), 4u);      // no split: every example
  // A scorer that does not fit a held-out example names it by its source index.
  SynthesizeSpec numeric = spec;
  numeric.scorer = "multiple_choice";
  auto ne = synthesize_suite(numeric, data, "examples", s);
  ASSERT_TRUE(ne);
  EXPECT_EQ(ne->field, "examples[" + std::to_string(idx[0]) + "].expected");  // "a<i>" names no letter A-E
  json bad = data;
  bad[7]["messages"].erase(2);
  spec.holdout_fraction = 0;
  auto e = synthesize_suite(spec, bad, "examples", s);
  ASSERT_TRUE(e);
  EXPECT_EQ(e->field, "examples[7].messages");
}

}  // namespace
}  // namespace kiln
