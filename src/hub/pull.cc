#include "hub/pull.h"

#include <sys/statvfs.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <chrono>
#include <cmath>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <mutex>
#include <set>
#include <sstream>
#include <thread>

#include "core/json_text.h"
#include "core/sha256.h"
#include "hub/hf_cache.h"
#include "hub/pull_progress.h"
#include "hub/retry_after.h"
#include "model/model_files.h"

namespace kiln::hub {

namespace fs = std::filesystem;

namespace {

struct RemoteFile {
  std::string path;
  int64_t size = -1;        // -1: not listed
  std::string lfs_sha256;   // listed for LFS files
  std::string blob_id;      // the git object id, listed for every file
};

struct RevisionInfo {
  std::string commit;
  std::map<std::string, RemoteFile> files;
};

// One try's outcome: done, failed for good, or worth another try (after retry_after_s when the
// server said so).
struct Attempt {
  Status status;
  bool retry = false;
  double retry_after_s = -1;
  static Attempt ok() { return {}; }
  static Attempt fatal(Status s) { return {std::move(s), false, -1}; }
  static Attempt again(Status s, double after = -1) { return {std::move(s), true, after}; }
};

bool retryable_status(int status) {
  return status == 408 || status == 429 || status == 500 || status == 502 || status == 503 || status == 504;
}

double retry_after_of(const HttpHead& h) {
  return retry_after_seconds(h.header("retry-after"), std::time(nullptr)).value_or(-1);
}

bool is_sha256(const std::string& s) {
  if (s.size() != 64) return false;
  for (char c : s)
    if (!std::isxdigit(static_cast<unsigned char>(c)) || std::isupper(static_cast<unsigned char>(c))) return false;
  return true;
}

// A top-level file name the Hub lists: plain, no path, nothing a folder name could misuse.
bool plain_file_name(const std::string& s) {
  if (s.empty() || s.size() > 255 || s[0] == '.' || s.find('/') != std::string::npos) return false;
  for (unsigned char c : s)
    if (c < 0x20 || c == 0x7f || c == '\\') return false;
  return true;
}

bool parse_u64(const std::string& s, uint64_t& out) {
  if (s.empty() || s.size() > 19) return false;
  out = 0;
  for (char c : s) {
    if (!std::isdigit(static_cast<unsigned char>(c))) return false;
    out = out * 10 + static_cast<uint64_t>(c - '0');
  }
  return true;
}

uint64_t file_size_or_zero(const std::string& p) {
  std::error_code ec;
  const auto n = fs::file_size(p, ec);
  return ec ? 0 : n;
}

class Puller {
 public:
  Puller(const HubSettings& s, const RepoRef& ref, const PullOptions& o)
      : s_(s), ref_(ref), o_(o), cache_(s.cache_dir), http_(endpoint_origin(s.endpoint), s.token, o.http, s.proxy),
        progress_(o.log, o.terminal, "pull " + ref.label()) {}

  Result<PullResult> run();

 private:
  static std::string endpoint_origin(const std::string& endpoint) {
    auto u = parse_url(endpoint);
    return u.ok() ? u->origin() : std::string();
  }
  Status with_retries(const std::string& what, const std::function<Attempt()>& attempt);
  Status hub_error(const HttpHead& h, const std::string& file) const;
  Attempt judge(const Result<HttpExchange>& ex, const std::string& file) const;
  Result<RevisionInfo> revision_info();
  Status check_disk(const std::vector<const RemoteFile*>& files);
  Status fetch(const RemoteFile& f);
  Status fetch_all(const std::vector<const RemoteFile*>& files, int jobs);
  Result<bool> blob_ok(const std::string& blob, bool lfs, const std::string& name);
  Attempt download(const std::string& url, const std::string& partial, uint64_t size, bool lfs,
                   const std::string& etag, const std::string& name);

