#include "qualify/receipt_index.h"

#include <algorithm>
#include <filesystem>
#include <map>
#include <tuple>

#include "qualify/workload.h"

namespace kiln::qualify {

namespace {

constexpr const char* kReceipts = "qualification/receipts";
constexpr const char* kWorkloads = "qualification/workloads";

std::string device_name(const Receipt& r) {
  const JsonValue* n = r.device.is_object() ? r.device.find("name") : nullptr;
  return n != nullptr && n->is_string() ? n->string : "";
}

// Workloads still run: qualification/workloads/*.json (retired/ is a folder, not a file here).
std::vector<Workload> current_workloads(const GitRepo& repo, std::vector<std::string>& invalid) {
  std::vector<std::filesystem::path> files;
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(repo.root() + "/" + kWorkloads, ec))
    if (e.is_regular_file() && e.path().extension() == ".json") files.push_back(e.path());
  std::sort(files.begin(), files.end());  // the same order on every filesystem
  std::vector<Workload> out;
  for (const std::filesystem::path& f : files) {
    Result<Workload> w = load_workload(f.string());
    if (w.ok()) {
      out.push_back(std::move(*w));
    } else {
      invalid.push_back(std::string(kWorkloads) + "/" + f.filename().string() + ": " + w.status().message());
    }
  }
  return out;
}

}  // namespace

Result<ReceiptIndex> index_receipts(const GitRepo& repo, const std::string& until) {
  ReceiptIndex index;
  std::vector<std::string> files;
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(repo.root() + "/" + kReceipts, ec))
    if (e.is_regular_file() && e.path().extension() == ".json")
      files.push_back(std::string(kReceipts) + "/" + e.path().filename().string());
  std::sort(files.begin(), files.end());
  // Newest per (workload, variant, host): a later created_at_utc wins (RFC 3339 UTC sorts as text).
  std::map<std::tuple<std::string, std::string, std::string>, std::pair<Receipt, ReceiptStanding>> newest;
  for (const std::string& f : files) {
    Result<ReceiptCheck> check = check_receipt_file(repo.root() + "/" + f);
    if (!check.ok()) {
      index.invalid.push_back(f + ": " + check.status().message());
      continue;
    }
    if (!check->issues.empty()) {
      index.invalid.push_back(f + ": " + check->issues.to_string());
      continue;
    }
    const Receipt& r = check->receipt;
    if (!until.empty()) {
      Result<bool> before = repo.is_ancestor(r.git_commit, until);
      if (!before.ok() || !*before) continue;
    }
    ReceiptStanding s{f, r.workload_id, r.profile, r.host_id, r.backend, device_name(r), r.verdict, r.git_commit,
                      recorded_without_gpu(r), {}, 0};
    auto key = std::make_tuple(r.workload_id, r.profile, r.host_id);
    auto it = newest.find(key);
    if (it == newest.end()) {
      newest.emplace(key, std::make_pair(r, std::move(s)));
    } else if (r.created_at_utc > it->second.first.created_at_utc) {
      s.older = it->second.second.older + 1;
      it->second = std::make_pair(r, std::move(s));
    } else {
      ++it->second.second.older;
    }
  }
  for (auto& [key, entry] : newest) {
    entry.second.freshness = receipt_freshness(entry.first, repo, until);
    index.newest.push_back(std::move(entry.second));
  }
  for (const Workload& w : current_workloads(repo, index.invalid))
    for (const Variant& v : w.variants) {
      const bool has = std::any_of(index.newest.begin(), index.newest.end(), [&](const ReceiptStanding& s) {
        return s.workload_id == w.workload_id && s.variant == v.id;
      });
      if (!has) index.unreceipted.push_back(w.workload_id + "/" + v.id + " (" + v.backend + ")");
    }
  return index;
}

std::vector<std::string> cpu_receipt_breaches(const ReceiptIndex& index, const GitRepo& repo) {
  std::vector<std::string> out = index.invalid;
  for (const ReceiptStanding& s : index.newest) {
    if (!s.without_gpu || is_retired_workload(workload_file(repo, s.workload_id))) continue;
    if (s.verdict != "passed") out.push_back(s.file + ": the newest receipt of its kind " + s.verdict);
    if (s.freshness.state != ReceiptCurrency::kCurrent)
      out.push_back(s.file + ": " + currency_name(s.freshness.state) + ": " + s.freshness.why);
  }
  std::vector<std::string> invalid_workloads;
  for (const Workload& w : current_workloads(repo, invalid_workloads))
    for (const Variant& v : w.variants) {
      if (v.backend != "cpu") continue;
      const bool has = std::any_of(index.newest.begin(), index.newest.end(), [&](const ReceiptStanding& s) {
        return s.workload_id == w.workload_id && s.variant == v.id && s.without_gpu;
      });
      if (!has) out.push_back(w.workload_id + "/" + v.id + ": no receipt recorded without a GPU");
    }
  return out;
}

}  // namespace kiln::qualify
