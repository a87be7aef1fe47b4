// The dashboard files compiled into the binary (server/ui_assets.h) against ui/ in the source
// tree: the same names, byte for byte, and the content type each is served with; the training
// form's reward picker against the scorers of src/eval.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>
#include <string>

#include "eval/scorer.h"
#include "server/ui_assets.h"

namespace kiln {
namespace {

namespace fs = std::filesystem;

std::string read_file(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

TEST(UiAssets, EmbeddedFilesEqualTheSourceTreeUiFolder) {
  const fs::path dir = fs::path(KILN_SOURCE_DIR) / "ui";
  std::set<std::string> on_disk, embedded;
  for (const auto& f : fs::directory_iterator(dir))
    if (f.is_regular_file()) on_disk.insert(f.path().filename().string());
  for (const UiAsset& a : ui_assets()) {
    embedded.insert(a.name);
    const std::string want = read_file(dir / a.name);
    ASSERT_EQ(a.size, want.size()) << a.name;
    EXPECT_EQ(std::string(reinterpret_cast<const char*>(a.data), a.size), want) << a.name;
    EXPECT_EQ(a.data[a.size], 0) << a.name;  // the terminator the generator promises
  }
  EXPECT_EQ(embedded, on_disk);
  EXPECT_TRUE(embedded.count("index.html"));
}

TEST(UiAssets, LookupAndContentTypes) {
  ASSERT_NE(find_ui_asset("index.html"), nullptr);
  EXPECT_EQ(find_ui_asset("nope.js"), nullptr);
  EXPECT_EQ(find_ui_asset("../index.html"), nullptr);
  EXPECT_EQ(ui_content_type("index.html"), "text/html; charset=utf-8");
  EXPECT_EQ(ui_content_type("app.js"), "text/javascript; charset=utf-8");
  EXPECT_EQ(ui_content_type("style.css"), "text/css; charset=utf-8");
  EXPECT_EQ(ui_content_type("logo.svg"), "image/svg+xml");
  EXPECT_EQ(ui_content_type("data.bin"), "application/octet-stream");
  EXPECT_EQ(ui_content_type("js"), "application/octet-stream");
}

// The GRPO / OPD form's reward picker (ui/index.html, <select name="scorer">) offers every scorer
// src/eval knows by the name the API takes, and nothing else but its three other choices.
TEST(UiAssets, TheRewardPickerOffersEveryEvalScorerAndNoOther) {
  const UiAsset* html = find_ui_asset("index.html");
  ASSERT_NE(html, nullptr);
  const std::string page(reinterpret_cast<const char*>(html->data), html->size);
  const size_t start = page.find("<select name=\"scorer\">");
  ASSERT_NE(start, std::string::npos);
  const std::string picker = page.substr(start, page.find("</select>", start) - start);
  std::set<std::string> offered;
  const std::string open = "<option value=\"";
  for (size_t at = picker.find(open); at != std::string::npos; at = picker.find(open, at + 1)) {
    const size_t b = at + open.size();
    offered.insert(picker.substr(b, picker.find('"', b) - b));
  }
  // kAny is the last scorer type: the one after it has no name.
  const int last = static_cast<int>(ScorerType::kAny);
  EXPECT_STREQ(scorer_type_name(static_cast<ScorerType>(last + 1)), "?");
  std::set<std::string> want = {"none", "suite", "server"};
  for (int t = 0; t <= last; ++t) want.insert(scorer_type_name(static_cast<ScorerType>(t)));
  EXPECT_EQ(offered, want);
  // Each scorer name is a type parse_scorer takes (all / any then ask for their `of`).
  for (const std::string& name : offered) {
    if (name == "none" || name == "suite" || name == "server") continue;
    ScorerSpec spec;
    const auto e = parse_scorer(nlohmann::json{{"type", name}}, "reward.scorer", spec);
    if (e) EXPECT_EQ(e->field, "reward.scorer.of") << name << ": " << e->message;
  }
}

}  // namespace
}  // namespace kiln
