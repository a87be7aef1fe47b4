// Training jobs without HTTP: the JobQueue's bounds, states, positions and cancellation; work run
// on the engine actor's thread between serving cycles while requests are in flight; atomic
// adapter publication (a failed validation publishes nothing and leaves no staging directory; a
// publication killed at any step leaves the old adapter or the new one; a failed one keeps the
// adapter and says where);
// adapter merges checked against the model run with the sources stacked as LoraTerms.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <future>
#include <set>
#include <thread>

#include "engine/adapter_registry.h"
#include "engine/engine_actor.h"
#include "engine/model_fixture.h"
#include "train/adapter_merge.h"
#include "train/adapter_publish.h"
#include "train/job_queue.h"

namespace kiln {
namespace {

namespace fs = std::filesystem;
using namespace std::chrono_literals;

// Polls `pred` for up to 10 s.
template <typename F>
bool eventually(F pred) {
  for (int i = 0; i < 2000; ++i) {
    if (pred()) return true;
    std::this_thread::sleep_for(5ms);
  }
  return pred();
}

// A job that waits until `release` is fulfilled, then succeeds naming `name`.
JobWork blocked_job(std::shared_future<void> release, std::string name) {
  return [release, name](const std::atomic<bool>&, const std::function<void(const TrainProgress&)>&) -> Result<JobOutcome> {
    release.wait();
    return JobOutcome{name, "/nowhere/" + name, 0};
  };
}

TEST(JobQueue, BoundsPositionsStatesAndEndCallbacks) {
  std::mutex mu;
  std::vector<std::pair<std::string, JobState>> ended;
  JobQueue q(2, [&](const JobInfo& j) {
    std::lock_guard<std::mutex> lock(mu);
    ended.push_back({j.id, j.state});
  });
  std::promise<void> release_a;
  auto a = q.submit("sft", blocked_job(release_a.get_future().share(), "a"));
  ASSERT_TRUE(a.ok());
  ASSERT_TRUE(eventually([&] { return q.status(a->id)->state == JobState::kRunning; }));
  EXPECT_EQ(q.status(a->id)->queue_position, 0);
  auto b = q.submit("sft", [](const std::atomic<bool>&, const auto&) -> Result<JobOutcome> { return JobOutcome{"b", "", 0}; });
  auto c = q.submit("grpo", [](const std::atomic<bool>&, const auto&) -> Result<JobOutcome> {
    return invalid_argument("groups[0]: bad data");
  });
  ASSERT_TRUE(b.ok() && c.ok());
  EXPECT_EQ(b->queue_position, 1);
  EXPECT_EQ(c->queue_position, 2);
  EXPECT_EQ(b->state, JobState::kQueued);
  // Two wait: the third is refused (the server's 503).
  auto d = q.submit("sft", blocked_job({}, "d"));
  ASSERT_FALSE(d.ok());
  EXPECT_EQ(d.status().code(), ErrorCode::kResourceExhausted);

  // Cancelling a queued job removes it; the one behind moves up.
  auto cb = q.cancel(b->id);
  ASSERT_TRUE(cb.ok());
  EXPECT_EQ(cb->state, JobState::kCancelled);
  EXPECT_EQ(q.status(c->id)->queue_position, 1);
  EXPECT_EQ(q.cancel(b->id).status().code(), ErrorCode::kFailedPrecondition);  // already ended
  EXPECT_EQ(q.cancel("job-unknown").status().code(), ErrorCode::kNotFound);
  EXPECT_EQ(q.status("job-unknown").status().code(), ErrorCode::kNotFound);

  auto listed = q.list();
  ASSERT_EQ(listed.size(), 3u);
  EXPECT_EQ(listed[0].id, a->id);  // running first
  EXPECT_EQ(listed[1].id, c->id);  // then queued
  EXPECT_EQ(listed[2].id, b->id);  // then ended

  release_a.set_value();
  ASSERT_TRUE(eventually([&] { return q.status(c->id)->finished(); }));
  const JobInfo ja = q.status(a->id).value(), jc = q.status(c->id).value();
  EXPECT_EQ(ja.state, JobState::kCompleted);
  EXPECT_EQ(ja.outcome.adapter_name, "a");
  EXPECT_GT(ja.finished_at, 0);
  EXPECT_GE(ja.finished_at, ja.started_at);
  EXPECT_EQ(jc.state, JobState::kFailed);
  EXPECT_NE(jc.error.find("groups[0]: bad data"), std::string::npos) << jc.error;
  std::lock_guard<std::mutex> lock(mu);
  ASSERT_EQ(ended.size(), 3u);
  EXPECT_EQ(ended[0], std::make_pair(b->id, JobState::kCancelled));
  EXPECT_EQ(ended[1], std::make_pair(a->id, JobState::kCompleted));
  EXPECT_EQ(ended[2], std::make_pair(c->id, JobState::kFailed));
}

TEST(JobQueue, CancellingARunningJobSetsItsFlagAndKeepsItsLossCurve) {
  JobQueue q(4);
  auto j = q.submit("sft", [](const std::atomic<bool>& cancel, const std::function<void(const TrainProgress&)>& progress)
                               -> Result<JobOutcome> {
    for (int64_t step = 1; step <= 100000; ++step) {
      if (cancel.load()) return failed_precondition("cancelled");
      TrainProgress p;
      p.step = step, p.total_steps = 100000, p.loss = 10.0 / static_cast<double>(step), p.tokens_per_second = 123.0;
      progress(p);
      std::this_thread::sleep_for(1ms);
    }
    return JobOutcome{};
  });
  ASSERT_TRUE(j.ok());
  ASSERT_TRUE(eventually([&] { return q.status(j->id)->step >= 3; }));
  auto c = q.cancel(j->id);
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(c->state, JobState::kRunning);  // it ends at its next step boundary
  ASSERT_TRUE(eventually([&] { return q.status(j->id)->finished(); }));
  const JobInfo info = q.status(j->id).value();
  EXPECT_EQ(info.state, JobState::kCancelled);
  ASSERT_GE(info.losses.size(), 3u);
  EXPECT_EQ(static_cast<int64_t>(info.losses.size()), info.step);
  for (size_t i = 0; i < info.losses.size(); ++i) EXPECT_DOUBLE_EQ(info.losses[i], 10.0 / static_cast<double>(i + 1));
  EXPECT_DOUBLE_EQ(info.tokens_per_second, 123.0);
  EXPECT_EQ(info.to_json()["state"], "cancelled");
}

// Every step's gradient norm and rate, and each eval point's held-out loss, reach the status as
// curves beside the loss curve, with the last of each as its own field.
TEST(JobQueue, TheStatusCarriesTheGradNormRateAndEvalLossCurves) {
  JobQueue q(4);
  auto j = q.submit("sft", [](const std::atomic<bool>&, const std::function<void(const TrainProgress&)>& progress)
                               -> Result<JobOutcome> {
    for (int64_t step = 1; step <= 4; ++step) {
      TrainProgress p;
      p.step = step;
      p.total_steps = 4;
      p.loss = 5.0 - step;
      p.grad_norm = 0.5 * step;
      p.lr = 1e-3 / step;
      if (step % 2 == 0) p.eval_loss = 10.0 + step;
      progress(p);
    }
    return JobOutcome{};
  });
  ASSERT_TRUE(j.ok());
  ASSERT_TRUE(eventually([&] { return q.status(j->id)->finished(); }));
  const nlohmann::json s = q.status(j->id)->to_json();
  EXPECT_EQ(s["grad_norm_curve"], nlohmann::json({0.5, 1.0, 1.5, 2.0}));
  EXPECT_EQ(s["grad_norm"], 2.0);
  EXPECT_EQ(s["lr_curve"], nlohmann::json({1e-3, 1e-3 / 2, 1e-3 / 3, 1e-3 / 4}));
  EXPECT_EQ(s["lr"], 1e-3 / 4);
  EXPECT_EQ(s["eval_loss_curve"], nlohmann::json::parse(R"([{"step": 2, "loss": 12.0}, {"step": 4, "loss": 14.0}])"));
  EXPECT_EQ(s["eval_loss"], 14.0);
  // A job that has taken no step yet: empty curves, null lasts.
  const nlohmann::json none = JobInfo{}.to_json();
  for (const char* f : {"grad_norm", "lr", "eval_loss"}) EXPECT_TRUE(none[f].is_null()) << f;
  EXPECT_TRUE(none["eval_loss_curve"].empty());
}

TEST(EngineActor, WorkRunsOnTheActorThreadBetweenCyclesWhileRequestsFinish) {
  testing::TinyModel m;
  EngineConfig ec;
  ec.scheduler.max_batch_tokens = 512;
  ec.scheduler.max_running = 8;
  ec.kv_blocks = 64;
  ec.snapshot_slots = 4;
  // Two events a request before its decoding pauses: the requests cannot run ahead of this
  // test's draining (a starved test thread once let them finish between two calls).
  ec.channel_capacity = 2;
  auto engine = Engine::create(*m.model, ec);
  ASSERT_TRUE(engine.ok());
  EngineActor actor(std::move(*engine));
  constexpr int kRequests = 4, kTokens = 40;
  std::vector<Submission> subs;
  for (int i = 0; i < kRequests; ++i) {
    RequestSpec r;
    r.prompt = testing::prompt_of(20, i);
    r.max_tokens = kTokens;
    r.ignore_eos = true;
    r.sampling.temperature = 0.f;
    auto s = actor.submit(r);
    ASSERT_TRUE(s.ok());
    subs.push_back(*s);
  }
  std::vector<int> tokens(kRequests, 0);
  std::vector<FinishReason> finish(kRequests, FinishReason::kNone);
  auto drain = [&] {
    int n = 0;
    for (int i = 0; i < kRequests; ++i)
      while (auto e = subs[i].channel->try_pop()) {
        ++n;
        if (e->token >= 0) ++tokens[i];
        if (e->finish != FinishReason::kNone) finish[i] = e->finish;
      }
    return n;
  };
  std::set<std::thread::id> ran_on;
  int during = 0, between_first = 0;
  for (int call = 0; call < 12; ++call) {
    int since_last = drain();
    Status st = actor.run_between_cycles([&]() -> Status {
      ran_on.insert(std::this_thread::get_id());
      // Tokens of the cycle that ran since the previous call.
      since_last += drain();
      // From the third call on: the cycles before the second may all be the prompts' prefill,
      // which emits no token yet when a call's work ran before the first cycle (seen under load).
      if (call > 1 && call <= 6) between_first += since_last > 0 ? 1 : 0;
      // Only the actor's thread pushes tokens: while this runs, none may arrive.
      std::this_thread::sleep_for(3ms);
      during += drain();
      return call == 7 ? invalid_argument("step 7 failed") : Status{};
    });
    if (call == 7) EXPECT_EQ(st.code(), ErrorCode::kInvalidArgument);
    else EXPECT_TRUE(st.ok()) << st.to_string();
  }
  EXPECT_EQ(ran_on.size(), 1u);
  EXPECT_EQ(ran_on.count(std::this_thread::get_id()), 0u);
  EXPECT_EQ(during, 0) << "tokens arrived while the work ran: it overlapped a cycle";
  // Cycles ran between consecutive calls (the requests were still far from done).
  EXPECT_EQ(between_first, 5);
  ASSERT_TRUE(eventually([&] {
    drain();
    for (auto f : finish)
      if (f == FinishReason::kNone) return false;
    return true;
  }));
  for (int i = 0; i < kRequests; ++i) {
    EXPECT_EQ(tokens[i], kTokens);
    EXPECT_EQ(finish[i], FinishReason::kLength);
  }
}

// ---- adapters ----

// A rank-`rank` adapter of the tiny model with random A and B (B non-zero, so it changes logits).
LoraAdapter random_adapter(testing::TinyModel& m, int64_t rank, double alpha, uint64_t seed) {
  LoraConfig c;
  c.rank = rank;
  c.alpha = alpha;
  for (int t = 0; t < kLoraTargetCount; ++t) c.targets.push_back(static_cast<LoraTarget>(t));
  LoraAdapter a = LoraAdapter::init(c, m.model->config(), seed, m.backend->storage()).value();
  std::mt19937_64 rng(seed * 7 + 1);
  std::normal_distribution<float> normal(0.f, 0.05f);
  for (int64_t l = 0; l < a.num_layers(); ++l)
    for (int t = 0; t < kLoraTargetCount; ++t) {
      LoraFactors& f = a.factors(l, static_cast<LoraTarget>(t));
      if (!f.defined()) continue;
      Tensor b = Tensor::empty(f.b.shape(), DType::kF32);
      for (int64_t i = 0; i < b.numel(); ++i) b.data<float>()[i] = normal(rng);
      EXPECT_TRUE(m.backend->storage().copy_from_host(b, f.b).ok());
    }
  return a;
}

// An adapter's factors on the host (what merges and publication take), and back on the device.
HostLoraAdapter host_of(testing::TinyModel& m, const LoraAdapter& a) {
  return a.download(m.backend->storage()).value();
}
LoraAdapter device_of(testing::TinyModel& m, const HostLoraAdapter& a) {
  return LoraAdapter::upload(a, m.backend->storage()).value();
}

std::vector<float> logits(testing::TinyModel& m, const std::vector<LoraTerm>& lora) {
  const std::vector<int32_t> prompt = testing::prompt_of(24, 3);
  auto state = m.model->create_state({1, 1}).value();
  auto seq = state.new_sequence().value();
  SequenceInput row{&seq, prompt, lora};
  Tensor t = m.model->forward({&row, 1}, LogitsMode::kAll, state).value();
  state.release(seq);
  return std::vector<float>(t.data<float>(), t.data<float>() + t.numel());
}

double max_rel_diff(const std::vector<float>& a, const std::vector<float>& b) {
  double scale = 0, diff = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    scale = std::max(scale, std::fabs(static_cast<double>(b[i])));
    diff = std::max(diff, std::fabs(static_cast<double>(a[i]) - b[i]));
  }
  return diff / scale;
}

struct TempDir {
  std::string path = (fs::temp_directory_path() / ("kiln-jobq-" + std::to_string(::getpid()) + "-" +
                                                    std::to_string(std::random_device{}()))).string();
  TempDir() { fs::create_directories(path); }
  ~TempDir() { fs::remove_all(path); }
};

std::vector<std::string> entries(const std::string& dir) {
  std::vector<std::string> out;
  for (const auto& e : fs::directory_iterator(dir)) out.push_back(e.path().filename().string());
  std::sort(out.begin(), out.end());
  return out;
}

std::string file_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

TEST(AdapterPublish, PublishesAtomicallyAndAFailedValidationLeavesNothing) {
  testing::TinyModel m;
  TempDir tmp;
  const HostLoraAdapter first = host_of(m, random_adapter(m, 4, 8, 1)), second = host_of(m, random_adapter(m, 2, 2, 2));
  auto path = publish_adapter(first, {{"seed", 1}}, m.model->config(), tmp.path, "tuned");
  ASSERT_TRUE(path.ok()) << path.status().to_string();
  EXPECT_EQ(*path, tmp.path + "/tuned");
  EXPECT_EQ(entries(tmp.path), std::vector<std::string>{"tuned"});
  EXPECT_EQ(entries(*path), (std::vector<std::string>{"adapter_config.json", "adapter_model.safetensors", "train_receipt.json"}));
  EXPECT_EQ(nlohmann::json::parse(file_bytes(*path + "/train_receipt.json"))["seed"], 1);
  const std::string weights = file_bytes(*path + "/adapter_model.safetensors");

  // Validation against another model's shape fails: the published adapter is untouched and no
  // staging directory is left behind.
  ModelConfig other = m.model->config();
  other.hidden_size *= 2;
  auto bad = publish_adapter(second, nullptr, other, tmp.path, "tuned");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("nothing was published"), std::string::npos) << bad.status().to_string();
  EXPECT_EQ(entries(tmp.path), std::vector<std::string>{"tuned"});
  EXPECT_EQ(file_bytes(*path + "/adapter_model.safetensors"), weights);
  auto bad_new = publish_adapter(second, nullptr, other, tmp.path, "fresh");
  ASSERT_FALSE(bad_new.ok());
  EXPECT_EQ(entries(tmp.path), std::vector<std::string>{"tuned"});

