// The dashboard files compiled into the binary (server/ui_assets.h) against ui/ in the source
// tree: the same names, byte for byte, and the content type each is served with.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>
#include <string>

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

}  // namespace
}  // namespace kiln
