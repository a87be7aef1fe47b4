// `kiln model pull` against the mock Hub: the files serving needs land in the Hugging Face
// cache's layout (checked against the layout itself: blob names are the contents' sha256 or git
// blob id, computed here from the served bytes), transfers resume, corruption and throttling are
// survived, and refusals say what to do.
#include <gtest/gtest.h>
#include <stdlib.h>

#include <algorithm>
#include <filesystem>

#include "core/sha256.h"
#include "hub/hf_cache.h"
#include "hub/hub_fixture.h"
#include "hub/pull.h"

namespace kiln {
namespace {

namespace fs = std::filesystem;
using testing::HubEnv;
using testing::MockFaults;
using testing::MockHub;
using testing::CapturedLog;
using testing::MockRepo;

std::vector<std::string> snapshot_files(const std::string& dir) {
  std::vector<std::string> v;
  for (const auto& e : fs::recursive_directory_iterator(dir))
    if (!e.is_directory()) v.push_back(e.path().lexically_relative(dir).generic_string());
  std::sort(v.begin(), v.end());
  return v;
}

int count(const std::vector<testing::MockRequest>& log, const std::string& server, const std::string& path_part,
          const std::string& range = "") {
  int n = 0;
  for (const auto& r : log)
    n += r.server == server && r.path.find(path_part) != std::string::npos && (range.empty() || r.range == range);
  return n;
}

TEST(HubPull, FetchesTheServingFilesIntoTheHuggingFaceLayout) {
  HubEnv env;
  MockRepo repo = testing::tiny_sharded_repo("org/tiny");
  env.hub->add_repo(repo);
  env.settings.token = "hf_mock_token";
  env.settings.token_source = "HF_TOKEN";
  auto r = hub::pull_model(env.settings, hub::parse_repo_ref("org/tiny").value(), env.options());
  ASSERT_TRUE(r.ok()) << r.status().to_string();

  const std::string repo_dir = env.cache + "/models--org--tiny";
  EXPECT_EQ(r->snapshot_dir, repo_dir + "/snapshots/" + r->commit);
  EXPECT_EQ(snapshot_files(r->snapshot_dir), testing::tiny_serving_files());
  EXPECT_EQ(testing::read_all(repo_dir + "/refs/main"), r->commit);
  for (const std::string& f : testing::tiny_serving_files()) {
    const std::string& served = repo.files.at(f);
    const std::string blob = MockHub::is_lfs(f) ? sha256_hex(served) : MockHub::git_blob_id(served);
    EXPECT_EQ(fs::read_symlink(r->snapshot_dir + "/" + f).string(), "../../blobs/" + blob) << f;
    EXPECT_TRUE(testing::read_all(r->snapshot_dir + "/" + f) == served) << f;
  }
  for (const auto& e : fs::directory_iterator(repo_dir + "/blobs"))
    EXPECT_EQ(e.path().extension(), "") << "left behind: " << e.path();
  // The token reached the endpoint, never the CDN (another origin, over HTTPS).
  int hub_requests = 0, cdn_requests = 0;
  for (const auto& q : env.hub->requests()) {
    if (q.server == "hub") {
      ++hub_requests;
      EXPECT_EQ(q.authorization, "Bearer hf_mock_token") << q.path;
    } else {
      ++cdn_requests;
      EXPECT_EQ(q.authorization, "") << q.path;
    }
  }
  EXPECT_GT(hub_requests, 0);
  EXPECT_EQ(cdn_requests, 2);  // the two shards
  // The weights read back as a checkpoint.
  auto ck = Checkpoint::open(r->snapshot_dir);
  ASSERT_TRUE(ck.ok()) << ck.status().to_string();

  // A second pull finds everything cached: no file request at all.
  env.hub->clear_requests();
  auto again = hub::pull_model(env.settings, hub::parse_repo_ref("org/tiny").value(), env.options());
  ASSERT_TRUE(again.ok()) << again.status().to_string();
  EXPECT_EQ(again->fetched, 0);
  EXPECT_EQ(count(env.hub->requests(), "hub", "/resolve/"), 0);
  EXPECT_EQ(count(env.hub->requests(), "cdn", "/blobs/"), 0);
}

TEST(HubPull, ResumesAfterTheConnectionDropsMidFile) {
  HubEnv env;
  env.hub->add_repo(testing::tiny_sharded_repo("org/tiny"));
  env.hub->set_faults({.drop_transfers = 1, .drop_after_bytes = 1000});
  auto r = hub::pull_model(env.settings, hub::parse_repo_ref("org/tiny").value(), env.options());
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_EQ(count(env.hub->requests(), "cdn", "/blobs/", "bytes=1000-"), 1);
  EXPECT_TRUE(Checkpoint::open(r->snapshot_dir).ok());
}

TEST(HubPull, AnInterruptedPullResumesOnTheNextRun) {
  HubEnv env;
  MockRepo repo = testing::tiny_sharded_repo("org/tiny");
  env.hub->add_repo(repo);
  env.hub->set_faults({.drop_transfers = 2, .drop_after_bytes = 1000});
  hub::PullOptions once = env.options();
  once.max_attempts = 1;
  once.jobs = 1;
  auto failed = hub::pull_model(env.settings, hub::parse_repo_ref("org/tiny").value(), once);
  ASSERT_FALSE(failed.ok());
  int partials = 0;
  for (const auto& e : fs::directory_iterator(env.cache + "/models--org--tiny/blobs"))
    if (e.path().extension() == ".incomplete") {
      ++partials;
      EXPECT_EQ(fs::file_size(e.path()), 1000u);
    }
  EXPECT_EQ(partials, 1);
  EXPECT_FALSE(fs::exists(env.cache + "/models--org--tiny/refs/main"));  // a ref only for a complete pull

  env.hub->set_faults({});
  env.hub->clear_requests();
  auto r = hub::pull_model(env.settings, hub::parse_repo_ref("org/tiny").value(), env.options());
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_EQ(count(env.hub->requests(), "cdn", "/blobs/", "bytes=1000-"), 1);
  for (const std::string& f : testing::tiny_serving_files())
    EXPECT_TRUE(testing::read_all(r->snapshot_dir + "/" + f) == repo.files.at(f)) << f;
}

TEST(HubPull, ACorruptTransferIsRefusedAndFetchedAgain) {
  HubEnv env;
  MockRepo repo = testing::tiny_sharded_repo("org/tiny");
  env.hub->add_repo(repo);
  env.hub->set_faults({.corrupt_transfers = 1});
  hub::PullOptions once = env.options();
  once.max_attempts = 1;
  once.jobs = 1;
  auto failed = hub::pull_model(env.settings, hub::parse_repo_ref("org/tiny").value(), once);
  ASSERT_FALSE(failed.ok());
  EXPECT_NE(failed.status().message().find("does not match the expected"), std::string::npos) << failed.status().message();
  for (const auto& e : fs::directory_iterator(env.cache + "/models--org--tiny/blobs"))
    if (e.path().filename().string().size() == 64) {
      EXPECT_EQ(sha256_file(e.path()).value().sha256, e.path().filename());
    }

  env.hub->set_faults({.corrupt_transfers = 1});
  auto r = hub::pull_model(env.settings, hub::parse_repo_ref("org/tiny").value(), env.options());
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_TRUE(testing::read_all(r->snapshot_dir + "/model-00001-of-00002.safetensors") == repo.files.at("model-00001-of-00002.safetensors"));
}

TEST(HubPull, ACorruptedCachedBlobIsDetectedAndReplaced) {
  HubEnv env;
  MockRepo repo = testing::tiny_sharded_repo("org/tiny");
  env.hub->add_repo(repo);
  auto r = hub::pull_model(env.settings, hub::parse_repo_ref("org/tiny").value(), env.options());
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  const std::string& shard = repo.files.at("model-00002-of-00002.safetensors");
  const std::string blob = env.cache + "/models--org--tiny/blobs/" + sha256_hex(shard);
  std::string damaged = shard;
  damaged[damaged.size() / 3] ^= 4;
  testing::write_all(blob, damaged);
  env.hub->clear_requests();
  CapturedLog log;
  auto again = hub::pull_model(env.settings, hub::parse_repo_ref("org/tiny").value(), env.options(log.f));
  ASSERT_TRUE(again.ok()) << again.status().to_string();
  EXPECT_EQ(again->fetched, 1);
  EXPECT_TRUE(testing::read_all(blob) == shard);
  EXPECT_NE(log.text().find("does not match its sha256"), std::string::npos) << log.text();
}

TEST(HubPull, ThrottlingIsWaitedOutAsRetryAfterSays) {
  HubEnv env;
  env.hub->add_repo(testing::tiny_sharded_repo("org/tiny"));
  env.hub->set_faults({.throttle_requests = 2, .retry_after_s = 1});
  CapturedLog log;
  hub::PullOptions o = env.options(log.f);
  o.backoff_s = 0.05;
  auto r = hub::pull_model(env.settings, hub::parse_repo_ref("org/tiny").value(), o);
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  int throttled = 0;
  for (const auto& q : env.hub->requests()) throttled += q.status == 429;
  EXPECT_EQ(throttled, 2);
  // The wait is the server's 1 s, not the 0.05 s backoff.
  EXPECT_NE(log.text().find("trying again in 1.00 s"), std::string::npos) << log.text();

  // A Retry-After beyond the cap waits the cap.
  env.hub->set_faults({.throttle_requests = 1, .retry_after_s = 3600});
  CapturedLog log2;
  o = env.options(log2.f);
  o.max_retry_after_s = 0.2;
  ASSERT_TRUE(hub::pull_model(env.settings, hub::parse_repo_ref("org/tiny").value(), o).ok());
  EXPECT_NE(log2.text().find("trying again in 0.20 s"), std::string::npos) << log2.text();
}

TEST(HubPull, RetryAfterAsAnHttpDateIsWaitedOutWithinTheCap) {
  HubEnv env;
  env.hub->add_repo(testing::tiny_sharded_repo("org/tiny"));
  // An hour ahead: the cap applies (the 0.05 s backoff would show were the date not read).
  env.hub->set_faults({.throttle_requests = 1, .retry_after_s = 3600, .retry_after_date = true});
  CapturedLog log;
  hub::PullOptions o = env.options(log.f);
  o.backoff_s = 0.05;
  o.max_retry_after_s = 0.2;
  ASSERT_TRUE(hub::pull_model(env.settings, hub::parse_repo_ref("org/tiny").value(), o).ok());
  EXPECT_NE(log.text().find("trying again in 0.20 s"), std::string::npos) << log.text();
  // A date already past: no wait at all.
  env.hub->set_faults({.throttle_requests = 1, .retry_after_s = -3600, .retry_after_date = true});
  CapturedLog past;
  o.log = past.f;
  env.hub->clear_requests();
  ASSERT_TRUE(hub::pull_model(env.settings, hub::parse_repo_ref("org/tiny").value(), o).ok());
  EXPECT_NE(past.text().find("trying again in 0.00 s"), std::string::npos) << past.text();
  int throttled = 0;
  for (const auto& q : env.hub->requests()) throttled += q.status == 429;
  EXPECT_EQ(throttled, 1);
}

TEST(HubPull, MarksTheFilesTheCommitLacksAsHuggingFaceHubDoes) {
  HubEnv env;
  env.hub->add_repo(testing::tiny_sharded_repo("org/tiny"));
  auto r = hub::pull_model(env.settings, hub::parse_repo_ref("org/tiny").value(), env.options());
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  // tiny_sharded_repo has generation_config.json and tokenizer_config.json, and is sharded: the
  // other optional files and the single-file weights are absent at this commit.
  const std::vector<std::string> absent = {"chat_template.jinja", "chat_template.json", "model.safetensors",
                                           "special_tokens_map.json"};
  const std::string marks = env.cache + "/models--org--tiny/.no_exist/" + r->commit;
  EXPECT_EQ(snapshot_files(marks), absent);
  for (const std::string& f : absent) EXPECT_EQ(fs::file_size(marks + "/" + f), 0u) << f;
  std::vector<std::string> reported = r->absent;
  std::sort(reported.begin(), reported.end());
  EXPECT_EQ(reported, absent);
}

TEST(HubPull, AGatedRepositoryWantsATokenAndTheLicence) {
  HubEnv env;
  MockRepo repo = testing::tiny_sharded_repo("org/gated");
  repo.gated = true;
  env.hub->add_repo(repo);
  const hub::RepoRef ref = hub::parse_repo_ref("org/gated").value();
  auto none = hub::pull_model(env.settings, ref, env.options());
  ASSERT_FALSE(none.ok());
  EXPECT_NE(none.status().message().find("gated"), std::string::npos) << none.status().message();
  EXPECT_NE(none.status().message().find("set HF_TOKEN"), std::string::npos) << none.status().message();

  env.settings.token = "hf_mock_no_licence";
  env.settings.token_source = "HF_TOKEN";
  auto unaccepted = hub::pull_model(env.settings, ref, env.options());
  ASSERT_FALSE(unaccepted.ok());
  EXPECT_NE(unaccepted.status().message().find("accept its licence at " + env.hub->endpoint() + "/org/gated"),
            std::string::npos)
      << unaccepted.status().message();

  env.settings.token = "hf_mock_token";
  auto r = hub::pull_model(env.settings, ref, env.options());
  EXPECT_TRUE(r.ok()) << r.status().to_string();
}

TEST(HubPull, UnknownNamesAndRevisionsSayWhatToCheck) {
  HubEnv env;
  env.hub->add_repo(testing::tiny_sharded_repo("org/tiny"));
  auto missing = hub::pull_model(env.settings, hub::parse_repo_ref("org/absent").value(), env.options());
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().code(), ErrorCode::kNotFound);
  EXPECT_NE(missing.status().message().find("Check the name"), std::string::npos) << missing.status().message();
  EXPECT_NE(missing.status().message().find("HF_TOKEN"), std::string::npos) << missing.status().message();
  auto rev = hub::pull_model(env.settings, hub::parse_repo_ref("org/tiny@nope").value(), env.options());
  ASSERT_FALSE(rev.ok());
  EXPECT_NE(rev.status().message().find("revision 'nope' not found"), std::string::npos) << rev.status().message();
}

TEST(HubPull, OfflineModeMakesNoRequest) {
  HubEnv env;
  env.hub->add_repo(testing::tiny_sharded_repo("org/tiny"));
  env.settings.offline = true;
  auto r = hub::pull_model(env.settings, hub::parse_repo_ref("org/tiny").value(), env.options());
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("HF_HUB_OFFLINE"), std::string::npos);
  EXPECT_TRUE(env.hub->requests().empty());
}