  // A valid replacement swaps the directory whole: the new rank, no receipt, nothing left aside.
  auto replaced = publish_adapter(second, nullptr, m.model->config(), tmp.path, "tuned");
  ASSERT_TRUE(replaced.ok()) << replaced.status().to_string();
  EXPECT_EQ(entries(tmp.path), std::vector<std::string>{"tuned"});
  EXPECT_EQ(entries(*replaced), (std::vector<std::string>{"adapter_config.json", "adapter_model.safetensors"}));
  EXPECT_EQ(LoraConfig::load(*replaced)->rank, 2);
}

// A child process publishes a new adapter over the old one and is killed (core/atomic_publish.h's
// hook) before its n-th step: each file is a publication of its own inside the staging folder
// (sync, rename, sync parent: weights, config, receipt = calls 1 to 9), then the folder (sync 10,
// rename 11, sync parent 12, removal of the old one 13). The name then holds the old adapter or
// the new one, whole and loadable, and the sweep leaves nothing else.
TEST(AdapterPublish, KilledBeforeEachStepLeavesTheOldOrTheNewAdapterAndTheSweepClearsTheRest) {
  testing::TinyModel m;
  const HostLoraAdapter old_adapter = host_of(m, random_adapter(m, 4, 8, 1)), new_adapter = host_of(m, random_adapter(m, 2, 2, 2));
  StorageFacet& storage = m.backend->storage();
  const ModelConfig& mc = m.model->config();
  TempDir ref;  // each version's bytes, published on their own
  ASSERT_TRUE(publish_adapter(old_adapter, nullptr, mc, ref.path, "old").ok());
  ASSERT_TRUE(publish_adapter(new_adapter, nullptr, mc, ref.path, "new").ok());
  const std::string old_weights = file_bytes(ref.path + "/old/adapter_model.safetensors");
  const std::string new_weights = file_bytes(ref.path + "/new/adapter_model.safetensors");
  ASSERT_NE(old_weights, new_weights);
  for (int n = 1; n <= 14; ++n) {
    TempDir tmp;
    ASSERT_TRUE(publish_adapter(old_adapter, {{"version", 1}}, mc, tmp.path, "tuned").ok());
    const pid_t pid = ::fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      auto calls = std::make_shared<int>(0);
      set_publish_fault_hook([calls, n](PublishStep, const std::string&) -> Status {
        if (++*calls == n) ::_exit(7);
        return {};
      });
      ::_exit(publish_adapter(new_adapter, {{"version", 2}}, mc, tmp.path, "tuned").ok() ? 0 : 1);
    }
    int status = 0;
    ASSERT_EQ(::waitpid(pid, &status, 0), pid);
    ASSERT_TRUE(WIFEXITED(status));
    EXPECT_EQ(WEXITSTATUS(status), n <= 13 ? 7 : 0) << "call " << n;
    const bool is_new = n >= 12;
    const std::string dest = tmp.path + "/tuned";
    EXPECT_EQ(file_bytes(dest + "/adapter_model.safetensors"), is_new ? new_weights : old_weights) << "call " << n;
    EXPECT_EQ(nlohmann::json::parse(file_bytes(dest + "/train_receipt.json"))["version"], is_new ? 2 : 1) << "call " << n;
    auto loaded = LoraAdapter::load(dest, mc, storage);
    ASSERT_TRUE(loaded.ok()) << "call " << n << ": " << loaded.status().to_string();
    EXPECT_EQ(loaded->config().rank, is_new ? 2 : 4) << "call " << n;
    ASSERT_TRUE(sweep_staging(tmp.path).ok());
    EXPECT_EQ(entries(tmp.path), std::vector<std::string>{"tuned"}) << "call " << n;
  }
}

