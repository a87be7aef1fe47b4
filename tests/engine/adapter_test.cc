// LoRA adapters served per request: the registry (names, revisions, atomic replacement), and
// the engine resolving a request's adapters at submit: greedy output == a direct forward loop
// with the same LoraTerms on the row, mixed batches == each alone, no prefix-cache sharing
// across adapter stacks, revisions or private-adapter keys, and an unload that leaves requests
// in flight intact.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <map>
#include <set>

#include "engine/adapter_registry.h"
#include "engine/engine.h"
#include "model_fixture.h"
#include "scripted_constraint.h"
#include "test_util.h"

namespace kiln {
namespace {

namespace fs = std::filesystem;
using testing::prompt_of;

std::string peft_dir() { return std::string(KILN_FIXTURES_DIR) + "/lora_reference/gqa_untied"; }

// Greedy tokens of one sequence run directly through the model with `lora` on its row.
std::vector<int32_t> alone(Qwen35Model& model, const std::vector<int32_t>& prompt, int64_t max_tokens,
                           std::vector<LoraTerm> lora = {}) {
  auto state = model.create_state({1, (static_cast<int64_t>(prompt.size()) + max_tokens + 63) / 64}).value();
  auto seq = state.new_sequence().value();
  std::vector<int32_t> out, next = prompt;
  SamplingParams greedy;
  greedy.temperature = 0.f;
  Sampler s(greedy, 0);
  for (int64_t i = 0; i < max_tokens; ++i) {
    SequenceInput row{&seq, next, lora};
    Tensor logits = model.forward({&row, 1}, LogitsMode::kLast, state).value();
    out.push_back(s.sample({logits.data<float>(), static_cast<size_t>(logits.dim(1))}, {}, {}).token);
    next = {out.back()};
  }
  state.release(seq);
  return out;
}

RequestSpec greedy(std::vector<int32_t> prompt, int64_t max_tokens, std::string adapter = "",
                   std::vector<RequestSpec::AdapterUse> adapters = {}) {
  RequestSpec r;
  r.prompt = std::move(prompt);
  r.max_tokens = max_tokens;
  r.sampling.temperature = 0.f;
  r.adapter = std::move(adapter);
  r.adapters = std::move(adapters);
  return r;
}

// Steps until idle; the generated tokens of each submission.
std::map<uint64_t, std::vector<int32_t>> run_all(Engine& e, const std::vector<Submission>& subs) {
  std::map<uint64_t, std::vector<int32_t>> outs;
  for (int guard = 0; e.has_work() && guard < 10000; ++guard) {
    auto r = e.step();
    EXPECT_TRUE(r.ok()) << r.status().to_string();
    for (const auto& s : subs)
      while (auto ev = s.channel->try_pop())
        if (ev->token >= 0) outs[s.id].push_back(ev->token);
  }
  return outs;
}

EngineConfig config(AdapterRegistry* registry) {
  EngineConfig c;
  c.scheduler.max_batch_tokens = 512;
  c.scheduler.max_running = 16;
  c.kv_blocks = 96;
  c.snapshot_slots = 8;
  c.model_identity = "gqa_untied";
  c.adapters = registry;
  return c;
}

struct Fixture {
  testing::TinyModel m;
  AdapterRegistry registry{m.model->config(), m.backend->storage()};
  fs::path tmp = fs::temp_directory_path() / ("kiln-adapter-test-" + std::to_string(::getpid()));
  Fixture() { fs::create_directories(tmp); }
  ~Fixture() { fs::remove_all(tmp); }

