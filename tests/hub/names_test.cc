// Hub names, URLs and the environment, each against the rules huggingface_hub applies.
#include <gtest/gtest.h>
#include <stdlib.h>

#include "hub/hub_settings.h"
#include "hub/repo_ref.h"
#include "hub/url.h"
#include "hub/hub_fixture.h"

namespace kiln::hub {
namespace {

TEST(HubNames, ParsesOrgNameAndRevision) {
  RepoRef r = parse_repo_ref("Qwen/Qwen3.5-4B").value();
  EXPECT_EQ(r.org, "Qwen");
  EXPECT_EQ(r.name, "Qwen3.5-4B");
  EXPECT_EQ(r.revision, "main");
  EXPECT_FALSE(r.revision_given);
  EXPECT_EQ(r.folder(), "models--Qwen--Qwen3.5-4B");
  RepoRef pr = parse_repo_ref("org/m_1@refs/pr/3").value();
  EXPECT_EQ(pr.revision, "refs/pr/3");
  EXPECT_EQ(pr.label(), "org/m_1@refs/pr/3");
}

TEST(HubNames, RefusesWhatCouldStepOutOfTheCache) {
  for (const char* bad : {"name-only", "a/b/c", "a--b/c", "org/na..me", "-org/name", "org/name-", "org/", "/name",
                          "org/name@", "org/name@../x", "org/name@a//b", "org/name@/abs", "org/name@.hidden",
                          "org/na me", "org/name@x y"}) {
    auto r = parse_repo_ref(bad);
    ASSERT_FALSE(r.ok()) << bad;
    EXPECT_NE(r.status().message().find(bad), std::string::npos) << r.status().message();
  }
  EXPECT_TRUE(is_commit_hash("0123456789abcdef0123456789abcdef01234567"));
  EXPECT_FALSE(is_commit_hash("0123456789ABCDEF0123456789abcdef01234567"));
  EXPECT_FALSE(is_commit_hash("main"));
}

TEST(HubUrls, ParseAndResolveRedirects) {
  Url u = parse_url("https://Hub.example:8443/mirror/api?x=1").value();
  EXPECT_EQ(u.scheme, "https");
  EXPECT_EQ(u.host, "hub.example");
  EXPECT_EQ(u.port, 8443);
  EXPECT_EQ(u.target, "/mirror/api?x=1");
  EXPECT_EQ(u.origin(), "https://hub.example:8443");
  EXPECT_EQ(parse_url("http://[::1]/x").value().origin(), "http://[::1]:80");
  EXPECT_EQ(resolve_location(u, "/a/b").value().str(), "https://hub.example:8443/a/b");
  EXPECT_EQ(resolve_location(u, "other").value().str(), "https://hub.example:8443/mirror/other");
  EXPECT_EQ(resolve_location(u, "//cdn.example/f").value().str(), "https://cdn.example:443/f");
  EXPECT_EQ(resolve_location(u, "http://cdn.example:81/f").value().origin(), "http://cdn.example:81");
  for (const char* bad : {"ftp://x/", "http://", "http://u:p@host/", "http://host:0/", "http://host:99999/", "http://h/a b"})
    EXPECT_FALSE(parse_url(bad).ok()) << bad;
  EXPECT_EQ(url_quote("refs/pr/1", false), "refs%2Fpr%2F1");
  EXPECT_EQ(url_quote("sub dir/f.json", true), "sub%20dir/f.json");
}

// Sets variables for one test and restores them after.
struct Env {
  std::vector<std::pair<std::string, std::optional<std::string>>> saved;
  void set(const char* k, const char* v) {
    const char* old = getenv(k);
    saved.push_back({k, old ? std::optional<std::string>(old) : std::nullopt});
    if (v) setenv(k, v, 1);
    else unsetenv(k);
  }
  ~Env() {
    for (auto it = saved.rbegin(); it != saved.rend(); ++it) {
      if (it->second) setenv(it->first.c_str(), it->second->c_str(), 1);
      else unsetenv(it->first.c_str());
    }
  }
};

TEST(HubSettingsEnv, FollowsHuggingFaceHubsPrecedence) {
  Env e;
  const std::string home = kiln::testing::temp_dir("hf-home");
  for (const char* k : {"HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE", "HF_HOME", "HF_TOKEN", "HUGGING_FACE_HUB_TOKEN",
                        "HF_TOKEN_PATH", "HF_ENDPOINT", "HF_HUB_OFFLINE"})
    e.set(k, nullptr);
  e.set("HOME", home.c_str());
  e.set("XDG_CACHE_HOME", nullptr);
  HubSettings s = HubSettings::from_env().value();
  EXPECT_EQ(s.cache_dir, home + "/.cache/huggingface/hub");
  EXPECT_EQ(s.endpoint, "https://huggingface.co");
  EXPECT_TRUE(s.token.empty());
  EXPECT_FALSE(s.offline);

  e.set("XDG_CACHE_HOME", (home + "/xdg").c_str());
  EXPECT_EQ(HubSettings::from_env().value().cache_dir, home + "/xdg/huggingface/hub");
  e.set("HF_HOME", (home + "/hf").c_str());
  kiln::testing::write_all(home + "/hf/token", "hf_from_file\n");
  s = HubSettings::from_env().value();
  EXPECT_EQ(s.cache_dir, home + "/hf/hub");
  EXPECT_EQ(s.token, "hf_from_file");
  EXPECT_EQ(s.token_source, home + "/hf/token");
  e.set("HF_HUB_CACHE", (home + "/cache").c_str());
  e.set("HF_TOKEN", "hf_env");
  e.set("HF_ENDPOINT", "http://mirror.local:8080/");
  e.set("HF_HUB_OFFLINE", "yes");
  s = HubSettings::from_env().value();
  EXPECT_EQ(s.cache_dir, home + "/cache");
  EXPECT_EQ(s.token, "hf_env");
  EXPECT_EQ(s.endpoint, "http://mirror.local:8080");
  EXPECT_TRUE(s.offline);
  e.set("HF_HUB_OFFLINE", "0");
  EXPECT_FALSE(HubSettings::from_env().value().offline);
  e.set("HF_ENDPOINT", "mirror.local");
  EXPECT_FALSE(HubSettings::from_env().ok());
}

}  // namespace
}  // namespace kiln::hub