  const HubSettings& s_;
  const RepoRef& ref_;
  const PullOptions& o_;
  HfCache cache_;
  HttpClient http_;
  PullProgress progress_;
  std::string commit_;
  std::atomic<bool> abort_{false};
  std::atomic<int> fetched_{0};
  std::atomic<uint64_t> fetched_bytes_{0};
};

Status Puller::with_retries(const std::string& what, const std::function<Attempt()>& attempt) {
  double wait = o_.backoff_s;
  for (int n = 1;; ++n) {
    Attempt a = attempt();
    if (a.status.ok() || !a.retry || abort_) return a.status;
    if (n >= o_.max_attempts)
      return a.status.with_context(what + ": gave up after " + std::to_string(n) + " tries");
    double delay = a.retry_after_s >= 0 ? std::min(a.retry_after_s, o_.max_retry_after_s) : std::min(wait, 30.0);
    char when[32];
    std::snprintf(when, sizeof when, "%.2f", delay);
    progress_.note(what + ": " + a.status.message() + "; trying again in " + when + " s (try " + std::to_string(n + 1) +
                   " of " + std::to_string(o_.max_attempts) + ")");
    std::this_thread::sleep_for(std::chrono::duration<double>(delay));
    wait *= 2;
  }
}

Status Puller::hub_error(const HttpHead& h, const std::string& file) const {
  const std::string code = h.header("x-error-code");
  const std::string repo_url = s_.endpoint + "/" + ref_.id();
  const std::string token = s_.token.empty() ? std::string("no token is set")
                                             : "the token from " + s_.token_source + " was sent";
  if (code == "GatedRepo" || h.status == 403) {
    if (h.status == 403 && !s_.token.empty())
      return failed_precondition(ref_.id() + " is gated (HTTP 403, " + token + "): accept its licence at " + repo_url +
                                 " with the account whose token Kiln sends");
    return failed_precondition(ref_.id() + " is gated (HTTP " + std::to_string(h.status) + ", " + token +
                               "): set HF_TOKEN to the token of an account that accepted its licence at " + repo_url);
  }
  if (h.status == 401 || (h.status == 404 && (code == "RepoNotFound" || code.empty()) && file.empty()))
    return not_found(ref_.id() + ": not found on " + s_.endpoint + " (HTTP " + std::to_string(h.status) + ", " + token +
                     "). Check the name; a private or gated model needs a token with access: set HF_TOKEN "
                     "(or run `huggingface-cli login`)");
  if (h.status == 404 && code == "RevisionNotFound")
    return not_found(ref_.id() + ": revision '" + ref_.revision + "' not found: check the branch, tag or commit hash");
  if (h.status == 404)
    return not_found(ref_.id() + ": '" + file + "' not found at commit " + commit_);
  std::string msg = h.header("x-error-message");
  return io_error("HTTP " + std::to_string(h.status) + " from " + h.url + (msg.empty() ? "" : ": " + msg.substr(0, 300)));
}

Attempt Puller::judge(const Result<HttpExchange>& ex, const std::string& file) const {
  if (!ex.ok()) {
    if (ex.status().code() == ErrorCode::kIoError) return Attempt::again(ex.status());
    return Attempt::fatal(ex.status());
  }
  const HttpHead& h = ex->last;
  if ((h.status >= 200 && h.status < 300) || is_redirect(h.status)) return Attempt::ok();
  Status err = hub_error(h, file);
  if (retryable_status(h.status)) return Attempt::again(err, retry_after_of(h));
  return Attempt::fatal(err);
}

Result<RevisionInfo> Puller::revision_info() {
  const std::string url = s_.endpoint + "/api/models/" + ref_.org + "/" + ref_.name + "/revision/" +
                          url_quote(ref_.revision, false) + "?blobs=true";
  std::string body;
  bool too_big = false;
  Status st = with_retries("revision info of " + ref_.label(), [&] {
    body.clear();
    too_big = false;
    auto ex = http_.get(url, {{"Accept", "application/json"}}, nullptr, [&](const char* d, size_t n) {
      if (body.size() + n > kMaxRevisionInfoBytes) {
        too_big = true;
        return false;
      }
      body.append(d, n);
      return true;
    });
    if (too_big) return Attempt::fatal(format_error(url + ": the answer is larger than 32 MiB"));
    Attempt a = judge(ex, "");
    if (a.status.ok() && ex->last.status != 200)
      return Attempt::fatal(format_error(url + ": HTTP " + std::to_string(ex->last.status) + " where 200 was expected"));
    return a;
  });
  KILN_RETURN_IF_ERROR(st);
  KILN_ASSIGN_OR_RETURN(nlohmann::json j, parse_json(body, url));
  auto bad = [&](const std::string& why) { return format_error(url + ": " + why); };
  if (!j.is_object() || !j.contains("sha") || !j["sha"].is_string()) return bad("no commit ('sha') in the answer");
  RevisionInfo info;
  info.commit = j["sha"].get<std::string>();
  if (!is_commit_hash(info.commit)) return bad("'sha' is not a 40-hex commit hash");
  if (!j.contains("siblings") || !j["siblings"].is_array()) return bad("no file list ('siblings') in the answer");
  if (j["siblings"].size() > kMaxSiblings) return bad("more than 100000 files listed");
  for (const auto& e : j["siblings"]) {
    if (!e.is_object() || !e.contains("rfilename") || !e["rfilename"].is_string()) return bad("a sibling without 'rfilename'");
    RemoteFile f;
    f.path = e["rfilename"].get<std::string>();
    if (auto it = e.find("size"); it != e.end() && it->is_number_unsigned()) f.size = it->get<int64_t>();
    if (auto it = e.find("blobId"); it != e.end() && it->is_string()) f.blob_id = it->get<std::string>();
    if (auto it = e.find("lfs"); it != e.end() && it->is_object()) {
      if (auto sha = it->find("sha256"); sha != it->end() && sha->is_string() && is_sha256(sha->get<std::string>()))
        f.lfs_sha256 = sha->get<std::string>();
      if (auto sz = it->find("size"); sz != it->end() && sz->is_number_unsigned()) f.size = sz->get<int64_t>();
    }
    if (!normalize_etag(f.blob_id).ok()) f.blob_id.clear();
    info.files[f.path] = std::move(f);
  }
  return info;
}

Status Puller::check_disk(const std::vector<const RemoteFile*>& files) {
  uint64_t need = 0;
  for (const RemoteFile* f : files) {
    if (f->size < 0) continue;
    const std::string name = !f->lfs_sha256.empty() ? f->lfs_sha256 : f->blob_id;
    if (!name.empty() && fs::exists(cache_.blob_path(ref_, name))) continue;
    const uint64_t partial = name.empty() ? 0 : file_size_or_zero(cache_.blob_path(ref_, name) + ".incomplete");
    need += static_cast<uint64_t>(f->size) - std::min<uint64_t>(partial, static_cast<uint64_t>(f->size));
  }
  struct statvfs v {};
  if (::statvfs(cache_.dir().c_str(), &v) != 0) return io_error("statvfs " + cache_.dir() + ": " + std::strerror(errno));
  const uint64_t avail = static_cast<uint64_t>(v.f_bavail) * v.f_frsize;
  if (need + o_.disk_reserve_bytes > avail)
    return resource_exhausted(ref_.label() + " needs " + format_bytes(need) + " more in " + cache_.dir() + " (plus " +
                              format_bytes(o_.disk_reserve_bytes) + " kept free), and " + format_bytes(avail) +
                              " is free: free space there, or point HF_HUB_CACHE (or HF_HOME) at a larger disk");
  progress_.add_total(need);
  return {};
}

// Whether `blob` holds what its name says; a corrupt LFS blob is removed.
Result<bool> Puller::blob_ok(const std::string& blob, bool lfs, const std::string& name) {
  std::error_code ec;
  if (!fs::exists(blob, ec)) return false;
  if (!lfs || !o_.verify_cached) return true;
  KILN_ASSIGN_OR_RETURN(FileDigest d, sha256_file(blob));
  if (d.sha256 == fs::path(blob).filename().string()) return true;
  progress_.note(name + ": the cached blob " + blob + " does not match its sha256 (" + d.sha256 + "): fetching it again");
  fs::remove(blob, ec);
  return false;
}

Attempt Puller::download(const std::string& url, const std::string& partial, uint64_t size, bool lfs,
                         const std::string& etag, const std::string& name) {
  std::error_code ec;
  uint64_t have = file_size_or_zero(partial);
  if (have > size) {
    fs::remove(partial, ec);
    have = 0;
  }
  Sha256 hash;
  if (lfs && have > 0) {  // the bytes already here count towards the digest
    std::ifstream in(partial, std::ios::binary);
    std::vector<char> buf(1 << 20);
    uint64_t left = have;
    while (left > 0 && in) {
      in.read(buf.data(), static_cast<std::streamsize>(std::min<uint64_t>(left, buf.size())));
      const auto got = static_cast<uint64_t>(in.gcount());
      if (got == 0) break;
      hash.update(buf.data(), got);
      left -= got;
    }
    if (left != 0) return Attempt::fatal(io_error("cannot read back " + partial));
  }
  if (have < size) {
    std::FILE* out = nullptr;
    bool overflow = false, bad_range = false;
    uint64_t at = have;
    HttpClient::Headers headers;
    if (have > 0) headers.push_back({"Range", "bytes=" + std::to_string(have) + "-"});
    auto ex = http_.get(
        url, headers,
        [&](const HttpExchange& x) {
          if (x.last.status == 206) {
            const std::string cr = x.last.header("content-range");
            if (cr.rfind("bytes " + std::to_string(have) + "-", 0) != 0) {
              bad_range = true;
              return false;
            }
          } else if (have > 0) {  // the server ignored the Range: start over
            progress_.add_total(have);
            have = at = 0;
            hash = Sha256();
          }
          out = std::fopen(partial.c_str(), have > 0 ? "ab" : "wb");
          return out != nullptr;
        },
        [&](const char* d, size_t n) {
          if (abort_) return false;
          if (at + n > size) {
            overflow = true;
            return false;
          }
          if (std::fwrite(d, 1, n, out) != n) return false;
          if (lfs) hash.update(d, n);
          at += n;
          progress_.add(n);
          fetched_bytes_ += n;
          return true;
        });
    const bool write_failed = out != nullptr && (std::fflush(out) != 0 || std::ferror(out));
    if (out != nullptr) std::fclose(out);
    if (abort_) return Attempt::fatal(io_error("stopped"));
    if (ex.ok() && ex->cancelled && out == nullptr && !bad_range)
      return Attempt::fatal(io_error("cannot open " + partial + " for writing: " + std::strerror(errno)));
    if (write_failed) return Attempt::fatal(io_error("writing " + partial + " failed: " + std::strerror(errno)));
    if (overflow) {
      fs::remove(partial, ec);
      return Attempt::again(format_error(name + ": the server sent more than the " + std::to_string(size) + " bytes it declared"));
    }
    if (bad_range) {
      fs::remove(partial, ec);
      return Attempt::again(format_error(name + ": the server answered the Range request with another range"));
    }
    if (ex.ok() && ex->last.status == 416) {
      fs::remove(partial, ec);
      return Attempt::again(format_error(name + ": the server refused to resume (HTTP 416): starting over"));
    }
    if (Attempt a = judge(ex, name); !a.status.ok()) return a;
    if (ex.ok() && is_redirect(ex->last.status)) return Attempt::fatal(format_error(url + ": a redirect the client did not follow"));
    if (at < size)
      return Attempt::again(io_error(name + ": the connection ended after " + std::to_string(at) + " of " +
                                     std::to_string(size) + " bytes"));
  }
  if (file_size_or_zero(partial) != size)
    return Attempt::again(io_error(partial + " holds " + std::to_string(file_size_or_zero(partial)) + " bytes, not " +
                                   std::to_string(size)));
  if (lfs) {
    const std::string got = hash.hex();
    if (got != etag) {
      fs::remove(partial, ec);
      return Attempt::again(format_error(name + ": sha256 " + got + " does not match the expected " + etag));
    }
  }
  return Attempt::ok();
}

Status Puller::fetch(const RemoteFile& f) {
  const std::string what = ref_.id() + "/" + f.path;
  // What the file list already tells: a blob present under its name needs no request at all.
  const std::string listed = !f.lfs_sha256.empty() ? f.lfs_sha256 : f.blob_id;
  if (!listed.empty()) {
    KILN_ASSIGN_OR_RETURN(bool ok, blob_ok(cache_.blob_path(ref_, listed), !f.lfs_sha256.empty(), f.path));
    if (ok) {
      KILN_RETURN_IF_ERROR(cache_.link(ref_, commit_, f.path, listed));
      progress_.file_done(f.path, file_size_or_zero(cache_.blob_path(ref_, listed)), false);
      return {};
    }
  }
  // The file's metadata, as huggingface_hub reads it: HEAD, following redirects within the
  // endpoint's origin only; a redirect elsewhere (the CDN) is where the bytes come from.
  const std::string resolve = s_.endpoint + "/" + ref_.id() + "/resolve/" + commit_ + "/" + url_quote(f.path, true);
  HttpExchange meta;
  KILN_RETURN_IF_ERROR(with_retries(what, [&] {
    auto ex = http_.head(resolve, {}, [](const Url& from, const Url& to) { return from.origin() == to.origin(); });
    Attempt a = judge(ex, f.path);
    if (a.status.ok()) meta = *ex;
    return a;
  }));
  const HttpHead& h = meta.last;
  const std::string repo_commit = h.header("x-repo-commit");
  if (!repo_commit.empty() && repo_commit != commit_)
    return format_error(what + ": the server answered for commit " + repo_commit.substr(0, 64) + ", not " + commit_);
  const bool lfs = !h.header("x-linked-etag").empty();
  const std::string raw_etag = lfs ? h.header("x-linked-etag") : h.header("etag");
  if (raw_etag.empty()) return format_error(what + ": the server sent no ETag (is HF_ENDPOINT a Hugging Face Hub?)");
  KILN_ASSIGN_OR_RETURN(std::string etag, normalize_etag(raw_etag));
  if (lfs && !is_sha256(etag)) return format_error(what + ": the LFS ETag '" + etag + "' is not a sha256");
  if (!f.lfs_sha256.empty() && lfs && etag != f.lfs_sha256)
    return format_error(what + ": the file list says sha256 " + f.lfs_sha256 + ", the file's headers say " + etag);
  uint64_t size = 0;
  if (!parse_u64(lfs ? h.header("x-linked-size") : h.header("content-length"), size))
    return format_error(what + ": the server sent no size (X-Linked-Size / Content-Length)");
  if (size > (lfs ? kMaxFileBytes : kMaxSmallFileBytes))
    return format_error(what + ": declared size " + std::to_string(size) + " bytes is over the limit");
  std::string url = resolve;
  if (is_redirect(h.status)) {
    KILN_ASSIGN_OR_RETURN(Url next, resolve_location(parse_url(h.url).value(), h.header("location")));
    url = next.str();
  } else if (h.status == 200) {
    url = h.url;
  }
  if (f.size < 0) progress_.add_total(size);

  const std::string blob = cache_.blob_path(ref_, etag);
  KILN_ASSIGN_OR_RETURN(bool present, blob_ok(blob, lfs, f.path));
  bool fetched = false;
  if (!present) {
    std::error_code ec;
    fs::create_directories(fs::path(blob).parent_path(), ec);
    KILN_ASSIGN_OR_RETURN(FileLock lock, FileLock::acquire(cache_.dir() + "/.locks/" + ref_.folder() + "/" + etag + ".lock"));
    KILN_ASSIGN_OR_RETURN(present, blob_ok(blob, lfs, f.path));  // another process may have finished it
    if (!present) {
      const std::string partial = blob + ".incomplete";
      KILN_RETURN_IF_ERROR(with_retries(what, [&] { return download(url, partial, size, lfs, etag, f.path); }));
      fs::rename(partial, blob, ec);
      if (ec) return io_error("cannot rename " + partial + " to " + blob + ": " + ec.message());
      fetched = true;
      ++fetched_;
    }
  }
  KILN_RETURN_IF_ERROR(cache_.link(ref_, commit_, f.path, etag));
  progress_.file_done(f.path, size, fetched);
  return {};
}

Status Puller::fetch_all(const std::vector<const RemoteFile*>& files, int jobs) {
  std::atomic<size_t> next{0};
  std::mutex mu;
  Status first;
  auto worker = [&] {
    for (size_t i = next++; i < files.size() && !abort_; i = next++) {
      Status s = fetch(*files[i]);
      if (!s.ok()) {
        std::lock_guard<std::mutex> lock(mu);
        if (first.ok()) first = s;
        abort_ = true;
      }
    }
  };
  const int n = std::max(1, std::min<int>(jobs, static_cast<int>(files.size())));
  std::vector<std::thread> threads;
  for (int t = 1; t < n; ++t) threads.emplace_back(worker);
  worker();
  for (auto& t : threads) t.join();
  return first;
}

Result<PullResult> Puller::run() {
  if (s_.offline)
    return failed_precondition("HF_HUB_OFFLINE is set: cannot fetch " + ref_.label() + " from " + s_.endpoint +
                               " (unset HF_HUB_OFFLINE, or copy the model into " + cache_.dir() + ")");
  std::error_code ec;
  fs::create_directories(cache_.dir(), ec);
  if (ec) return io_error("cannot create the Hugging Face cache " + cache_.dir() + ": " + ec.message());
  KILN_ASSIGN_OR_RETURN(RevisionInfo info, revision_info());
  commit_ = info.commit;

  // Phase 1: the metadata files (the shard index among them), then the weights they name.
  std::vector<const RemoteFile*> meta;
  for (const auto& [path, f] : info.files)
    if (plain_file_name(path) && (is_serving_metadata_file(path) || path == kSafetensorsIndex)) meta.push_back(&f);
  if (!info.files.count("config.json"))
    return not_found(ref_.label() + " (commit " + commit_ + ") has no config.json: not a transformers model repository");
  std::vector<std::string> shard_names;
  if (!info.files.count(kSafetensorsIndex) && !info.files.count(kSingleSafetensors)) {
    std::string formats;
    for (const auto& [path, f] : info.files)
      if (path.find('/') == std::string::npos && (path.ends_with(".bin") || path.ends_with(".gguf") || path.ends_with(".pt")))
        formats += (formats.empty() ? "" : ", ") + path;
    return not_found(ref_.label() + " (commit " + commit_ + ") has neither " + kSingleSafetensors + " nor " +
                     kSafetensorsIndex + ": Kiln reads safetensors weights only" +
                     (formats.empty() ? std::string() : " (it has " + formats.substr(0, 300) + ")"));
  }
  KILN_RETURN_IF_ERROR(check_disk(meta));
  progress_.start(static_cast<int>(meta.size()));
  KILN_RETURN_IF_ERROR(fetch_all(meta, 1));

  if (info.files.count(kSafetensorsIndex)) {
    const std::string index_path = cache_.snapshot_dir(ref_, commit_) + "/" + kSafetensorsIndex;
    std::ifstream in(index_path);
    std::stringstream ss;
    ss << in.rdbuf();
    KILN_ASSIGN_OR_RETURN(nlohmann::json index, parse_json(ss.str(), index_path));
    if (!index.is_object() || !index.contains("weight_map") || !index["weight_map"].is_object())
      return format_error(index_path + ": not a safetensors index (no weight_map object)");
    std::set<std::string> names;
    for (const auto& v : index["weight_map"]) {
      if (!v.is_string() || !plain_file_name(v.get<std::string>()) || !v.get<std::string>().ends_with(".safetensors"))
        return format_error(index_path + ": a weight_map entry is not a plain .safetensors file name");
      names.insert(v.get<std::string>());
    }
    if (names.size() > kMaxShards) return format_error(index_path + ": more than 4096 shards");
    shard_names.assign(names.begin(), names.end());
  } else {
    shard_names.push_back(kSingleSafetensors);
  }
  std::vector<const RemoteFile*> shards;
  for (const std::string& n : shard_names) {
    auto it = info.files.find(n);
    if (it == info.files.end())
      return not_found(ref_.label() + ": the shard index names " + n + ", which the repository does not list");
    shards.push_back(&it->second);
  }
  KILN_RETURN_IF_ERROR(check_disk(shards));
  progress_.start(static_cast<int>(meta.size() + shards.size()));
  KILN_RETURN_IF_ERROR(fetch_all(shards, o_.jobs));
  progress_.finish();
  // Every file Kiln would fetch that this commit lacks gets huggingface_hub's .no_exist marker, so
  // that neither Kiln nor transformers asks for it again.
  std::vector<std::string> absent;
  for (const std::string& name : optional_serving_files())
    if (!info.files.count(name)) absent.push_back(name);
  for (const char* name : {kSafetensorsIndex, kSingleSafetensors})
    if (!info.files.count(name)) absent.push_back(name);
  for (const std::string& name : absent) KILN_RETURN_IF_ERROR(cache_.mark_absent(ref_, commit_, name));
  KILN_RETURN_IF_ERROR(cache_.write_ref(ref_, commit_));

  PullResult r;
  r.commit = commit_;
  r.snapshot_dir = cache_.snapshot_dir(ref_, commit_);
  for (const RemoteFile* f : meta) r.files.push_back(f->path);
  for (const RemoteFile* f : shards) r.files.push_back(f->path);
  r.absent = absent;
  r.fetched = fetched_;
  r.fetched_bytes = fetched_bytes_;
  return r;
}

}  // namespace

Result<PullResult> pull_model(const HubSettings& settings, const RepoRef& ref, const PullOptions& options) {
  Puller p(settings, ref, options);
  return p.run();
}

}  // namespace kiln::hub