  // A fresh adapter with B drawn large enough to change greedy output, saved under tmp/<name>.
  std::string write_random(const std::string& name, uint64_t seed) {
    LoraConfig cfg;
    cfg.rank = 4;
    cfg.alpha = 8;
    for (int t = 0; t < kLoraTargetCount; ++t) cfg.targets.push_back(static_cast<LoraTarget>(t));
    LoraAdapter a = LoraAdapter::init(cfg, m.model->config(), seed, m.backend->storage()).value();
    for (int64_t l = 0; l < a.num_layers(); ++l)
      for (int t = 0; t < kLoraTargetCount; ++t) {
        LoraFactors& f = a.factors(l, static_cast<LoraTarget>(t));
        if (!f.defined()) continue;
        Tensor b = testing::random_tensor(f.b.shape(), static_cast<uint32_t>(seed * 100 + l * 10 + t), 0.5f);
        EXPECT_TRUE(m.backend->storage().copy_from_host(b, f.b).ok());
      }
    const std::string dir = (tmp / name).string();
    EXPECT_TRUE(a.save(dir, m.backend->storage()).ok());
    return dir;
  }
};

TEST(AdapterRegistry, NamesRevisionsAndReplacement) {
  Fixture f;
  // A leading '.' is reserved for staging folders, so ".staging-x-0123456789abcdef" is no name.
  for (const char* bad : {"", ".", "..", ".hidden", ".staging-x-0123456789abcdef", "a/b", "a b", "x\\y", "é"}) {
    Status st = AdapterRegistry::check_name(bad);
    EXPECT_EQ(st.code(), ErrorCode::kInvalidArgument) << bad;
  }
  EXPECT_EQ(AdapterRegistry::check_name(std::string(65, 'a')).code(), ErrorCode::kInvalidArgument);
  EXPECT_TRUE(AdapterRegistry::check_name(std::string(64, 'a')).ok());
  EXPECT_TRUE(AdapterRegistry::check_name("my-adapter_v1.2").ok());
  EXPECT_EQ(f.registry.load("a/b", peft_dir()).status().code(), ErrorCode::kInvalidArgument);

  auto missing = f.registry.resolve("peft");
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().code(), ErrorCode::kNotFound);
  EXPECT_NE(missing.status().message().find("'peft'"), std::string::npos) << missing.status().to_string();

  auto first = f.registry.load("peft", peft_dir());
  ASSERT_TRUE(first.ok()) << first.status().to_string();
  EXPECT_EQ(first->revision, 1u);
  EXPECT_EQ(first->path, peft_dir());
  EXPECT_EQ(first->adapter->config().rank, 4);

  // A failed load keeps what was loaded; a good one replaces it with the next revision.
  auto broken = f.registry.load("peft", (f.tmp / "does-not-exist").string());
  EXPECT_FALSE(broken.ok());
  EXPECT_EQ(f.registry.resolve("peft")->adapter, first->adapter);
  const std::string other = f.write_random("other", 3);
  auto second = f.registry.load("peft", other);
  ASSERT_TRUE(second.ok()) << second.status().to_string();
  EXPECT_EQ(second->revision, 2u);
  EXPECT_EQ(f.registry.resolve("peft")->adapter, second->adapter);
  EXPECT_NE(second->adapter, first->adapter);

  ASSERT_TRUE(f.registry.load("b", other).ok());
  auto listed = f.registry.list();
  ASSERT_EQ(listed.size(), 2u);
  EXPECT_EQ(listed[0].name, "b");
  EXPECT_EQ(listed[1].name, "peft");

