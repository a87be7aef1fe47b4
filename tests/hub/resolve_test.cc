// Name resolution and the cache commands' core: a cache laid out by hand as huggingface_hub
// writes it is read as is (offline too); an existing folder wins over a name; what is missing is
// named; list and remove keep blobs another snapshot shares.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>

#include "core/sha256.h"
#include "hub/hf_cache.h"
#include "hub/hub_fixture.h"
#include "hub/resolve.h"
#include "model/config.h"
#include "model/model_files.h"

namespace kiln {
namespace {

namespace fs = std::filesystem;
using testing::HubEnv;
using testing::MockHub;

constexpr const char* kCommit = "1111111111111111111111111111111111111111";

// huggingface_hub's layout, written here from its description: blobs named by sha256 (LFS) or
// git blob id, snapshot entries as relative links, refs/main holding the commit.
std::string write_hf_layout(const std::string& cache, const std::string& folder, const std::string& commit,
                            const std::map<std::string, std::string>& files) {
  const std::string repo = cache + "/" + folder;
  for (const auto& [path, data] : files) {
    const std::string blob = MockHub::is_lfs(path) ? sha256_hex(data) : MockHub::git_blob_id(data);
    testing::write_all(repo + "/blobs/" + blob, data);
    fs::create_directories(repo + "/snapshots/" + commit);
    fs::create_symlink("../../blobs/" + blob, repo + "/snapshots/" + commit + "/" + path);
  }
  testing::write_all(repo + "/refs/main", commit);
  return repo + "/snapshots/" + commit;
}

std::map<std::string, std::string> tiny_files() {
  const std::string dir = testing::temp_dir("tiny-src");
  EXPECT_TRUE(write_random_checkpoint(preset_config("tiny").value(), dir, {.quiet = true}).ok());
  return {{"config.json", testing::read_all(dir + "/config.json")},
          {"model.safetensors", testing::read_all(dir + "/model.safetensors")},
          {"tokenizer.json", "{}"}};
}

hub::ResolveOptions quiet() {
  hub::ResolveOptions o;
  o.pull.log = nullptr;
  o.pull.backoff_s = 0.01;
  o.pull.disk_reserve_bytes = 0;
  return o;
}

TEST(HubResolve, ReadsACacheInHuggingFaceHubsLayoutOffline) {
  hub::HubSettings s;
  s.cache_dir = testing::temp_dir("hf-cache");
  s.offline = true;
  s.endpoint = "http://127.0.0.1:9";  // nothing listens there: no request may be made
  const std::string snap = write_hf_layout(s.cache_dir, "models--org--tiny", kCommit, tiny_files());
  auto m = hub::resolve_model("org/tiny", s, quiet());
  ASSERT_TRUE(m.ok()) << m.status().to_string();
  EXPECT_EQ(m->dir, snap);
  EXPECT_EQ(m->repo_id, "org/tiny");
  EXPECT_EQ(m->commit, kCommit);
  EXPECT_TRUE(ModelConfig::load(m->dir).ok());
  EXPECT_TRUE(Checkpoint::open(m->dir).ok());
  EXPECT_TRUE(check_servable(m->dir).servable) << check_servable(m->dir).problem;
  // By commit too.
  auto by_commit = hub::resolve_model(std::string("org/tiny@") + kCommit, s, quiet());
  ASSERT_TRUE(by_commit.ok()) << by_commit.status().to_string();
  EXPECT_EQ(by_commit->dir, snap);
}

TEST(HubResolve, OfflineNamesWhatIsMissing) {
  hub::HubSettings s;
  s.cache_dir = testing::temp_dir("hf-cache");
  s.offline = true;
  auto files = tiny_files();
  files.erase("tokenizer.json");
  write_hf_layout(s.cache_dir, "models--org--tiny", kCommit, files);
  auto m = hub::resolve_model("org/tiny", s, quiet());
  ASSERT_FALSE(m.ok());
  EXPECT_NE(m.status().message().find("missing tokenizer.json"), std::string::npos) << m.status().message();
  EXPECT_NE(m.status().message().find("HF_HUB_OFFLINE"), std::string::npos) << m.status().message();
  EXPECT_NE(m.status().message().find("kiln model pull org/tiny"), std::string::npos) << m.status().message();
  auto absent = hub::resolve_model("org/absent", s, quiet());
  ASSERT_FALSE(absent.ok());
  EXPECT_NE(absent.status().message().find("is not in the Hugging Face cache"), std::string::npos);
}

TEST(HubResolve, AnExistingFolderWinsOverAName) {
  const std::string work = testing::temp_dir("cwd");
  fs::create_directories(work + "/org/tiny");
  const fs::path old = fs::current_path();
  fs::current_path(work);
  hub::HubSettings s;
  s.cache_dir = work + "/cache";
  write_hf_layout(s.cache_dir, "models--org--tiny", kCommit, tiny_files());
  auto m = hub::resolve_model("org/tiny", s, quiet());
  fs::current_path(old);
  ASSERT_TRUE(m.ok()) << m.status().to_string();
  EXPECT_EQ(m->dir, "org/tiny");
  EXPECT_EQ(m->repo_id, "");
  auto nothing = hub::resolve_model("./nowhere", s, quiet());
  ASSERT_FALSE(nothing.ok());
  EXPECT_NE(nothing.status().message().find("no such folder"), std::string::npos);
}

TEST(HubResolve, FetchesANameTheCacheLacks) {
  HubEnv env;
  env.hub->add_repo(testing::tiny_sharded_repo("org/tiny"));
  auto m = hub::resolve_model("org/tiny", env.settings, quiet());
  ASSERT_TRUE(m.ok()) << m.status().to_string();
  EXPECT_EQ(m->repo_id, "org/tiny");
  EXPECT_TRUE(check_servable(m->dir).servable) << check_servable(m->dir).problem;
  // Found in the cache from now on, offline as well.
  env.hub->clear_requests();
  env.settings.offline = true;
  auto again = hub::resolve_model("org/tiny", env.settings, quiet());
  ASSERT_TRUE(again.ok()) << again.status().to_string();
  EXPECT_EQ(again->dir, m->dir);
  EXPECT_TRUE(env.hub->requests().empty());
}

TEST(HubResolve, OfflineAMarkedOptionalFileIsKnownAbsentAndAnUnmarkedOneIsNamed) {
  hub::HubSettings s;
  s.cache_dir = testing::temp_dir("hf-cache");
  s.offline = true;
  s.endpoint = "http://127.0.0.1:9";
  const std::string snap = write_hf_layout(s.cache_dir, "models--org--tiny", kCommit, tiny_files());
  // huggingface_hub's marker: an empty file at .no_exist/<commit>/<file>.
  for (const std::string& f : optional_serving_files())
    if (f != "chat_template.jinja") testing::write_all(s.cache_dir + "/models--org--tiny/.no_exist/" + kCommit + "/" + f, "");
  testing::CapturedLog log;
  hub::ResolveOptions o = quiet();
  o.pull.log = log.f;
  auto m = hub::resolve_model("org/tiny", s, o);
  ASSERT_TRUE(m.ok()) << m.status().to_string();
  EXPECT_EQ(m->dir, snap);
  const std::string text = log.text();
  EXPECT_NE(text.find("served without chat_template.jinja (not cached, not known to be absent)"), std::string::npos) << text;
  EXPECT_EQ(text.find("generation_config.json"), std::string::npos) << text;

  // Every optional file accounted for: nothing to say.
  testing::write_all(s.cache_dir + "/models--org--tiny/.no_exist/" + kCommit + "/chat_template.jinja", "");
  testing::CapturedLog quiet_log;
  o.pull.log = quiet_log.f;
  ASSERT_TRUE(hub::resolve_model("org/tiny", s, o).ok());
  EXPECT_EQ(quiet_log.text().find("served without"), std::string::npos) << quiet_log.text();
}

TEST(HubResolve, AnUnaccountedOptionalFileIsAskedOnceAtTheCachedCommit) {
  HubEnv env;
  testing::MockRepo repo;
  repo.id = "org/tiny";
  repo.commit = kCommit;
  repo.files = tiny_files();
  repo.files["generation_config.json"] = R"({"eos_token_id":[7]})";
  env.hub->add_repo(repo);
  auto cached = tiny_files();  // as a model-only download leaves it: no generation config, no markers
  const std::string snap = write_hf_layout(env.cache, "models--org--tiny", kCommit, cached);
  auto m = hub::resolve_model("org/tiny", env.settings, quiet());
  ASSERT_TRUE(m.ok()) << m.status().to_string();
  EXPECT_EQ(m->dir, snap);
  EXPECT_EQ(testing::read_all(snap + "/generation_config.json"), repo.files["generation_config.json"]);
  for (const char* f : {"tokenizer_config.json", "special_tokens_map.json", "chat_template.jinja", "chat_template.json",
                        "model.safetensors.index.json"})
    EXPECT_TRUE(fs::exists(env.cache + "/models--org--tiny/.no_exist/" + kCommit + "/" + f)) << f;
  int at_commit = 0, cdn = 0, other = 0;
  for (const auto& q : env.hub->requests()) {
    if (q.server == "cdn") ++cdn;
    else if (q.path.find(std::string("/revision/") + kCommit) != std::string::npos) ++at_commit;
    else if (q.path.find("/revision/") != std::string::npos) ++other;
  }
  EXPECT_EQ(at_commit, 1);  // asked at the cached commit, never at the branch
  EXPECT_EQ(other, 0);
  EXPECT_EQ(cdn, 0);        // the cached weights are not fetched again
  EXPECT_EQ(testing::read_all(env.cache + "/models--org--tiny/refs/main"), kCommit);

  env.hub->clear_requests();
  ASSERT_TRUE(hub::resolve_model("org/tiny", env.settings, quiet()).ok());
  EXPECT_TRUE(env.hub->requests().empty());
}

TEST(HubCache, ListsAndRemovesRevisionsKeepingSharedBlobs) {
  const std::string cache = testing::temp_dir("hf-cache");
  auto files = tiny_files();
  write_hf_layout(cache, "models--org--tiny", kCommit, files);
  const std::string other = "2222222222222222222222222222222222222222";
  files["config.json"] += " ";  // a second revision: one file differs, the weights are shared
  write_hf_layout(cache, "models--org--tiny", other, files);
  testing::write_all(cache + "/models--org--tiny/refs/v2", other);
  testing::write_all(cache + "/models--org--tiny/refs/main", kCommit);
  hub::HfCache c(cache);
  auto repos = c.list().value();
  ASSERT_EQ(repos.size(), 1u);
  EXPECT_EQ(repos[0].id, "org/tiny");
  ASSERT_EQ(repos[0].revisions.size(), 2u);
  uint64_t all_blobs = 0;
  for (const auto& e : fs::directory_iterator(cache + "/models--org--tiny/blobs")) all_blobs += e.file_size();
  EXPECT_EQ(repos[0].bytes, all_blobs);
  for (const auto& rev : repos[0].revisions) {
    uint64_t expect = 0;
    for (const auto& [path, data] : files) expect += data.size();
    if (rev.commit == kCommit) expect -= 1;  // its config.json is a byte shorter
    EXPECT_EQ(rev.bytes, expect) << rev.commit;
    EXPECT_EQ(rev.refs, std::vector<std::string>{rev.commit == kCommit ? "main" : "v2"});
  }

  testing::write_all(cache + "/models--org--tiny/.no_exist/" + kCommit + "/chat_template.jinja", "");
  testing::write_all(cache + "/models--org--tiny/.no_exist/" + other + "/chat_template.jinja", "");
  const uint64_t freed = c.remove(hub::parse_repo_ref("org/tiny@v2").value()).value();
  EXPECT_FALSE(fs::exists(cache + "/models--org--tiny/.no_exist/" + other));
  EXPECT_TRUE(fs::exists(cache + "/models--org--tiny/.no_exist/" + std::string(kCommit) + "/chat_template.jinja"));
  EXPECT_EQ(freed, files["config.json"].size());
  EXPECT_TRUE(fs::exists(cache + "/models--org--tiny/snapshots/" + kCommit + "/model.safetensors"));
  EXPECT_TRUE(testing::read_all(cache + "/models--org--tiny/snapshots/" + std::string(kCommit) + "/model.safetensors") ==
              files["model.safetensors"]);
  EXPECT_FALSE(fs::exists(cache + "/models--org--tiny/refs/v2"));
  EXPECT_FALSE(c.remove(hub::parse_repo_ref("org/tiny@v2").value()).ok());
  EXPECT_TRUE(c.remove(hub::parse_repo_ref("org/tiny").value()).ok());
  EXPECT_FALSE(fs::exists(cache + "/models--org--tiny"));
}

}  // namespace
}  // namespace kiln