// A publication whose folder cannot be synced (the disk is full) keeps the adapter, written
// whole, as .failed-<name>-<random> and names it; without kKeep, or when the files themselves
// cannot be written, nothing is left.
TEST(AdapterPublish, AFailedPublicationKeepsTheWrittenAdapterAndNamesWhere) {
  testing::TinyModel m;
  const HostLoraAdapter adapter = host_of(m, random_adapter(m, 4, 8, 3));
  StorageFacet& storage = m.backend->storage();
  const ModelConfig& mc = m.model->config();
  auto disk_full_at = [](const std::string& file_prefix) {
    set_publish_fault_hook([file_prefix](PublishStep step, const std::string& target) -> Status {
      const bool hit = step == PublishStep::kSyncFiles && fs::path(target).filename().string().rfind(file_prefix, 0) == 0;
      return hit ? io_error("No space left on device") : Status();
    });
  };
  TempDir tmp;
  disk_full_at(".staging-tuned-");  // the folder's sync
  auto kept = publish_adapter(adapter, {{"seed", 3}}, mc, tmp.path, "tuned", OnPublishFailure::kKeep);
  set_publish_fault_hook(nullptr);
  ASSERT_FALSE(kept.ok());
  const std::string msg = kept.status().message();
  EXPECT_NE(msg.find("No space left on device"), std::string::npos) << msg;
  const std::vector<std::string> left = entries(tmp.path);
  ASSERT_EQ(left.size(), 1u);
  EXPECT_EQ(left[0].rfind(".failed-tuned-", 0), 0u) << left[0];
  EXPECT_NE(msg.find("kept in " + tmp.path + "/" + left[0]), std::string::npos) << msg;
  auto loaded = LoraAdapter::load(tmp.path + "/" + left[0], mc, storage);
  ASSERT_TRUE(loaded.ok()) << loaded.status().to_string();
  EXPECT_EQ(loaded->config().rank, 4);
  auto swept = sweep_staging(tmp.path);
  ASSERT_TRUE(swept.ok());
  EXPECT_EQ(swept->kept, std::vector<std::string>{tmp.path + "/" + left[0]});
  EXPECT_EQ(entries(tmp.path), left);

  TempDir discard, unwritten;
  disk_full_at(".staging-tuned-");
  EXPECT_FALSE(publish_adapter(adapter, nullptr, mc, discard.path, "tuned").ok());
  disk_full_at(".staging-adapter_model.safetensors-");  // the weights file inside the folder
  auto lost = publish_adapter(adapter, nullptr, mc, unwritten.path, "tuned", OnPublishFailure::kKeep);
  set_publish_fault_hook(nullptr);
  ASSERT_FALSE(lost.ok());
  EXPECT_NE(lost.status().message().find("nothing could be kept"), std::string::npos) << lost.status().message();
  EXPECT_TRUE(entries(discard.path).empty());
  EXPECT_TRUE(entries(unwritten.path).empty());
}

