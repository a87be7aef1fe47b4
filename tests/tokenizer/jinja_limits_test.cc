// The Jinja engine against hostile templates (what the jinja fuzz target and its seeds showed): a
// render frees everything it made; nesting, recursion, sizes and work are bounded, each past its
// limit an error naming it rather than a stack overflow, a huge allocation, an endless render or
// undefined behaviour; out-of-range literals and integer overflow are errors or Python's values.
#include <gtest/gtest.h>

#include <memory>

#include "tokenizer/chat_template.h"
#include "tokenizer/jinja/builtins.h"
#include "tokenizer/jinja/interpreter.h"
#include "tokenizer/jinja/parser.h"
#include "tokenizer/jinja/template.h"
#include "tokenizer/qwen3_dir.h"

namespace kiln::jinja {
namespace {

// Renders `source` with `items` bound to a list only the render holds, and says whether that
// list was freed afterwards.
bool frees_its_context(const std::string& source, std::string* out = nullptr) {
  auto items = std::make_shared<List>();
  items->items.emplace_back(1);
  const std::weak_ptr<List> watch = items;
  {
    auto t = Template::parse(source);
    EXPECT_TRUE(t.ok()) << t.status().to_string();
    if (!t.ok()) return false;
    auto rendered = t->render({{"items", Value(std::move(items))}});
    EXPECT_TRUE(rendered.ok()) << rendered.status().to_string();
    if (out && rendered.ok()) *out = *rendered;
  }
  return watch.expired();
}

Result<std::string> render(const std::string& source) {
  auto t = Template::parse(source);
  if (!t.ok()) return t.status();
  return t->render({});
}

// The output, or "error: " and the message.
std::string rendered(const std::string& source) {
  auto r = render(source);
  return r.ok() ? r.value() : "error: " + r.status().message();
}

// The message of a failed parse or render ("" when it succeeded).
std::string error_of(const std::string& source) {
  auto r = render(source);
  return r.ok() ? "" : r.status().message();
}

std::string repeat(const std::string& s, int n) {
  std::string out;
  for (int i = 0; i < n; ++i) out += s;
  return out;
}

TEST(JinjaLimits, NestingPastTheLimitIsASyntaxErrorNotAStackOverflow) {
  const std::string too_deep = "nests deeper than " + std::to_string(kMaxTemplateNesting) + " levels";
  EXPECT_EQ(rendered("{{ " + repeat("(", 200) + "1" + repeat(")", 200) + " }}"), "1");
  EXPECT_NE(error_of("{{ " + repeat("(", 3000) + "1" + repeat(")", 3000) + " }}").find(too_deep), std::string::npos);
  EXPECT_NE(error_of("{{ " + repeat("[", 3000) + repeat("]", 3000) + " }}").find(too_deep), std::string::npos);
  EXPECT_NE(error_of("{{ " + repeat("not ", 3000) + "1 }}").find(too_deep), std::string::npos);
  EXPECT_NE(error_of("{{ " + repeat("-", 3000) + "1 }}").find(too_deep), std::string::npos);
  // Left-deep chains are as deep as they are long.
  EXPECT_NE(error_of("{{ 1" + repeat(" + 1", 3000) + " }}").find(too_deep), std::string::npos);
  EXPECT_NE(error_of("{{ 'a'" + repeat("|lower", 3000) + " }}").find(too_deep), std::string::npos);
  EXPECT_NE(error_of(repeat("{% if true %}", 3000) + "x" + repeat("{% endif %}", 3000)).find(too_deep),
            std::string::npos);
  EXPECT_EQ(rendered("{{ 1" + repeat(" + 1", 200) + " }}"), "201");
}

TEST(JinjaLimits, LiteralsOutOfRangeAreInfinityOrASyntaxErrorNotAnException) {
  EXPECT_EQ(rendered("{{ 1e999 }} {{ -1e999 }} {{ 1e-999 }}"), "inf -inf 0.0");
  EXPECT_NE(error_of("{{ 99999999999999999999 }}").find("integer literal out of range"), std::string::npos);
  EXPECT_NE(error_of("{{ x.99999999999999999999 }}").find("integer literal out of range"), std::string::npos);
  EXPECT_NE(error_of("{{ [[1]]|map(attribute='99999999999999999999')|list }}").find("out of range"), std::string::npos);
}

TEST(JinjaLimits, IntegerOverflowIsAnErrorAndPowersAreFast) {
  const std::string min = "(-9223372036854775807 - 1)";
  EXPECT_NE(error_of("{{ -" + min + " }}").find("integer overflow"), std::string::npos);
  EXPECT_NE(error_of("{{ " + min + " // -1 }}").find("integer overflow"), std::string::npos);
  EXPECT_NE(error_of("{{ " + min + " % -1 }}").find("integer overflow"), std::string::npos);
  EXPECT_NE(error_of("{{ 2 ** 63 }}").find("integer overflow"), std::string::npos);
  EXPECT_EQ(rendered("{{ 2 ** 62 }} {{ 1 ** 9223372036854775807 }} {{ (-1) ** 9223372036854775807 }}"),
            "4611686018427387904 1 -1");
  EXPECT_NE(error_of("{{ 1e300|int }}").find("cannot convert float 1e+300 to a 64-bit integer"), std::string::npos);
  EXPECT_NE(error_of("{{ '1e300'|int }}").find("cannot convert float 1e+300"), std::string::npos);
  EXPECT_EQ(rendered("{{ 2.9|int }} {{ '-7.5'|int }}"), "2 -7");
}

TEST(JinjaLimits, BuiltStringsAndListsPastTheLimitAreErrors) {
  const std::string too_large = "would be larger than 64 MiB";
  EXPECT_EQ(rendered("{{ 'ab' * 3 }}{{ [1] * 2 }}"), "ababab[1, 1]");
  EXPECT_NE(error_of("{{ 'ab' * 100000000 }}").find("a repeated str " + too_large), std::string::npos);
  EXPECT_NE(error_of("{{ [1, 2] * 100000000 }}").find("a repeated list " + too_large), std::string::npos);
  EXPECT_NE(error_of("{{ 'x'.center(1000000000000) }}").find("center() padding " + too_large), std::string::npos);
  EXPECT_NE(error_of("{{ 'x'|indent(1000000000000) }}").find("indent width " + too_large), std::string::npos);
  EXPECT_NE(error_of("{{ [1]|tojson(indent=1000000000000) }}").find("tojson indent " + too_large), std::string::npos);
}

TEST(JinjaLimits, ARenderStopsAfterItsStepBudget) {
  const std::string e =
      error_of("{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}");
  EXPECT_NE(e.find("rendering takes more than 1000000 steps"), std::string::npos) << e;
}

// The budget leaves room for real chats: 10,000 messages through the Qwen3 template.
TEST(JinjaLimits, TenThousandMessagesRenderWithinTheStepBudget) {
  auto t = ChatTemplate::load(kiln::testing::qwen3_dir());
  ASSERT_TRUE(t.ok()) << t.status().to_string() << " (run scripts/fetch-tokenizer)";
  ChatTemplateRequest r;
  for (int i = 0; i < 10000; ++i)
    r.messages.push_back({{"role", i % 2 ? "assistant" : "user"}, {"content", "message " + std::to_string(i)}});
  r.generation_prompt = GenerationPrompt::kAdd;
  auto out = t->render(r);
  ASSERT_TRUE(out.ok()) << out.status().to_string();
  EXPECT_NE(out->find("message 9999"), std::string::npos);
}

TEST(JinjaLimits, MacrosOverDeepBodiesStopAtTheRenderDepth) {
  // Each call nests 30 lists: 90 calls stay under the macro limit but not under the render depth.
  const std::string e = error_of("{% macro f(n) %}{% if n > 0 %}{{ " + repeat("[", 30) + "f(n - 1)" + repeat("]", 30) +
                                 " }}{% endif %}{% endmacro %}{{ f(90) }}");
  EXPECT_NE(e.find("rendering nests deeper than " + std::to_string(kMaxRenderDepth) + " levels"), std::string::npos)
      << e;
}

TEST(JinjaLimits, AMacroKeptInTheScopeItClosesOverIsFreedWithTheRender) {
  std::string out;
  EXPECT_TRUE(frees_its_context("{% macro m() %}{{ items }}{% endmacro %}{{ m() }}", &out));
  EXPECT_EQ(out, "[1]");
  EXPECT_TRUE(frees_its_context("{% for i in [1, 2] %}{% macro m() %}{{ i }}{% endmacro %}{{ m() }}{% endfor %}", &out));
  EXPECT_EQ(out, "12");
}

TEST(JinjaLimits, ANamespaceThatHoldsItselfIsFreedAndPrintsAsPythonDoes) {
  std::string out;
  EXPECT_TRUE(frees_its_context("{% set ns = namespace(v=items) %}{% set ns.me = ns %}{{ ns }}", &out));
  EXPECT_EQ(out, "<Namespace {'v': [1], 'me': <Namespace {...}>}>");
}

TEST(JinjaLimits, MacrosRecurseUpToTheLimitAndNoFurther) {
  auto t = Template::parse("{% macro f(n) %}{% if n > 0 %}{{ f(n - 1) }}{% endif %}.{% endmacro %}{{ f(depth) }}");
  ASSERT_TRUE(t.ok()) << t.status().to_string();
  auto within = t->render({{"depth", Value(kMaxMacroDepth - 1)}});
  ASSERT_TRUE(within.ok()) << within.status().to_string();
  EXPECT_EQ(*within, std::string(kMaxMacroDepth, '.'));
  auto beyond = t->render({{"depth", Value(kMaxMacroDepth)}});
  ASSERT_FALSE(beyond.ok());
  EXPECT_NE(beyond.status().message().find("macro 'f': more than 100 macro calls inside one another"),
            std::string::npos)
      << beyond.status().message();
}

}  // namespace
}  // namespace kiln::jinja