  EXPECT_TRUE(f.registry.unload("peft").ok());
  Status again = f.registry.unload("peft");
  EXPECT_EQ(again.code(), ErrorCode::kNotFound);
  EXPECT_NE(again.message().find("'peft'"), std::string::npos);
  // Revisions keep counting after an unload: a reload never reuses a cached prefix's key.
  EXPECT_EQ(f.registry.load("peft", peft_dir())->revision, 3u);
}

TEST(AdapterRegistry, ReservedNamesAreRefusedToClientsButLoadForKilnItself) {
  Fixture f;
  for (const char* reserved : {"job.checkpoints", "post-eval.job"})
    EXPECT_EQ(AdapterRegistry::check_name(reserved).code(), ErrorCode::kInvalidArgument) << reserved;
  EXPECT_TRUE(f.registry.load("post-eval.job", peft_dir()).ok());  // the post-training eval's own name
}

// With a count or byte limit, a load unloads the least recently resolved adapters other than the
// default until the new one fits, and fails (kResourceExhausted) when only the default is left.
TEST(AdapterRegistry, LimitsUnloadTheLeastRecentlyUsedNonDefaultAdapter) {
  Fixture f;
  const std::string dir = f.write_random("r3", 3);
  const int64_t one = LoraAdapter::load(dir, f.m.model->config(), f.m.backend->storage())->bytes();
  ASSERT_GT(one, 0);
  f.registry.set_limits(3, 0);
  for (const char* n : {"a", "b", "c"}) ASSERT_TRUE(f.registry.load(n, dir).ok()) << n;
  ASSERT_TRUE(f.registry.set_default("a").ok());
  ASSERT_TRUE(f.registry.resolve("b").ok());  // b is used after c: c is now the least recently used
  std::vector<std::string> evicted;
  ASSERT_TRUE(f.registry.load("d", dir, &evicted).ok());
  EXPECT_EQ(evicted, std::vector<std::string>{"c"});
  EXPECT_FALSE(f.registry.resolve("c").ok());
  // Reloading a loaded name replaces it in place: nothing else goes.
  ASSERT_TRUE(f.registry.load("d", dir, &evicted).ok());
  EXPECT_TRUE(evicted.empty());
  EXPECT_EQ(f.registry.list().size(), 3u);

  // Bytes: room for two; the default stays, so "b" and "d" make way for one more, then nothing can.
  f.registry.set_limits(0, 2 * one);
  ASSERT_TRUE(f.registry.load("e", dir, &evicted).ok());
  EXPECT_EQ(evicted.size(), 2u);
  EXPECT_EQ(f.registry.list().size(), 2u);
  EXPECT_TRUE(f.registry.resolve("a").ok());
  f.registry.set_limits(0, one);
  auto full = f.registry.load("g", dir);
  ASSERT_FALSE(full.ok());
  EXPECT_EQ(full.status().code(), ErrorCode::kResourceExhausted);
  EXPECT_NE(full.status().message().find("only the default adapter is left"), std::string::npos) << full.status().message();
  EXPECT_TRUE(f.registry.resolve("a").ok());
}

// A load reads and checks the files on the caller's thread and only the upload goes through the
// registry's DeviceRunner (a server's runs it on the engine's thread): a bad directory never
// reaches the runner, a good one reaches it once, and a runner that refuses (the engine
// stopping) fails the load and leaves the loaded revision in place.
TEST(AdapterRegistry, OnlyTheUploadGoesThroughTheDeviceRunner) {
  testing::TinyModel m;
  int runs = 0;
  bool refuse = false;
  AdapterRegistry registry(m.model->config(), m.backend->storage(), [&](const std::function<Status()>& work) {
    ++runs;
    return refuse ? failed_precondition("the engine is stopping") : work();
  });
  EXPECT_EQ(registry.load("peft", "/nonexistent/adapter").status().code(), ErrorCode::kNotFound);
  EXPECT_EQ(runs, 0) << "a load that fails its reading asked for the device";
  auto first = registry.load("peft", peft_dir());
  ASSERT_TRUE(first.ok()) << first.status().to_string();
  EXPECT_EQ(runs, 1);
  refuse = true;
  auto refused = registry.load("peft", peft_dir());
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), ErrorCode::kFailedPrecondition);
  EXPECT_NE(refused.status().message().find("upload"), std::string::npos) << refused.status().to_string();
  EXPECT_EQ(runs, 2);
  EXPECT_EQ(registry.resolve("peft")->revision, 1u);
  EXPECT_EQ(registry.resolve("peft")->adapter, first->adapter);
}

TEST(EngineAdapters, RequestEqualsDirectForwardWithItsTerm) {
  Fixture f;
  auto peft = f.registry.load("peft", peft_dir()).value();
  auto big = f.registry.load("big", f.write_random("big", 5)).value();
  auto e = Engine::create(*f.m.model, config(&f.registry)).value();
  const auto prompt = prompt_of(20, 1);
  auto a = e->submit(greedy(prompt, 8, "peft")).value();
  auto b = e->submit(greedy(prompt, 8, "big")).value();
  auto outs = run_all(*e, {a, b});
  EXPECT_EQ(outs[a.id], alone(*f.m.model, prompt, 8, {{peft.adapter.get(), 1.f}}));
  EXPECT_EQ(outs[b.id], alone(*f.m.model, prompt, 8, {{big.adapter.get(), 1.f}}));
  EXPECT_NE(outs[b.id], alone(*f.m.model, prompt, 8));  // the adapter really changes the answer
}

TEST(EngineAdapters, MixedBatchEqualsEachAlone) {
  Fixture f;
  auto peft = f.registry.load("peft", peft_dir()).value();
  auto big = f.registry.load("big", f.write_random("big", 5)).value();
  auto e = Engine::create(*f.m.model, config(&f.registry)).value();
  struct Case {
    RequestSpec spec;
    std::vector<LoraTerm> terms;
  };
  std::vector<Case> cases = {
      {greedy(prompt_of(30, 1), 6), {}},
      {greedy(prompt_of(70, 2), 6, "big"), {{big.adapter.get(), 1.f}}},
      {greedy(prompt_of(12, 3), 6, "", {{"big", 0.5f}, {"peft", 1.5f}}),
       {{big.adapter.get(), 0.5f}, {peft.adapter.get(), 1.5f}}},
      {greedy(prompt_of(25, 4), 6, "peft", {{"big", -0.75f}}), {{peft.adapter.get(), 1.f}, {big.adapter.get(), -0.75f}}},
      {greedy(prompt_of(30, 1), 6, "", {{"big", 2.f}}), {{big.adapter.get(), 2.f}}},
  };
  std::vector<Submission> subs;
  for (const auto& c : cases) subs.push_back(e->submit(c.spec).value());
  auto outs = run_all(*e, subs);
  for (size_t i = 0; i < cases.size(); ++i)
    EXPECT_EQ(outs[subs[i].id], alone(*f.m.model, cases[i].spec.prompt, 6, cases[i].terms)) << "request " << i;
  // The weighted stack is not the unweighted one.
  EXPECT_NE(outs[subs[4].id], alone(*f.m.model, cases[4].spec.prompt, 6, {{big.adapter.get(), 1.f}}));
}