TEST(AdapterMerge, ConcatAndWeightedAverageEqualTheSourcesStackedAsTerms) {
  testing::TinyModel m;
  const LoraAdapter a = random_adapter(m, 4, 8, 11), b = random_adapter(m, 2, 16, 12);
  const HostLoraAdapter ha = host_of(m, a), hb = host_of(m, b);
  const std::vector<float> base = logits(m, {});
  for (MergeMethod method : {MergeMethod::kConcat, MergeMethod::kWeightedAverage}) {
    const double wa = 0.7, wb = -0.4;
    auto merged = merge_adapters({{&ha, "a", wa}, {&hb, "b", wb}}, {method}, m.model->config());
    ASSERT_TRUE(merged.ok()) << merged.status().to_string();
    EXPECT_EQ(merged->config.rank, 6);
    const LoraAdapter served = device_of(m, *merged);
    const double norm = method == MergeMethod::kConcat ? 1.0 : wa + wb;
    const std::vector<float> stacked = logits(m, {{&a, static_cast<float>(wa / norm)}, {&b, static_cast<float>(wb / norm)}});
    const std::vector<float> single = logits(m, {{&served, 1.f}});
    EXPECT_GT(max_rel_diff(stacked, base), 1e-3) << "the adapters must change the logits for the check to mean anything";
    EXPECT_LT(max_rel_diff(single, stacked), 2e-5) << "method " << static_cast<int>(method);
  }
}

