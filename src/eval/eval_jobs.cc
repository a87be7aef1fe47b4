#include "eval/eval_jobs.h"

#include "eval/wilson.h"

namespace kiln {

namespace {

using json = nlohmann::json;

json stats_json(const std::vector<EvalOutcome>& outs) {
  int64_t passed = 0;
  for (const auto& o : outs) passed += o.passed ? 1 : 0;
  const int64_t n = static_cast<int64_t>(outs.size());
  json j = {{"passed", passed}, {"total", n}, {"accuracy", nullptr}, {"wilson", nullptr}};
  if (n > 0) {
    Interval w = wilson_interval(passed, n);
    j["accuracy"] = static_cast<double>(passed) / static_cast<double>(n);
    j["wilson"] = {{"low", w.low}, {"high", w.high}};
  }
  return j;
}

json target_json(const std::string& name, uint64_t revision) {
  if (name.empty()) return nullptr;
  return {{"name", name}, {"revision", revision}};
}

}  // namespace

struct EvalJobs::Record {
  EvalRunSpec spec;
  EvalSuite suite;
  int64_t max_tokens = 0;
  std::string suite_sha256;
  // Written by the job's thread, read by status calls: under EvalJobs::mu_.
  std::vector<EvalOutcome> a, b;
  uint64_t revision_a = 0, revision_b = 0;
};

Result<std::vector<EvalOutcome>> run_suite(const EvalSuite& suite, const GenerateFn& gen, const std::string& adapter,
                                           uint64_t seed, double temperature, int64_t max_tokens,
                                           const std::atomic<bool>& cancel,
                                           const std::function<void(const EvalOutcome&, uint64_t revision)>& on_outcome) {
  std::vector<EvalOutcome> outs;
  std::optional<uint64_t> revision;
  for (size_t i = 0; i < suite.examples.size(); ++i) {
    if (cancel.load()) return failed_precondition("cancelled");
    const EvalExample& ex = suite.examples[i];
    GenerateRequest r;
    r.messages = &ex.messages;
    r.chat_template_kwargs = suite.chat_template_kwargs;
    r.adapter = adapter;
    r.seed = seed + i;  // only drawn from when temperature > 0
    r.temperature = temperature;
    r.max_tokens = max_tokens;
    auto g = gen(r);
    if (!g.ok()) return Status(g.status().code(), "examples[" + std::to_string(i) + "]: " + g.status().message());
    // Every example must see the same weights, or the outcomes describe no one adapter.
    if (revision && *revision != g->adapter_revision)
      return failed_precondition("adapter '" + adapter + "' changed revision during the eval (" +
                                 std::to_string(*revision) + " -> " + std::to_string(g->adapter_revision) + ")");
    revision = g->adapter_revision;
    ScoreResult s = score(ex.resolved, ex.expected, g->text);
    outs.push_back({g->text, g->finish_reason, scorer_type_name(ex.resolved.type), s.detail, s.passed});
    if (on_outcome) on_outcome(outs.back(), *revision);
  }
  return outs;
}

EvalJobs::EvalJobs(SuiteStore& store, GenerateFn gen, int64_t max_queued)
    : store_(store), gen_(std::move(gen)), queue_(std::make_unique<JobQueue>(max_queued)) {}

EvalJobs::~EvalJobs() { queue_.reset(); }

Result<std::string> EvalJobs::submit(const EvalRunSpec& spec) {
  KILN_ASSIGN_OR_RETURN(EvalSuite suite, store_.load(spec.suite));
  auto rec = std::make_shared<Record>();
  rec->spec = spec;
  rec->max_tokens = spec.max_tokens.value_or(suite.max_tokens);
  rec->suite_sha256 = suite.sha256();
  rec->suite = std::move(suite);
  GenerateFn gen = gen_;
  std::mutex* mu = &mu_;
  JobWork work = [rec, gen, mu](const std::atomic<bool>& cancel,
                                const std::function<void(const TrainProgress&)>& progress) -> Result<JobOutcome> {
    const int64_t n = static_cast<int64_t>(rec->suite.examples.size());
    const bool compare = rec->spec.kind == "compare";
    const int64_t total = compare ? 2 * n : n;
    int64_t done = 0;
    TrainProgress start;
    start.total_steps = total;
    progress(start);
    auto run_one = [&](const std::string& adapter, std::vector<EvalOutcome>& into, uint64_t& rev) -> Status {
      auto r = run_suite(rec->suite, gen, adapter, rec->spec.seed, rec->spec.temperature, rec->max_tokens, cancel,
                         [&](const EvalOutcome& o, uint64_t revision) {
                           {
                             std::lock_guard<std::mutex> lock(*mu);
                             into.push_back(o);
                             rev = revision;
                           }
                           TrainProgress p;
                           p.step = ++done;
                           p.total_steps = total;
                           progress(p);
                         });
      return r.status();
    };
    KILN_RETURN_IF_ERROR(run_one(rec->spec.adapter_a, rec->a, rec->revision_a));
    if (compare) KILN_RETURN_IF_ERROR(run_one(rec->spec.adapter_b, rec->b, rec->revision_b));
    return JobOutcome{};
  };
  KILN_ASSIGN_OR_RETURN(JobInfo info, queue_->submit(spec.kind, std::move(work)));
  std::lock_guard<std::mutex> lock(mu_);
  // The queue forgets the oldest finished jobs (JobQueue::kFinishedKept); so do the records.
  for (auto it = records_.begin(); it != records_.end();)
    it = queue_->status(it->first).ok() ? std::next(it) : records_.erase(it);
  records_[info.id] = rec;
  return info.id;
}

json EvalJobs::to_json(const Record& r, const JobInfo& info, bool full) const {
  json j = {{"job_id", info.id},
            {"kind", r.spec.kind},
            {"state", job_state_name(info.state)},
            {"suite", r.spec.suite},
            {"suite_sha256", r.suite_sha256},
            {"seed", r.spec.seed},
            {"temperature", r.spec.temperature},
            {"max_tokens", r.max_tokens},
            {"progress", {{"done", info.step}, {"total", info.total_steps}}},
            {"created_at", info.created_at},
            {"started_at", info.started_at},
            {"finished_at", info.finished_at},
            {"error", info.error}};
  if (info.total_steps == 0)
    j["progress"]["total"] = static_cast<int64_t>(r.suite.examples.size()) * (r.spec.kind == "compare" ? 2 : 1);
  auto example_base = [&r](size_t i) {
    const EvalExample& ex = r.suite.examples[i];
    return json{{"index", i}, {"prompt", ex.messages}, {"expected", ex.expected}};
  };
  if (r.spec.kind != "compare") {
    j["adapter"] = target_json(r.spec.adapter_a, r.revision_a);
    j.update(stats_json(r.a));
    if (full) {
      json outs = json::array();
      for (size_t i = 0; i < r.a.size(); ++i) {
        json o = example_base(i);
        o["output"] = r.a[i].output;
        o["passed"] = r.a[i].passed;
        o["scorer"] = r.a[i].scorer;
        o["detail"] = r.a[i].detail;
        o["finish_reason"] = r.a[i].finish_reason;
        outs.push_back(o);
      }
      j["outcomes"] = outs;
    }
    return j;
  }
  j["adapter_a"] = target_json(r.spec.adapter_a, r.revision_a);
  j["adapter_b"] = target_json(r.spec.adapter_b, r.revision_b);
  j["a"] = stats_json(r.a);
  j["b"] = stats_json(r.b);
  json flips = {{"a_only", 0}, {"b_only", 0}, {"both_pass", 0}, {"both_fail", 0}};
  json pairs = json::array();
  const size_t n = std::min(r.a.size(), r.b.size());
  for (size_t i = 0; i < n; ++i) {
    const bool pa = r.a[i].passed, pb = r.b[i].passed;
    const char* key = pa && pb ? "both_pass" : pa ? "a_only" : pb ? "b_only" : "both_fail";
    flips[key] = flips[key].get<int64_t>() + 1;
    if (!full) continue;
    json p = example_base(i);
    p["a"] = {{"output", r.a[i].output}, {"passed", pa}, {"detail", r.a[i].detail}};
    p["b"] = {{"output", r.b[i].output}, {"passed", pb}, {"detail", r.b[i].detail}};
    p["flip"] = pa == pb ? json(nullptr) : json(pa ? "a_only" : "b_only");
    pairs.push_back(p);
  }
  j["flips"] = flips;
  if (full) j["pairs"] = pairs;
  return j;
}

Result<json> EvalJobs::get(const std::string& id, bool full) const {
  KILN_ASSIGN_OR_RETURN(JobInfo info, queue_->status(id));
  std::lock_guard<std::mutex> lock(mu_);
  auto it = records_.find(id);
  if (it == records_.end()) return not_found("no eval job '" + id + "'");
  return to_json(*it->second, info, full);
}

std::vector<json> EvalJobs::list() const {
  std::vector<json> out;
  for (const JobInfo& info : queue_->list()) {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = records_.find(info.id);
    if (it != records_.end()) out.push_back(to_json(*it->second, info, false));
  }
  return out;
}

Result<JobInfo> EvalJobs::cancel(const std::string& id) { return queue_->cancel(id); }

}  // namespace kiln
