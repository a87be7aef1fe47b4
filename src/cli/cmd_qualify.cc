// `kiln qualify validate|run|receipt|compare`: local hardware qualification (docs/qualification.md).
// Exit codes: 0 only for success (a valid workload, a passed verdict, a valid receipt, a comparison
// that holds); 1 for a failed verdict, invalid document or failed comparison; 2 for a refusal.
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "cli/commands.h"
#include "cli/default_model.h"
#include "core/status.h"
#include "qualify/compare.h"
#include "qualify/receipt.h"
#include "qualify/receipt_index.h"
#include "qualify/runner.h"
#include "qualify/variables.h"
#include "qualify/workload.h"

namespace kiln::cli {
namespace {

namespace q = kiln::qualify;

Result<std::string> read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return not_found("cannot open " + path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

void validate_command(const std::vector<std::string>& paths) {
  for (const std::string& path : paths) {
    Result<std::string> text = read_file(path);
    if (!text.ok()) {
      report(text.status());
      continue;
    }
    q::WorkloadCheck check = q::check_workload_text(*text);
    if (check.issues.empty()) {
      std::printf("valid: %s (%s, %zu variant(s)) %s\n", check.workload.workload_id.c_str(), check.workload.kind.c_str(),
                  check.workload.variants.size(), check.workload.digest.c_str());
    } else {
      std::fprintf(stderr, "invalid: %s: %zu problem(s)\n%s", path.c_str(), check.issues.size(),
                   check.issues.to_string().c_str());
      exit_code = 1;
    }
  }
}

struct RunOptions {
  std::string workload, variant, host_id, model_dir, model_id, output;
  std::vector<std::string> vars;
  uint64_t capture_limit_bytes = 8u << 20;
  double grace_seconds = 5;
  uint64_t max_processes = 4096;
  double max_memory_gib = -1;  // negative: this host's physical memory
};

void run_command(const RunOptions& o, const std::vector<std::string>& argv) {
  q::RunRequest req;
  req.workload_path = o.workload;
  req.variant_id = o.variant;
  req.host_id = o.host_id;
  for (const std::string& v : o.vars) {
    Result<std::pair<std::string, std::string>> kv = q::parse_var_argument(v);
    if (!kv.ok()) {
      report(kv.status());
      exit_code = 2;
      return;
    }
    req.variables.push_back(*kv);
  }
  if (!o.model_dir.empty()) {
    auto dir = resolve_model_dir(o.model_dir);
    if (!dir.ok()) {
      report(dir.status());
      exit_code = 2;
      return;
    }
    req.model_dir = *dir;
  }
  req.model_id = o.model_id;
  if (!o.output.empty()) req.output_path = o.output;
  req.command = argv;
  req.limits.capture_limit_bytes = o.capture_limit_bytes;
  req.limits.interrupt_grace_seconds = o.grace_seconds;
  req.limits.terminate_grace_seconds = o.grace_seconds;
  req.sandbox.max_processes = o.max_processes;
  req.sandbox.max_memory_bytes =
      o.max_memory_gib < 0 ? static_cast<uint64_t>(sysconf(_SC_PHYS_PAGES)) * static_cast<uint64_t>(sysconf(_SC_PAGESIZE))
                           : static_cast<uint64_t>(o.max_memory_gib * 1073741824.0);
  Result<q::RunOutcome> out = q::run_workload(req);
  if (!out.ok()) {
    std::fprintf(stderr, "refused: %s\n", out.status().to_string().c_str());
    exit_code = 2;
    return;
  }
  std::printf("verdict: %s\nreceipt: %s\nevidence: %s\n", out->verdict.c_str(), out->receipt_path.c_str(),
              out->run_dir.c_str());
  exit_code = out->verdict == "passed" ? 0 : 1;
}

struct ReceiptOptions {
  std::string file;
  q::ReceiptRequirements req;
};

void receipt_command(const ReceiptOptions& o) {
  Result<std::string> text = read_file(o.file);
  if (!text.ok()) return report(text.status());
  q::ReceiptCheck check = q::check_receipt_text(*text);
  if (check.issues.empty()) q::check_receipt_requirements(check.receipt, o.req, o.file, check.issues);
  if (!check.issues.empty()) {
    std::fprintf(stderr, "invalid receipt: %s: %zu problem(s)\n%s", o.file.c_str(), check.issues.size(),
                 check.issues.to_string().c_str());
    exit_code = 1;
    return;
  }
  std::printf("valid receipt: %s verdict=%s workload=%s variant=%s backend=%s\n", check.receipt.receipt_id.c_str(),
              check.receipt.verdict.c_str(), check.receipt.workload_id.c_str(), check.receipt.profile.c_str(),
              check.receipt.backend.c_str());
}

struct ReceiptsOptions {
  std::string repo = ".";
  bool require_current_cpu = false;
};

void receipts_command(const ReceiptsOptions& o) {
  Result<q::GitRepo> repo = q::GitRepo::discover(o.repo);
  if (!repo.ok()) return report(repo.status());
  Result<q::ReceiptIndex> index = q::index_receipts(*repo);
  if (!index.ok()) return report(index.status());
  std::printf("%-34s %-18s %-8s %-12s %-8s %s\n", "workload/variant", "host", "verdict", "commit", "state", "why");
  for (const q::ReceiptStanding& s : index->newest) {
    std::string older = s.older > 0 ? " (" + std::to_string(s.older) + " older kept)" : "";
    std::printf("%-34s %-18s %-8s %-12s %-8s %s%s\n", (s.workload_id + "/" + s.variant).c_str(), s.host_id.c_str(),
                s.verdict.c_str(), s.commit.substr(0, 12).c_str(), q::currency_name(s.freshness.state),
                s.freshness.why.c_str(), older.c_str());
  }
  for (const std::string& u : index->unreceipted) std::printf("no receipt: %s\n", u.c_str());
  for (const std::string& i : index->invalid) std::printf("invalid: %s\n", i.c_str());
  if (!o.require_current_cpu) return;
  std::vector<std::string> breaches = q::cpu_receipt_breaches(*index, *repo);
  for (const std::string& b : breaches) std::fprintf(stderr, "breach: %s\n", b.c_str());
  if (!breaches.empty()) {
    std::fprintf(stderr,
                 "%zu breach(es): renew the receipts on a machine without a GPU (docs/qualification.md, "
                 "\"Receipts at HEAD\")\n",
                 breaches.size());
    exit_code = 1;
  }
}

struct CompareOptions {
  std::string baseline, candidate, manifest;
  bool json = false;
};

void compare_command(const CompareOptions& o) {
  Result<std::string> manifest_text = read_file(o.manifest);
  if (!manifest_text.ok()) return report(manifest_text.status());
  q::WorkloadCheck manifest = q::check_workload_text(*manifest_text);
  if (!manifest.issues.empty()) return report(manifest.issues.to_status("--workload-manifest " + o.manifest));
  q::Receipt receipts[2];
  const std::string* paths[2] = {&o.baseline, &o.candidate};
  for (int i = 0; i < 2; ++i) {
    Result<std::string> text = read_file(*paths[i]);
    if (!text.ok()) return report(text.status());
    q::ReceiptCheck check = q::check_receipt_text(*text);
    if (!check.issues.empty()) return report(check.issues.to_status("receipt " + *paths[i] + " is invalid"));
    receipts[i] = std::move(check.receipt);
  }
  q::Comparison c = q::compare_receipts(receipts[0], receipts[1], manifest.workload);
  if (o.json) {
    std::printf("%s\n", q::to_json_text(q::comparison_to_json(c), 2).c_str());
  } else {
    std::printf("%s", q::comparison_to_text(c).c_str());
  }
  exit_code = c.holds() ? 0 : 1;
}

}  // namespace

void add_qualify_command(CLI::App& app) {
  CLI::App* qualify = app.add_subcommand("qualify", "Validate and run qualification workloads; check and compare receipts");
  qualify->require_subcommand(1);

  auto paths = std::make_shared<std::vector<std::string>>();
  CLI::App* validate = qualify->add_subcommand("validate", "Check workload files against every rule of the contract");
  validate->add_option("workload", *paths, "Workload JSON file(s)")->required();
  validate->callback([paths] { validate_command(*paths); });

  auto run = std::make_shared<RunOptions>();
  CLI::App* run_cmd = qualify->add_subcommand("run", "Run one variant of a committed workload and write a receipt");
  run_cmd->add_option("workload", run->workload, "Workload JSON file, committed at HEAD")->required();
  run_cmd->add_option("--variant", run->variant, "Variant id")->required();
  run_cmd->add_option("--host-id", run->host_id, "A label for this machine, recorded in the receipt")->required();
  run_cmd->add_option("--var", run->vars, "NAME=VALUE for a declared workload variable (repeatable)");
  run_cmd->add_option("--model", run->model_dir, "Model folder (safetensors, config, tokenizer) or Hub name ORG/NAME[@REVISION]");
  run_cmd->add_option("--model-id", run->model_id, "Label for the model (default: directory name)");
  run_cmd->add_option("--output", run->output, "Receipt path under .qualification/receipts or qualification/receipts");
  run_cmd->add_option("--capture-limit-bytes", run->capture_limit_bytes, "Per-stream capture limit per repetition");
  run_cmd->add_option("--grace-seconds", run->grace_seconds, "Grace after SIGINT and after SIGTERM at a deadline");
  run_cmd->add_option("--max-processes", run->max_processes, "Processes a case may run at once (0: unbounded)")
      ->capture_default_str();
  run_cmd->add_option("--max-memory-gib", run->max_memory_gib,
                      "Memory a case may use, GiB (0: unbounded; default: this host's physical memory)");
  run_cmd->callback([run] {
    std::vector<std::string> argv = {"kiln", "qualify", "run", run->workload, "--variant", run->variant, "--host-id",
                                     run->host_id};
    for (const std::string& v : run->vars) {
      argv.push_back("--var");
      argv.push_back(v);
    }
    if (!run->model_dir.empty()) argv.insert(argv.end(), {"--model", run->model_dir});
    if (!run->output.empty()) argv.insert(argv.end(), {"--output", run->output});
    if (run->max_processes != 4096) argv.insert(argv.end(), {"--max-processes", std::to_string(run->max_processes)});
    if (run->max_memory_gib >= 0) argv.insert(argv.end(), {"--max-memory-gib", std::to_string(run->max_memory_gib)});
    run_command(*run, argv);
  });

  auto receipt = std::make_shared<ReceiptOptions>();
  CLI::App* receipt_cmd = qualify->add_subcommand("receipt", "Validate a receipt");
  receipt_cmd->add_option("file", receipt->file, "Receipt JSON file")->required();
  receipt_cmd->add_flag("--require-current-source", receipt->req.current_source,
                        "Nothing the receipt's workload runs (its inputs, and the workload) may have changed since "
                        "the receipt's commit, committed or not");
  receipt_cmd->add_flag("--require-local-artifacts", receipt->req.local_artifacts,
                        "Every local artifact must exist with its recorded sha256 and size");
  receipt_cmd->add_flag("--require-known-commit", receipt->req.known_commit,
                        "The receipt's git commit must exist in this repository");
  receipt_cmd->add_flag("--require-enforced", receipt->req.enforced,
                        "The cases must have run without network, in a namespace of their own");
  receipt_cmd->callback([receipt] { receipt_command(*receipt); });

  auto receipts = std::make_shared<ReceiptsOptions>();
  CLI::App* receipts_cmd = qualify->add_subcommand(
      "receipts", "List the newest committed receipt of each workload, variant and host, and whether it is current");
  receipts_cmd->add_option("--repo", receipts->repo, "A path inside the repository")->capture_default_str();
  receipts_cmd->add_flag("--require-current-cpu", receipts->require_current_cpu,
                         "Exit 1 unless every receipt validates, every cpu variant has a receipt recorded without a "
                         "GPU, and each newest such receipt (CPU, or Vulkan on llvmpipe) passed and is current");
  receipts_cmd->callback([receipts] { receipts_command(*receipts); });

  auto compare = std::make_shared<CompareOptions>();
  CLI::App* compare_cmd = qualify->add_subcommand("compare", "Compare two receipts under a workload's comparison policy");
  compare_cmd->add_option("baseline", compare->baseline, "Baseline receipt")->required();
  compare_cmd->add_option("candidate", compare->candidate, "Candidate receipt")->required();
  compare_cmd->add_option("--workload-manifest", compare->manifest, "The workload both receipts name")->required();
  compare_cmd->add_flag("--json", compare->json, "Print the comparison as JSON");
  compare_cmd->callback([compare] { compare_command(*compare); });
}

}  // namespace kiln::cli
