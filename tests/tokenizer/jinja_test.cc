// The Jinja subset case by case against Python Jinja2 configured as transformers configures it
// (tools/tokenizer/make_jinja_cases.py): exact output, failure where Python fails, and syntax
// errors that name Jinja2's line plus the column Kiln points at.
#include <gtest/gtest.h>

#include <fstream>

#include "qwen3_fixture.h"
#include "tokenizer/jinja/template.h"

namespace kiln::jinja {
namespace {

using kiln::testing::fixture_path;

struct Fixture {
  std::vector<std::pair<std::string, Value>> context;
  nlohmann::ordered_json cases;
};

Fixture load() {
  std::ifstream in(fixture_path("jinja_cases.json"));
  EXPECT_TRUE(in.good());
  const auto j = nlohmann::ordered_json::parse(in);
  Fixture f;
  for (auto it = j["context"].begin(); it != j["context"].end(); ++it) f.context.emplace_back(it.key(), Value::from_json(it.value()));
  f.cases = j["cases"];
  return f;
}

TEST(Jinja, EveryCaseMatchesPythonJinja2) {
  const Fixture f = load();
  ASSERT_GE(f.cases.size(), 60u);
  for (const auto& c : f.cases) {
    const std::string name = c["name"];
    const std::string source = c["template"];
    auto parsed = Template::parse(source);
    if (c.contains("syntax_error_line")) {
      ASSERT_FALSE(parsed.ok()) << name << ": Jinja2 rejects this template";
      const std::string& message = parsed.status().message();
      const std::string line = "line " + std::to_string(c["syntax_error_line"].get<int>()) + " ";
      EXPECT_NE(message.find(line), std::string::npos) << name << ": " << message;
      if (!c["syntax_error_column"].is_null()) {
        const std::string col = line + "column " + std::to_string(c["syntax_error_column"].get<int>()) + ":";
        EXPECT_NE(message.find(col), std::string::npos) << name << ": " << message;
      }
      continue;
    }
    if (c.contains("error") && !parsed.ok()) continue;  // rejected at parse time: fine for an error case
    ASSERT_TRUE(parsed.ok()) << name << ": " << parsed.status().to_string();
    auto out = parsed->render(f.context);
    if (c.contains("error")) {
      EXPECT_FALSE(out.ok()) << name << ": Python raised " << c["error"] << ", Kiln rendered "
                             << (out.ok() ? out.value() : "");
      continue;
    }
    ASSERT_TRUE(out.ok()) << name << ": " << out.status().to_string();
    EXPECT_EQ(out.value(), c["expected"].get<std::string>()) << name;
  }
}

TEST(Jinja, UnsupportedTagIsASyntaxErrorWithLineAndColumn) {
  auto t = Template::parse("a\n  {% include 'x.html' %}");
  ASSERT_FALSE(t.ok());
  EXPECT_EQ(t.status().message(),
            "template syntax error at line 2 column 6: the 'include' tag is not supported near 'include'");
}

TEST(Jinja, RuntimeErrorsNameTheirPosition) {
  auto t = Template::parse("one\n{{ messages[0].content + 1 }}");
  ASSERT_TRUE(t.ok());
  auto out = t->render({{"messages", Value::from_json(nlohmann::ordered_json::parse(R"([{"content": "x"}])"))}});
  ASSERT_FALSE(out.ok());
  EXPECT_NE(out.status().message().find("line 2 column"), std::string::npos) << out.status().message();
  EXPECT_NE(out.status().message().find("can only concatenate str (not \"int\") to str"), std::string::npos);
}

TEST(Jinja, RaiseExceptionCarriesTheTemplateMessage) {
  auto t = Template::parse("{{ raise_exception('Conversation roles must alternate') }}");
  ASSERT_TRUE(t.ok());
  auto out = t->render({});
  ASSERT_FALSE(out.ok());
  EXPECT_NE(out.status().message().find("Conversation roles must alternate"), std::string::npos);
}

}  // namespace
}  // namespace kiln::jinja