// A constrained row with an adapter batches with free adapter and base rows: its mask allows, at
// step k, the adapter's own greedy token and the base model's, so it writes the adapter's tokens
// only if its adapter applies to its row; the free rows still equal each alone.
TEST(EngineAdapters, ConstrainedAdapterRowsBatchWithFreeOnes) {
  Fixture f;
  auto peft = f.registry.load("peft", peft_dir()).value();
  auto big = f.registry.load("big", f.write_random("big", 5)).value();
  auto e = Engine::create(*f.m.model, config(&f.registry)).value();
  const auto prompt = prompt_of(20, 1);
  const auto with_big = alone(*f.m.model, prompt, 8, {{big.adapter.get(), 1.f}});
  const auto base = alone(*f.m.model, prompt, 8);
  ASSERT_NE(with_big, base);
  std::vector<std::set<int32_t>> allowed;
  for (size_t k = 0; k < with_big.size(); ++k) allowed.push_back({with_big[k], base[k]});
  RequestSpec constrained = greedy(prompt, 8, "big");
  auto script = std::make_shared<testing::ScriptedConstraint>(allowed);
  constrained.constraint = script;
  const RequestSpec free_peft = greedy(prompt_of(33, 2), 8, "peft"), free_base = greedy(prompt_of(15, 3), 8);
  std::vector<Submission> subs = {e->submit(constrained).value(), e->submit(free_peft).value(),
                                  e->submit(free_base).value()};
  auto outs = run_all(*e, subs);
  EXPECT_EQ(outs[subs[0].id], with_big);
  EXPECT_EQ(script->accepted, with_big);
  EXPECT_EQ(outs[subs[1].id], alone(*f.m.model, free_peft.prompt, 8, {{peft.adapter.get(), 1.f}}));
  EXPECT_EQ(outs[subs[2].id], alone(*f.m.model, free_base.prompt, 8));
}

TEST(EngineAdapters, PrefixCacheIsNotSharedAcrossStacksOrRevisions) {
  Fixture f;
  const std::string big_dir = f.write_random("big", 5);
  ASSERT_TRUE(f.registry.load("big", big_dir).ok());
  auto e = Engine::create(*f.m.model, config(&f.registry)).value();
  const auto p = prompt_of(150, 5);  // two full blocks get cached
  auto run_one = [&](RequestSpec spec) {
    auto s = e->submit(std::move(spec)).value();
    return run_all(*e, {s})[s.id];
  };
  const auto base = run_one(greedy(p, 4));
  EXPECT_EQ(e->stats().prefix_hits, 0);
  const auto adapted = run_one(greedy(p, 4, "big"));
  EXPECT_EQ(e->stats().prefix_hits, 0);  // the base model's prefix is not the adapter's
  EXPECT_NE(adapted, base);
  EXPECT_EQ(run_one(greedy(p, 4, "", {{"big", 1.f}})), adapted);  // the same stack, spelled as a list
  EXPECT_EQ(e->stats().prefix_hits, 1);
  run_one(greedy(p, 4, "", {{"big", 0.5f}}));  // another weight
  EXPECT_EQ(e->stats().prefix_hits, 1);
  ASSERT_EQ(f.registry.load("big", big_dir)->revision, 2u);  // same files, new revision
  EXPECT_EQ(run_one(greedy(p, 4, "big")), adapted);
  EXPECT_EQ(e->stats().prefix_hits, 1);
  EXPECT_EQ(run_one(greedy(p, 4)), base);
  EXPECT_EQ(e->stats().prefix_hits, 2);
}