TEST(HubPull, ARepositoryWithoutSafetensorsIsRefusedNamingWhatItHas) {
  HubEnv env;
  MockRepo repo;
  repo.id = "org/bin-only";
  repo.files["config.json"] = "{}";
  repo.files["pytorch_model.bin"] = "pickle";
  env.hub->add_repo(repo);
  auto r = hub::pull_model(env.settings, hub::parse_repo_ref("org/bin-only").value(), env.options());
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("safetensors weights only"), std::string::npos) << r.status().message();
  EXPECT_NE(r.status().message().find("pytorch_model.bin"), std::string::npos) << r.status().message();
}

TEST(HubPull, TooLittleDiskIsRefusedBeforeAnyWeightIsFetched) {
  HubEnv env;
  env.hub->add_repo(testing::tiny_sharded_repo("org/tiny"));
  hub::PullOptions o = env.options();
  o.disk_reserve_bytes = 1ull << 60;
  auto r = hub::pull_model(env.settings, hub::parse_repo_ref("org/tiny").value(), o);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), ErrorCode::kResourceExhausted);
  EXPECT_NE(r.status().message().find("HF_HUB_CACHE"), std::string::npos) << r.status().message();
  EXPECT_EQ(count(env.hub->requests(), "cdn", "/blobs/"), 0);
}

TEST(HubPull, ABranchAndACommitGiveTheSameSnapshot) {
  HubEnv env;
  MockRepo repo = testing::tiny_sharded_repo("org/tiny");
  repo.refs = {"main", "v1"};
  env.hub->add_repo(repo);
  auto by_tag = hub::pull_model(env.settings, hub::parse_repo_ref("org/tiny@v1").value(), env.options());
  ASSERT_TRUE(by_tag.ok()) << by_tag.status().to_string();
  EXPECT_EQ(testing::read_all(env.cache + "/models--org--tiny/refs/v1"), by_tag->commit);
  auto by_commit = hub::pull_model(env.settings, hub::parse_repo_ref("org/tiny@" + by_tag->commit).value(), env.options());
  ASSERT_TRUE(by_commit.ok());
  EXPECT_EQ(by_commit->snapshot_dir, by_tag->snapshot_dir);
  EXPECT_FALSE(fs::exists(env.cache + "/models--org--tiny/refs/" + by_tag->commit));
}

}  // namespace
}  // namespace kiln
