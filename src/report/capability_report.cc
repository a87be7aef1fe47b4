#include "report/capability_report.h"

#include <sstream>

#include "backend/fallback.h"
#include "backend/native_switches.h"
#include "backend/registry.h"
#include "report/backend_record.h"
#include "report/gates.h"
#include "report/support_audit.h"

namespace kiln {

using nlohmann::json;

namespace {

std::string dts(const std::vector<DType>& v) {
  std::string s;
  for (DType d : v) s += (s.empty() ? "" : ", ") + std::string(dtype_name(d));
  return s.empty() ? "none" : s;
}

json support_json(const std::string& facet, const std::string& label, const std::string& request, const Support& s) {
  return {{"facet", facet}, {"case", label}, {"request", request},
          {"support", std::string(support_state_name(s.state))}, {"constraint", s.constraint}};
}

// Each facet's answer for representative requests of the model's shapes: prefill and decode,
// batch 1 and 64, f32 and bf16.
json facet_support(Backend& be, const ModelConfig& c) {
  json rows = json::array();
  const int64_t H = c.hidden_size;
  struct Shape3 { const char* label; int64_t rows, tokens; Phase phase; };
  const Shape3 shapes[] = {{"prefill, 1 sequence of 256", 1, 256, Phase::kPrefill},
                           {"decode, batch 1", 1, 1, Phase::kDecode},
                           {"decode, batch 64", 64, 64, Phase::kDecode}};
  for (const auto& sh : shapes) {
    for (DType w : {DType::kBF16, DType::kF32}) {
      MatmulRequest m{sh.tokens, c.q_proj_rows(), H, DType::kF32, w, DType::kF32, false};
      rows.push_back(support_json("linear", std::string(sh.label) + ", q_proj", m.describe(), be.linear().supports(m)));
    }
    MatmulRequest head{sh.rows, c.vocab_size, H, DType::kF32, DType::kBF16, DType::kF32, false};
    rows.push_back(support_json("linear", std::string(sh.label) + ", lm_head", head.describe(), be.linear().supports(head)));
    NormRequest n{NormKind::kOnePlus, sh.tokens, H, DType::kF32, false};
    rows.push_back(support_json("norm", sh.label, n.describe(), be.norm().supports(n)));
    NormRequest g{NormKind::kGated, sh.tokens * c.linear_num_value_heads, c.linear_value_head_dim, DType::kF32, false};
    rows.push_back(support_json("norm", std::string(sh.label) + ", gdn output", g.describe(), be.norm().supports(g)));
    RopeRequest rope{sh.tokens, c.num_heads + c.num_kv_heads, c.head_dim, c.rotary_dim()};
    rows.push_back(support_json("attention", sh.label, rope.describe(), be.attention().supports(rope)));
    for (DType kv : {DType::kF32, DType::kBF16, DType::kF8E4M3}) {
      AttentionRequest a;
      a.phase = sh.phase;
      a.rows = sh.rows;
      a.tokens = sh.tokens;
      a.q_heads = c.num_heads;
      a.kv_heads = c.num_kv_heads;
      a.head_dim = c.head_dim;
      a.max_kv_len = sh.phase == Phase::kPrefill ? 256 : 4096;
      a.block_size = 64;
      a.output_gate = c.attn_output_gate;
      a.kv_dtype = kv;
      rows.push_back(support_json("attention", sh.label, a.describe(), be.attention().supports(a)));
    }
    ConvRequest cv{sh.phase, sh.rows, sh.tokens, c.gdn_conv_dim(), c.linear_conv_kernel_dim};
    rows.push_back(support_json("conv", sh.label, cv.describe(), be.conv().supports(cv)));
    for (DType state : {DType::kF32, DType::kBF16}) {
      GdnRequest gd;
      gd.phase = sh.phase;
      gd.form = sh.phase == Phase::kPrefill ? GdnForm::kChunked : GdnForm::kRecurrent;
      gd.rows = sh.rows;
      gd.tokens = sh.tokens;
      gd.k_heads = c.linear_num_key_heads;
      gd.v_heads = c.linear_num_value_heads;
      gd.dk = c.linear_key_head_dim;
      gd.dv = c.linear_value_head_dim;
      gd.state_dtype = state;
      rows.push_back(support_json("gdn", sh.label, gd.describe(), be.gdn().supports(gd)));
    }
    ElementwiseRequest e{ElementwiseOp::kEmbed, sh.tokens, H, DType::kBF16};
    rows.push_back(support_json("elementwise", sh.label, e.describe(), be.elementwise().supports(e)));
    for (bool greedy : {true, false}) {
      SampleRequest s{sh.rows, c.vocab_size, greedy};
      rows.push_back(support_json("sampling", sh.label, s.describe(), be.sampling().supports(s)));
    }
  }
  return rows;
}

json kernels_json(const std::vector<std::pair<std::string, std::string>>& kernels) {
  json j = json::object();
  for (const auto& [op, family] : kernels) j[op] = family;
  return j;
}

json capabilities_json(const BackendCapabilities& c) {
  return {
      {"storage", {{"weight_dtypes", dts(c.storage.weight_dtypes)},
                   {"activation_dtype", std::string(dtype_name(c.storage.activation_dtype))},
                   {"zero_copy_host_weights", c.storage.zero_copy_host_weights}}},
      {"compute", {{"capability", c.compute.capability}, {"multiprocessors", c.compute.multiprocessors},
                   {"target", c.compute.target}, {"shared_memory_per_block", c.compute.shared_memory_per_block}}},
      {"kernels", kernels_json(c.kernels)},
      {"matmul", {{"engine", c.matmul.engine}, {"weight_dtypes", dts(c.matmul.weight_dtypes)},
                  {"algorithm_cache", c.matmul.algorithm_cache}}},
      {"attention", {{"prefill", c.attention.prefill}, {"paged_decode", c.attention.paged_decode},
                     {"block_size", c.attention.block_size}, {"kv_dtypes", dts(c.attention.kv_dtypes)}}},
      {"gdn", {{"chunked_prefill", c.gdn.chunked_prefill}, {"recurrent_decode", c.gdn.recurrent_decode},
               {"fused_decode", c.gdn.fused_decode}, {"state_dtype", std::string(dtype_name(c.gdn.state_dtype))}}},
      {"decode", {{"batched", c.decode.batched}, {"execution", c.decode_execution.mode}}},
      {"streaming_prefill", {{"tiled", c.streaming_prefill.tiled},
                             {"auto_threshold_tokens", c.streaming_prefill.auto_threshold_tokens},
                             {"tile_tokens", c.streaming_prefill.tile_tokens}}},
      {"training", {{"supported", c.training.supported}, {"lora_dtypes", dts(c.training.lora_dtypes)},
                    {"optimizers", c.training.optimizers}, {"muon_rank_min", c.training.muon_rank_min},
                    {"muon_rank_max", c.training.muon_rank_max}}},
      {"replay", {{"graphs", c.replay.graphs}, {"captured", c.replay.captured}}},
      {"fallback", {{"generic_op", std::string(fallback_mode_name(c.fallback.generic_op))},
                    {"decode_hot_path", std::string(fallback_mode_name(c.fallback.decode_hot_path))},
                    {"training_optimizer", std::string(fallback_mode_name(c.fallback.training_optimizer))}}},
  };
}

// A live backend's entry: capabilities, facet support and the support audit's counts.
json live_section(Backend& be, const ModelConfig& model, const std::vector<AuditRow>& audit) {
  return {{"capabilities", capabilities_json(be.capabilities())},
          {"facet_support", facet_support(be, model)},
          {"support_audit", {{"cases", audit.size()}, {"mismatches", count_mismatches(audit)}}}};
}

json policy_row(const std::string& backend, const FallbackPolicy& f) {
  return {{"backend", backend},
          {"generic_op", std::string(fallback_mode_name(f.generic_op))},
          {"decode_hot_path", std::string(fallback_mode_name(f.decode_hot_path))},
          {"training_optimizer", std::string(fallback_mode_name(f.training_optimizer))}};
}

// The newest record of `backend` made for the same model shapes (ties: the first by path).
const BackendRecord* latest_record(const std::vector<BackendRecord>& records, const std::string& backend,
                                   const std::string& model_shapes) {
  const BackendRecord* best = nullptr;
  for (const BackendRecord& r : records)
    if (r.backend == backend && r.model_shapes == model_shapes && (!best || r.run.timestamp > best->run.timestamp))
      best = &r;
  return best;
}

}  // namespace

Result<BackendRecord> record_backend(const std::string& name, const ReportOptions& opts) {
  KILN_ASSIGN_OR_RETURN(std::unique_ptr<Backend> be, create_backend(name));
  BackendRecord r;
  r.run = this_run("kiln");
  r.backend = name;
  r.model_shapes = opts.model_label;
  r.section = live_section(*be, opts.model, audit_support(*be));
  r.fallback_policy = policy_row(name, be->capabilities().fallback);
  return r;
}

Result<json> build_capability_report(const ReportOptions& opts) {
  KILN_ASSIGN_OR_RETURN(std::vector<EvidenceFile> evidence, load_evidence(opts.evidence_dir));
  KILN_ASSIGN_OR_RETURN(std::vector<BackendRecord> records, load_backend_records(opts.evidence_dir));
  json report;
  report["schema"] = "kiln.capability-report/1";
  report["generated_by"] = "kiln capabilities" + std::string(opts.canonical ? " --canonical" : "");
  report["model_shapes"] = opts.model_label;
  report["read_this_first"] = json::array({
      json{{"question", "Which backends does this binary have?"},
           {"answer", "'backends': each is built or not_built, with how it was compiled; a built backend whose "
                      "device is absent here shows the section recorded where it was present ('recorded': the "
                      "file, the build that recorded it, the device, and whether it is fresh at 'evidence_as_of')."}},
      json{{"question", "Can this exact operation run natively?"},
           {"answer", "'facet_support' asks each built backend's own predicate on typed requests of the model's "
                      "shapes; the answer can still depend on dtype, shape, layout and batch."}},
      json{{"question", "What happens when a native operation declines?"},
           {"answer", "'fallback_policy': generic ops may round-trip through the host (counted per backend and "
                      "arity); decode and optimizer paths on accelerators require native execution."}},
      json{{"question", "Has the implementation been verified?"},
           {"answer", "'gates': covered only where recorded test results (evidence/) show the named tests "
                      "passed with the backend present, in binaries built from a commit after which nothing changed "
                      "the code the gate covers, up to 'evidence_as_of'; stale or unknown where that does not hold "
                      "or cannot be told; each gate gives the command that re-verifies it."}},
      json{{"question", "Which environment variables change what runs?"},
           {"answer", "'native_switches': every variable that changes a backend's native dispatch or what it reports, "
                      "with the value in effect (null: the default); a switch picks among native paths and never "
                      "turns a native op into a host fallback (the switch audit sets each in turn)."}},
      json{{"question", "Which qualification workloads passed, and is that still true of the code?"},
           {"answer", "'qualification_receipts': the newest receipt of each workload, variant and host recorded at or "
                      "before 'evidence_as_of', its verdict, and whether any input its workload declares changed "
                      "since (stale, naming the inputs); and each variant without a receipt."}},
      json{{"question", "How fast is a backend?"},
           {"answer", "Not here: this report contains no throughput figures. See docs/bench/ (kiln bench JSON) "
                      "and qualification receipts."}},
  });

  json backends = json::array(), open_work = json::array(), policies = json::array();
  for (const auto& entry : backend_registry()) {
    if (!opts.only_backend.empty() && entry.name != opts.only_backend) continue;
    json b = {{"name", entry.name}, {"built", entry.built}, {"build", entry.build_flags}};
    if (!entry.built) {
      b["status"] = "not_built";
      backends.push_back(b);
      continue;
    }
    auto created = create_backend(entry.name);
    if (!created.ok()) {
      const BackendRecord* rec = latest_record(records, entry.name, opts.model_label);
      if (rec == nullptr) {
        // The driver's own words differ between machines without the device; the canonical
        // report keeps only the fact.
        b["status"] = "built, not evaluated";
        if (!opts.canonical) b["reason"] = created.status().message();
        open_work.push_back({{"kind", "backend"}, {"item", entry.name},
                             {"what_remains", "evaluated only where its device is present" +
                                                  (opts.canonical ? std::string() : ": " + created.status().message())}});
        backends.push_back(b);
        continue;
      }
      const EvidenceDevice* d = rec->run.device(entry.name);
      const FreshnessVerdict fresh = evidence_freshness(rec->run, backend_source_paths(entry.name), opts.history);
      const std::string freshness = fresh.state == Freshness::kFresh   ? "fresh"
                                    : fresh.state == Freshness::kStale ? "stale"
                                                                       : "unknown";
      b["status"] = "recorded";
      b["recorded"] = {{"file", rec->path},       {"commit", rec->run.commit},
                       {"dirty", rec->run.dirty}, {"timestamp_utc", rec->run.timestamp},
                       {"device", d ? d->device : ""}, {"driver", d ? d->driver : ""},
                       {"target", d ? d->target : ""}, {"freshness", freshness}, {"why", fresh.why}};
      for (const char* key : {"capabilities", "facet_support", "support_audit"})
        if (rec->section.contains(key)) b[key] = rec->section[key];
      if (fresh.state != Freshness::kFresh)
        open_work.push_back({{"kind", "backend"}, {"item", entry.name},
                             {"what_remains", "recorded in " + rec->path + ", " + freshness + ": " + fresh.why}});
      if (b.value("support_audit", json::object()).value("mismatches", 0) > 0)
        open_work.push_back({{"kind", "support mismatch"}, {"item", entry.name},
                             {"what_remains", "the recorded support audit found mismatches (" + rec->path + ")"}});
      policies.push_back(rec->fallback_policy);
      backends.push_back(b);
      continue;
    }
    Backend& be = *created.value();
    b["status"] = "evaluated";
    if (!opts.canonical) b["device"] = be.identity().device_name;
    auto audit = audit_support(be);
    b.update(live_section(be, opts.model, audit));
    for (const auto& row : audit)
      if (row.mismatch)
        open_work.push_back({{"kind", "support mismatch"}, {"item", entry.name + " " + row.facet}, {"what_remains", row.problem}});
    json p = policy_row(entry.name, be.capabilities().fallback);
    if (!opts.canonical) {
      json counters = json::object();
      for (int a = 1; a <= FallbackCounters::kMaxArity; ++a)
        counters["op" + std::to_string(a)] = FallbackCounters::global().count(entry.name, a);
      p["host_fallback_counters"] = counters;
    }
    policies.push_back(p);
    backends.push_back(b);
  }

  const std::string as_of = opts.history ? opts.history->as_of() : std::string();
  report["evidence_as_of"] = as_of.empty() ? json() : json(as_of);
  json gates = json::array();
  int covered = 0, stale = 0, unknown = 0, total = 0;
  for (const Gate& g : conformance_gates()) {
    json per = json::array();
    for (const auto& gb : g.backends) {
      if (!opts.only_backend.empty() && gb.backend != opts.only_backend) continue;
      GateStatus s = evaluate_gate(g, gb, evidence, opts.history);
      per.push_back({{"backend", gb.backend}, {"status", std::string(gate_state_name(s.state))}, {"reason", s.reason},
                     {"command", s.command}, {"evidence", s.evidence}, {"targets", s.targets}});
      if (s.state != GateState::kNotApplicable) ++total;
      if (s.state == GateState::kCovered) ++covered;
      if (s.state == GateState::kStale) ++stale;
      if (s.state == GateState::kUnknown) ++unknown;
      if (s.state != GateState::kCovered && s.state != GateState::kNotApplicable)
        open_work.push_back({{"kind", "conformance gate"}, {"item", g.name + " (" + gb.backend + ")"},
                             {"what_remains", std::string(gate_state_name(s.state)) + ": " + s.reason}});
    }
    gates.push_back({{"name", g.name}, {"requirement", g.requirement}, {"backends", per}});
  }
  report["summary"] = {{"gates_covered", covered}, {"gates_stale", stale}, {"gates_unknown", unknown},
                       {"gates_applicable", total}, {"open_items", open_work.size()}};
  report["open_coverage_work"] = open_work;
  report["backends"] = backends;
  report["fallback_policy"] = policies;
  json switches = json::array();
  const std::map<std::string, std::string> in_effect = native_switches_in_effect();
  for (const NativeSwitch& sw : native_switches()) {
    if (!opts.only_backend.empty() && sw.backend != opts.only_backend) continue;
    const std::string name(switch_variable(sw));
    switches.push_back({{"backend", std::string(sw.backend)}, {"variable", name}, {"setting", std::string(sw.setting)},
                        {"effect", std::string(sw.effect)},
                        {"in_effect", in_effect.contains(name) ? json(in_effect.at(name)) : json()}});
  }
  report["native_switches"] = switches;
  report["gates"] = gates;
  json files = json::array();
  for (const auto& e : evidence) {
    json devices = json::array();
    for (const EvidenceDevice& d : e.record.devices)
      devices.push_back({{"backend", d.backend}, {"device", d.device}, {"driver", d.driver}, {"target", d.target}});
    files.push_back({{"path", e.path}, {"binary", e.record.binary}, {"commit", e.record.commit},
                     {"dirty", e.record.dirty}, {"stamped", e.record.stamped}, {"timestamp_utc", e.record.timestamp},
                     {"devices", devices}, {"native_switches", e.record.switches}});
  }
  report["evidence_files"] = files;
  if (!opts.receipts.is_null()) report["qualification_receipts"] = opts.receipts;
  return report;
}

std::string render_markdown(const json& r) {
  std::ostringstream o;
  auto cell = [](const json& v) {
    std::string s = v.is_string() ? v.get<std::string>() : v.dump();
    for (auto& ch : s)
      if (ch == '|' || ch == '\n') ch = ch == '|' ? '/' : ' ';
    return s;
  };
  o << "# Backend capability report\n\n"
    << "Generated by `" << cell(r["generated_by"]) << "` from the running code: the registry of compiled backends, "
    << "their own support predicates and capabilities, and recorded test results. Representative requests use the "
    << "shapes of " << cell(r["model_shapes"]) << ". Regenerate with `scripts/capability-report`.\n\n"
    << "## Read this first\n\n| question | where the answer is |\n|---|---|\n";
  for (const auto& q : r["read_this_first"]) o << "| " << cell(q["question"]) << " | " << cell(q["answer"]) << " |\n";
  o << "\n**Summary:** " << r["summary"]["gates_covered"] << " of " << r["summary"]["gates_applicable"]
    << " applicable gate results covered, " << r["summary"]["gates_stale"] << " stale, " << r["summary"]["gates_unknown"]
    << " unknown, as of commit " << (r["evidence_as_of"].is_string() ? cell(r["evidence_as_of"]) : "unknown") << "; "
    << r["summary"]["open_items"]
    << (r["summary"]["open_items"] == 1 ? " open item.\n\n" : " open items.\n\n");
  o << "## Open coverage work\n\n| kind | item | what remains |\n|---|---|---|\n";
  for (const auto& w : r["open_coverage_work"])
    o << "| " << cell(w["kind"]) << " | " << cell(w["item"]) << " | " << cell(w["what_remains"]) << " |\n";
  o << "\n## Compiled backends\n\n| backend | status | build |\n|---|---|---|\n";
  // A recorded backend's status names the device, build and freshness of its record.
  auto status_of = [&](const json& b) {
    if (!b.contains("recorded")) return cell(b["status"]);
    const json& rec = b["recorded"];
    std::string detail;
    for (const char* k : {"target", "driver"})
      if (!rec[k].get<std::string>().empty()) detail += (detail.empty() ? "" : ", ") + rec[k].get<std::string>();
    return cell("recorded on " + rec["device"].get<std::string>() + (detail.empty() ? "" : " [" + detail + "]") +
                " by a build of " + rec["commit"].get<std::string>().substr(0, 12) +
                (rec["dirty"].get<bool>() ? " (modified)" : "") + " at " + rec["timestamp_utc"].get<std::string>() +
                " (" + rec["file"].get<std::string>() + "): " + rec["freshness"].get<std::string>());
  };
  for (const auto& b : r["backends"]) o << "| " << cell(b["name"]) << " | " << status_of(b) << " | " << cell(b["build"]) << " |\n";
  o << "\n## Fallback policy\n\n| backend | generic op | decode hot path | training optimizer |\n|---|---|---|---|\n";
  for (const auto& p : r["fallback_policy"])
    o << "| " << cell(p["backend"]) << " | " << cell(p["generic_op"]) << " | " << cell(p["decode_hot_path"]) << " | "
      << cell(p["training_optimizer"]) << " |\n";
  o << "\n## Native switches\n\nEnvironment variables that change a backend's native dispatch or what it reports, "
       "with the value in effect for this report; none turns a native op into a host fallback.\n\n"
       "| variable | backend | in effect | effect |\n|---|---|---|---|\n";
  for (const auto& sw : r["native_switches"])
    o << "| `" << cell(sw["setting"]) << "` | " << cell(sw["backend"]) << " | "
      << (sw["in_effect"].is_null() ? std::string("default") : "`" + cell(sw["in_effect"]) + "`") << " | "
      << cell(sw["effect"]) << " |\n";
  for (const auto& b : r["backends"]) {
    if (!b.contains("capabilities")) continue;
    const auto& c = b["capabilities"];
    o << "\n## Backend `" << cell(b["name"]) << "`\n\n";
    if (b.contains("recorded")) o << "Recorded: " << status_of(b) << ".\n\n";
    o << "| section | values |\n|---|---|\n";
    for (auto it = c.begin(); it != c.end(); ++it) {
      std::string vals;
      for (auto f = it->begin(); f != it->end(); ++f) vals += (vals.empty() ? "" : "; ") + f.key() + ": " + cell(*f);
      o << "| " << it.key() << " | " << vals << " |\n";
    }
    o << "\nSupport audit: " << b["support_audit"]["cases"] << " cases, " << b["support_audit"]["mismatches"]
      << " mismatches between predicates and methods.\n\n| facet | case | request | support | constraint |\n|---|---|---|---|---|\n";
    for (const auto& s : b["facet_support"])
      o << "| " << cell(s["facet"]) << " | " << cell(s["case"]) << " | `" << cell(s["request"]) << "` | "
        << cell(s["support"]) << " | " << cell(s["constraint"]) << " |\n";
  }
  o << "\n## Conformance gates\n\n| gate | backend | status | reason | command |\n|---|---|---|---|---|\n";
  for (const auto& g : r["gates"])
    for (const auto& b : g["backends"])
      o << "| " << cell(g["name"]) << " | " << cell(b["backend"]) << " | " << cell(b["status"]) << " | "
        << cell(b["reason"]) << " | " << (b["command"].get<std::string>().empty() ? "" : "`" + cell(b["command"]) + "`")
        << " |\n";
  if (r.contains("qualification_receipts")) {
    const json& q = r["qualification_receipts"];
    o << "\n## Qualification receipts\n\nThe newest receipt of each workload, variant and host "
         "(qualification/receipts/), judged at `evidence_as_of`: current while no input its workload declares has "
         "changed since the commit it ran.\n\n| workload / variant | host | device | verdict | commit | state |\n"
         "|---|---|---|---|---|---|\n";
    for (const auto& e : q["newest"])
      o << "| " << cell(e["workload"].get<std::string>() + " / " + e["variant"].get<std::string>()) << " | "
        << cell(e["host"]) << " | " << cell(e["device"]) << " | " << cell(e["verdict"]) << " | "
        << cell(e["commit"].get<std::string>().substr(0, 12)) << " | " << cell(e["state"])
        << (e["why"].get<std::string>().empty() ? "" : ": " + cell(e["why"])) << " |\n";
    for (const auto& u : q["without_receipt"]) o << "| " << cell(u) << " | | | no receipt | | |\n";
  }
  o << "\n## Evidence files\n\nBuild: the commit compiled into the test binary (\"modified\": built from uncommitted "
       "changes; \"unstamped\": recorded before binaries carried their commit, shown with the commit it names, and "
       "stale).\n\n| file | binary | build | recorded | devices | switches set |\n|---|---|---|---|---|---|\n";
  for (const auto& e : r["evidence_files"]) {
    const std::string commit = e["commit"];
    std::string build = !e["stamped"].get<bool>() ? "unstamped: " + commit
                        : commit == "unknown"      ? commit
                                                   : commit.substr(0, 12) + (e["dirty"].get<bool>() ? ", modified" : "");
    std::string devices;
    for (const auto& d : e["devices"]) {
      std::string detail;
      for (const char* k : {"target", "driver"})
        if (!d[k].get<std::string>().empty()) detail += (detail.empty() ? "" : ", ") + d[k].get<std::string>();
      devices += (devices.empty() ? "" : "; ") + d["backend"].get<std::string>() + ": " + d["device"].get<std::string>() +
                 (detail.empty() ? "" : " [" + detail + "]");
    }
    std::string set;
    for (auto it = e["native_switches"].begin(); it != e["native_switches"].end(); ++it)
      set += (set.empty() ? "" : ", ") + it.key() + "=" + it->get<std::string>();
    o << "| " << cell(e["path"]) << " | " << cell(e["binary"]) << " | " << cell(build) << " | "
      << cell(e["timestamp_utc"]) << " | " << cell(devices) << " | " << cell(set) << " |\n";
  }
  return o.str();
}

}  // namespace kiln