TEST(EngineAdapters, APrivateAdapterIsAppliedAloneAndKeyedByItsOwnKey) {
  Fixture f;
  auto big = f.registry.load("big", f.write_random("big", 5)).value();
  ASSERT_TRUE(f.registry.set_default("big").ok());
  // An adapter outside the registry: the default adapter is not applied with it.
  auto mine = std::make_shared<const LoraAdapter>(
      LoraAdapter::load(f.write_random("mine", 9), f.m.model->config(), f.m.backend->storage()).value());
  auto e = Engine::create(*f.m.model, config(&f.registry)).value();
  const auto p = prompt_of(150, 5);  // two full blocks get cached
  auto run_one = [&](RequestSpec spec) {
    auto s = e->submit(std::move(spec)).value();
    return run_all(*e, {s})[s.id];
  };
  auto private_spec = [&](const std::string& key) {
    RequestSpec r = greedy(p, 4);
    r.private_adapter = mine;
    r.private_key = key;
    return r;
  };
  const auto out = run_one(private_spec("job@1"));
  EXPECT_EQ(out, alone(*f.m.model, p, 4, {{mine.get(), 1.f}}));
  EXPECT_NE(out, alone(*f.m.model, p, 4, {{big.adapter.get(), 1.f}}));
  EXPECT_EQ(e->stats().prefix_hits, 0);
  EXPECT_EQ(run_one(private_spec("job@1")), out);
  EXPECT_EQ(e->stats().prefix_hits, 1);  // the same key: the same weights
  EXPECT_EQ(run_one(private_spec("job@2")), out);
  EXPECT_EQ(e->stats().prefix_hits, 1);  // a new key shares nothing
  // Not with named adapters, and not without a key.
  RequestSpec both = private_spec("job@3");
  both.adapter = "big";
  EXPECT_EQ(e->submit(both).status().code(), ErrorCode::kInvalidArgument);
  EXPECT_EQ(e->submit(private_spec("")).status().code(), ErrorCode::kInvalidArgument);
}

TEST(EngineAdapters, UnloadWhileRunningLetsTheRequestFinish) {
  Fixture f;
  auto big = f.registry.load("big", f.write_random("big", 5)).value();
  auto e = Engine::create(*f.m.model, config(&f.registry)).value();
  const auto prompt = prompt_of(20, 2);
  const auto want = alone(*f.m.model, prompt, 10, {{big.adapter.get(), 1.f}});
  auto s = e->submit(greedy(prompt, 10, "big")).value();
  ASSERT_TRUE(e->step().ok());  // prefill and the first token
  ASSERT_TRUE(f.registry.unload("big").ok());
  std::weak_ptr<const LoraAdapter> weak = big.adapter;
  big.adapter.reset();
  EXPECT_FALSE(weak.expired());  // the running request holds it
  auto refused = e->submit(greedy(prompt, 10, "big"));
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), ErrorCode::kNotFound);
  EXPECT_NE(refused.status().message().find("'big'"), std::string::npos);
  std::vector<int32_t> got;
  for (int guard = 0; e->has_work() && guard < 100; ++guard) {
    ASSERT_TRUE(e->step().ok());
    while (auto ev = s.channel->try_pop())
      if (ev->token >= 0) got.push_back(ev->token);
  }
  while (auto ev = s.channel->try_pop())
    if (ev->token >= 0) got.push_back(ev->token);
  EXPECT_EQ(got, want);
  EXPECT_TRUE(weak.expired());  // released with the finished request
}

TEST(EngineAdapters, BadAdapterUsesAreRefusedNamingThem) {
  Fixture f;
  ASSERT_TRUE(f.registry.load("peft", peft_dir()).ok());
  auto e = Engine::create(*f.m.model, config(&f.registry)).value();
  auto unknown = e->submit(greedy({1, 2}, 2, "", {{"peft", 1.f}, {"nope", 1.f}}));
  ASSERT_FALSE(unknown.ok());
  EXPECT_EQ(unknown.status().code(), ErrorCode::kNotFound);
  EXPECT_NE(unknown.status().message().find("'nope'"), std::string::npos);
  auto inf = e->submit(greedy({1, 2}, 2, "", {{"peft", std::nanf("")}}));
  ASSERT_FALSE(inf.ok());
  EXPECT_EQ(inf.status().code(), ErrorCode::kInvalidArgument);
  EXPECT_NE(inf.status().message().find("'peft'"), std::string::npos);
  RequestSpec pinned = greedy({1, 2}, 2, "peft");
  pinned.adapter_revision = 7;
  auto stale = e->submit(pinned);
  ASSERT_FALSE(stale.ok());
  EXPECT_EQ(stale.status().code(), ErrorCode::kNotFound);
  EXPECT_NE(stale.status().message().find("revision 7"), std::string::npos);
  pinned.adapter_revision = 1;
  EXPECT_TRUE(e->submit(pinned).ok());
  // Without a registry every adapter is unknown.
  auto plain = Engine::create(*f.m.model, config(nullptr)).value();
  EXPECT_EQ(plain->submit(greedy({1, 2}, 2, "peft")).status().code(), ErrorCode::kNotFound);
  EXPECT_EQ(e->stats().running + e->stats().waiting, 1);
}

}  // namespace
}  // namespace kiln
