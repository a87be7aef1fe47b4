// `kiln capabilities`: the backend capability report (Markdown or JSON), and the checked-in
// copy's writer and freshness check. Evidence freshness is judged at a commit: HEAD of the
// repository holding the evidence, or --as-of; --check judges at the commit the checked-in report
// names, so that it stays reproducible at later commits.
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "backend/native_switches.h"
#include "cli/commands.h"
#include "cli/default_model.h"
#include "model/init.h"
#include "qualify/git_source_history.h"
#include "qualify/receipt_index.h"
#include "report/capability_report.h"

namespace kiln::cli {

namespace {

struct CapOpts {
  bool json = false, canonical = false;
  std::string backend, model, evidence = "evidence", write_dir, check_dir, as_of, record;
};

std::string slurp(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// The committed receipts judged at `as_of`, for the report's qualification_receipts section.
Result<nlohmann::json> receipts_as_of(const std::string& evidence_dir, const std::string& as_of) {
  KILN_ASSIGN_OR_RETURN(qualify::GitRepo repo, qualify::GitRepo::discover(
                                                   std::filesystem::absolute(evidence_dir).parent_path().string()));
  KILN_ASSIGN_OR_RETURN(qualify::ReceiptIndex index, qualify::index_receipts(repo, as_of));
  nlohmann::json newest = nlohmann::json::array();
  for (const qualify::ReceiptStanding& s : index.newest)
    newest.push_back({{"workload", s.workload_id}, {"variant", s.variant}, {"host", s.host_id}, {"device", s.device},
                      {"verdict", s.verdict}, {"commit", s.commit}, {"file", s.file},
                      {"state", qualify::currency_name(s.freshness.state)}, {"why", s.freshness.why},
                      {"older_kept", s.older}});
  return nlohmann::json{{"newest", newest}, {"without_receipt", index.unreceipted}};
}

Status run(const CapOpts& o) {
  ReportOptions ro;
  if (o.model.empty()) {
    KILN_ASSIGN_OR_RETURN(ro.model, preset_config("qwen3.5-4b"));
    ro.model_label = "the qwen3.5-4b preset";
  } else {
    KILN_ASSIGN_OR_RETURN(std::string dir, resolve_model_dir(o.model));  // a folder or a Hub name
    KILN_ASSIGN_OR_RETURN(ro.model, ModelConfig::load(dir));
    ro.model_label = o.model;
  }
  ro.evidence_dir = o.evidence;
  ro.only_backend = o.backend;
  if (!o.record.empty()) {
    if (o.backend.empty()) return invalid_argument("--record needs --backend: the backend whose section to record");
    KILN_ASSIGN_OR_RETURN(BackendRecord rec, record_backend(o.backend, ro));
    std::ofstream out(o.record);
    out << backend_record_json(rec).dump(1) << "\n";
    if (!out) return io_error(o.record + ": write failed");
    std::fprintf(stderr, "recorded the %s section (%s) in %s\n", o.backend.c_str(),
                 rec.run.device(o.backend) ? rec.run.device(o.backend)->device.c_str() : "?", o.record.c_str());
    return {};
  }
  if (!o.write_dir.empty() || !o.check_dir.empty()) {
    // The checked-in report is rendered with every native switch at its default.
    std::string set;
    for (const auto& [var, value] : native_switches_in_effect()) set += (set.empty() ? "" : ", ") + var + "=" + value;
    if (!set.empty())
      return failed_precondition("native switches are set (" + set + "); the checked-in report is rendered with "
                                 "every switch at its default: unset them for --write and --check");
  }
  std::string as_of = o.as_of;
  if (!o.check_dir.empty() && as_of.empty()) {
    const std::string path = o.check_dir + "/backend-capability-report.json";
    auto checked_in = nlohmann::json::parse(slurp(path), nullptr, false);
    if (checked_in.is_discarded() || !checked_in.is_object())
      return failed_precondition(path + " is not a capability report: regenerate it with scripts/capability-report");
    if (checked_in.value("evidence_as_of", nlohmann::json()).is_string()) as_of = checked_in["evidence_as_of"];
  }
  // Without a repository (a copied tree) nothing is fresh: gates read stale or unknown, never covered.
  std::unique_ptr<SourceHistory> history;
  if (auto h = qualify::git_source_history(std::filesystem::absolute(o.evidence).parent_path().string(), as_of); h.ok())
    history = std::move(h.value());
  else if (!o.as_of.empty())
    return h.status().with_context("--as-of");
  else if (!as_of.empty())  // the checked-in report's commit, missing here (a shallow clone)
    return h.status().with_context(o.check_dir + "/backend-capability-report.json names evidence_as_of " + as_of);
  ro.history = history.get();
  if (history) {
    KILN_ASSIGN_OR_RETURN(ro.receipts, receipts_as_of(o.evidence, history->as_of()));
  }
  ro.canonical = o.canonical || !o.write_dir.empty() || !o.check_dir.empty();
  KILN_ASSIGN_OR_RETURN(nlohmann::json report, build_capability_report(ro));
  const std::string json_text = report.dump(2) + "\n", md_text = render_markdown(report);
  if (!o.write_dir.empty()) {
    for (auto [name, text] : {std::pair{"/backend-capability-report.json", &json_text},
                              std::pair{"/backend-capability-report.md", &md_text}}) {
      std::ofstream out(o.write_dir + name);
      out << *text;
      if (!out) return io_error(o.write_dir + name + ": write failed");
      std::fprintf(stderr, "wrote %s%s\n", o.write_dir.c_str(), name);
    }
    return {};
  }
  if (!o.check_dir.empty()) {
    for (auto [name, text] : {std::pair{"/backend-capability-report.json", &json_text},
                              std::pair{"/backend-capability-report.md", &md_text}})
      if (slurp(o.check_dir + name) != *text)
        return failed_precondition(o.check_dir + name + " is stale: regenerate it with scripts/capability-report");
    std::printf("capability report in %s is fresh\n", o.check_dir.c_str());
    return {};
  }
  std::printf("%s", o.json ? json_text.c_str() : md_text.c_str());
  return {};
}

}  // namespace

void add_capabilities_command(CLI::App& app) {
  auto* cmd = app.add_subcommand("capabilities", "The backend capability report, from the running code (Markdown or JSON)");
  auto o = std::make_shared<CapOpts>();
  cmd->add_flag("--json", o->json, "Print JSON instead of Markdown");
  cmd->add_option("--backend", o->backend, "Only this backend (cpu, cuda, vulkan, rocm, metal)");
  cmd->add_option("--model", o->model, "Checkpoint folder or Hub name ORG/NAME[@REVISION] (as for `kiln serve`) whose shapes the "
                  "representative requests use; default: the qwen3.5-4b preset");
  cmd->add_option("--evidence", o->evidence, "Folder of recorded test results behind the gates")->capture_default_str();
  cmd->add_flag("--canonical", o->canonical, "Leave out what differs between machines (device names, live counters)");
  cmd->add_option("--write", o->write_dir, "Write backend-capability-report.{md,json} (canonical) into this folder");
  cmd->add_option("--check", o->check_dir, "Exit 1 unless the report files in this folder equal a fresh canonical report");
  cmd->add_option("--record", o->record,
                  "Write the --backend's section (capabilities, facet support, support audit, fallback policy) as "
                  "this machine's device answers it, with this build's commit, to this file: evidence for reports "
                  "generated where the device is absent");
  cmd->add_option("--as-of", o->as_of,
                  "Judge evidence freshness at this commit; default HEAD, or with --check the commit the checked-in "
                  "report names");
  cmd->callback([o] { report(run(*o)); });
}

}  // namespace kiln::cli