TEST(AdapterMerge, TiesOfOneSourceAtFullDensityReproducesItsDelta) {
  testing::TinyModel m;
  const LoraAdapter a = random_adapter(m, 3, 6, 21);
  const HostLoraAdapter ha = host_of(m, a);
  MergeOptions opt;
  opt.method = MergeMethod::kTies;
  opt.density = 1.0;
  auto merged = merge_adapters({{&ha, "a", 1.5}}, opt, m.model->config());
  ASSERT_TRUE(merged.ok()) << merged.status().to_string();
  EXPECT_EQ(merged->config.rank, 3);
  EXPECT_FLOAT_EQ(merged->config.scale(), 1.f);
  // The delta 1.5 * scale * B A in double, against the merged B' A' (scale 1).
  int checked = 0;
  for (int64_t l = 0; l < a.num_layers(); ++l)
    for (int t = 0; t < kLoraTargetCount; ++t) {
      const LoraFactors& f = a.factors(l, static_cast<LoraTarget>(t));
      const LoraFactors& g = merged->factors(l, static_cast<LoraTarget>(t));
      ASSERT_EQ(f.defined(), g.defined());
      if (!f.defined()) continue;
      const int64_t r = 3, in = f.a.dim(1), out = f.b.dim(0);
      double worst = 0, scale = 0;
      for (int64_t i = 0; i < out; ++i)
        for (int64_t j = 0; j < in; ++j) {
          double want = 0, got = 0;
          for (int64_t k = 0; k < r; ++k) {
            want += 1.5 * a.scale() * f.b.data<float>()[i * r + k] * f.a.data<float>()[k * in + j];
            got += static_cast<double>(g.b.data<float>()[i * r + k]) * g.a.data<float>()[k * in + j];
          }
          worst = std::max(worst, std::fabs(want - got));
          scale = std::max(scale, std::fabs(want));
        }
      EXPECT_LT(worst, 1e-4 * scale) << "layer " << l << " " << lora_target_name(static_cast<LoraTarget>(t));
      ++checked;
    }
  EXPECT_GT(checked, 10);
}

TEST(AdapterMerge, TiesKeepsOnlyAgreeingSignsOfTheTrimmedDeltas) {
  // Two sources with opposite deltas of different sizes: the elected sign is the larger one's,
  // and the disjoint mean keeps only its entries, so the result is exactly that delta.
  testing::TinyModel m;
  const LoraAdapter a = random_adapter(m, 2, 2, 31);
  const HostLoraAdapter ha = host_of(m, a);
  MergeOptions opt;
  opt.method = MergeMethod::kTies;
  opt.density = 1.0;
  auto merged = merge_adapters({{&ha, "a", 2.0}, {&ha, "a2", -1.0}}, opt, m.model->config());
  ASSERT_TRUE(merged.ok()) << merged.status().to_string();
  const LoraAdapter served = device_of(m, *merged);
  const std::vector<float> want = logits(m, {{&a, 2.f}});
  const std::vector<float> got = logits(m, {{&served, 1.f}});
  EXPECT_LT(max_rel_diff(got, want), 1e-4);
}

}  // namespace
}  // namespace kiln
