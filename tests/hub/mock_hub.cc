#include "hub/mock_hub.h"

#include <httplib.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/x509v3.h>

#include <ctime>
#include <filesystem>
#include <fstream>
#include <random>
#include <set>
#include <sstream>
#include <thread>

#include <nlohmann/json.hpp>

#include "core/sha256.h"

namespace kiln::testing {

namespace fs = std::filesystem;

namespace {

std::string hex(const unsigned char* d, unsigned n) {
  static const char k[] = "0123456789abcdef";
  std::string s;
  for (unsigned i = 0; i < n; ++i) {
    s.push_back(k[d[i] >> 4]);
    s.push_back(k[d[i] & 15]);
  }
  return s;
}

std::string sha1_hex(const std::string& bytes) {
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned n = 0;
  EVP_Digest(bytes.data(), bytes.size(), md, &n, EVP_sha1(), nullptr);
  return hex(md, n);
}

}  // namespace

std::string MockHub::git_blob_id(const std::string& contents) {
  return sha1_hex("blob " + std::to_string(contents.size()) + std::string(1, '\0') + contents);
}

MockRepo MockRepo::from_dir(const std::string& id, const std::string& dir) {
  MockRepo r;
  r.id = id;
  for (const auto& e : fs::recursive_directory_iterator(dir)) {
    if (!e.is_regular_file()) continue;
    std::ifstream f(e.path(), std::ios::binary);
    std::stringstream ss;
    ss << f.rdbuf();
    r.files[e.path().lexically_relative(dir).generic_string()] = ss.str();
  }
  return r;
}

bool write_test_certificate(const std::string& cert_path, const std::string& key_path, std::string& error) {
  EVP_PKEY* key = EVP_EC_gen("P-256");
  X509* cert = X509_new();
  bool ok = key != nullptr && cert != nullptr;
  if (ok) {
    X509_set_version(cert, 2);
    ASN1_INTEGER_set(X509_get_serialNumber(cert), static_cast<long>(std::random_device{}() & 0x7fffffff));
    X509_gmtime_adj(X509_getm_notBefore(cert), -3600);
    X509_gmtime_adj(X509_getm_notAfter(cert), 24 * 3600);
    X509_set_pubkey(cert, key);
    X509_NAME* name = X509_get_subject_name(cert);
    X509_NAME_add_entry_by_txt(name, "CN", MBSTRING_ASC, reinterpret_cast<const unsigned char*>("kiln mock hub"), -1, -1, 0);
    X509_set_issuer_name(cert, name);
    X509V3_CTX ctx;
    X509V3_set_ctx_nodb(&ctx);
    X509V3_set_ctx(&ctx, cert, cert, nullptr, nullptr, 0);
    for (auto [nid, value] : {std::pair{NID_subject_alt_name, "IP:127.0.0.1,DNS:localhost"},
                              std::pair{NID_basic_constraints, "critical,CA:TRUE"},
                              std::pair{NID_key_usage, "critical,digitalSignature,keyCertSign"}}) {
      X509_EXTENSION* ext = X509V3_EXT_conf_nid(nullptr, &ctx, nid, value);
      ok = ok && ext != nullptr && X509_add_ext(cert, ext, -1) == 1;
      X509_EXTENSION_free(ext);
    }
    ok = ok && X509_sign(cert, key, EVP_sha256()) > 0;
  }
  if (ok) {
    FILE* c = std::fopen(cert_path.c_str(), "w");
    FILE* k = std::fopen(key_path.c_str(), "w");
    ok = c && k && PEM_write_X509(c, cert) == 1 && PEM_write_PrivateKey(k, key, nullptr, nullptr, 0, nullptr, nullptr) == 1;
    if (c) std::fclose(c);
    if (k) std::fclose(k);
  }
  if (!ok) error = "OpenSSL could not make the test certificate";
  X509_free(cert);
  EVP_PKEY_free(key);
  return ok;
}

struct MockHub::Impl {
  Options options;
  std::unique_ptr<httplib::Server> hub, cdn;
  std::thread hub_thread, cdn_thread;
  int hub_port = 0, cdn_port = 0;
  std::string ca_file;
  mutable std::mutex mu;
  std::map<std::string, MockRepo> repos;
  std::map<std::string, std::string> blobs;         // sha256 -> contents
  std::map<std::string, std::string> blob_commits;  // sha256 -> the commit of a repository holding it
  MockFaults faults;
  std::vector<MockRequest> log;

  std::string cdn_base() const {
    return std::string(options.cdn_https ? "https" : "http") + "://" + options.host + ":" + std::to_string(cdn_port);
  }

  // 429 while throttling; false when the request was answered here.
  bool admit(httplib::Response& res) {
    std::lock_guard<std::mutex> lock(mu);
    if (faults.throttle_requests <= 0) return true;
    --faults.throttle_requests;
    res.status = 429;
    if (faults.retry_after_date) {
      const std::time_t when = std::time(nullptr) + faults.retry_after_s;
      std::tm tm{};
      gmtime_r(&when, &tm);
      char date[64];
      std::strftime(date, sizeof date, "%a, %d %b %Y %H:%M:%S GMT", &tm);
      res.set_header("Retry-After", date);
    } else {
      res.set_header("Retry-After", std::to_string(faults.retry_after_s));
    }
    res.set_content("slow down", "text/plain");
    return false;
  }

  void record(const char* server, const httplib::Request& req, const httplib::Response& res) {
    std::lock_guard<std::mutex> lock(mu);
    log.push_back({server, req.method, req.path, req.get_header_value("Range"), req.get_header_value("Authorization"), res.status});
  }

  // The repository, or an error answer as the Hub gives it (401 for unknown or gated without
  // the token, 403 for an account that did not accept the licence).
  const MockRepo* find_repo(const std::string& id, const httplib::Request& req, httplib::Response& res) {
    auto it = repos.find(id);
    const std::string auth = req.get_header_value("Authorization");
    if (it == repos.end()) {
      res.status = 401;
      res.set_header("X-Error-Code", "RepoNotFound");
      res.set_header("X-Error-Message", "Repository not found");
      return nullptr;
    }
    if (it->second.gated && auth != "Bearer " + options.token) {
      res.status = auth == "Bearer " + options.unaccepted_token ? 403 : 401;
      res.set_header("X-Error-Code", "GatedRepo");
      res.set_header("X-Error-Message", "Access to model " + id + " is restricted");
      return nullptr;
    }
    return &it->second;
  }

  // The repository of a route's first two matches at the revision of its third, or an error
  // answer (find_repo's, or 404 RevisionNotFound).
  const MockRepo* repo_at_revision(const httplib::Request& req, httplib::Response& res) {
    const MockRepo* r = find_repo(req.matches[1].str() + "/" + req.matches[2].str(), req, res);
    if (!r) return nullptr;
    const std::string rev = req.matches[3];
    if (rev != r->commit && std::find(r->refs.begin(), r->refs.end(), rev) == r->refs.end()) {
      res.status = 404;
      res.set_header("X-Error-Code", "RevisionNotFound");
      return nullptr;
    }
    return r;
  }

  void routes() {
    hub->Get(R"(/api/models/([^/]+)/([^/]+)/revision/(.+))", [this](const httplib::Request& req, httplib::Response& res) {
      if (!admit(res)) return;
      std::lock_guard<std::mutex> lock(mu);
      const MockRepo* r = repo_at_revision(req, res);
      if (!r) return;
      nlohmann::json siblings = nlohmann::json::array();
      for (const auto& [path, data] : r->files) {
        nlohmann::json s = {{"rfilename", path}};
        if (req.has_param("blobs")) {
          s["size"] = data.size();
          s["blobId"] = MockHub::git_blob_id(data);
          if (is_lfs(path)) s["lfs"] = {{"sha256", sha256_hex(data)}, {"size", data.size()}, {"pointerSize", 134}};
        }
        siblings.push_back(s);
      }
      res.set_content(nlohmann::json({{"id", r->id}, {"sha", r->commit}, {"siblings", siblings}}).dump(), "application/json");
    });
    // The revision's files as the Hub's tree API lists them (what huggingface_hub's
    // snapshot_download reads): recursive, one page (no Link header), folders as entries of their
    // own, LFS files with their sha256.
    hub->Get(R"(/api/models/([^/]+)/([^/]+)/tree/([^/]+))", [this](const httplib::Request& req, httplib::Response& res) {
      if (!admit(res)) return;
      std::lock_guard<std::mutex> lock(mu);
      const MockRepo* r = repo_at_revision(req, res);
      if (!r) return;
      nlohmann::json entries = nlohmann::json::array();
      std::set<std::string> folders;
      for (const auto& [path, data] : r->files) {
        for (size_t at = path.find('/'); at != std::string::npos; at = path.find('/', at + 1))
          if (folders.insert(path.substr(0, at)).second)
            entries.push_back({{"type", "directory"}, {"oid", MockHub::git_blob_id(path.substr(0, at))}, {"size", 0},
                               {"path", path.substr(0, at)}});
        nlohmann::json e = {{"type", "file"}, {"oid", MockHub::git_blob_id(data)}, {"size", data.size()}, {"path", path}};
        if (is_lfs(path)) e["lfs"] = {{"oid", sha256_hex(data)}, {"size", data.size()}, {"pointerSize", 134}};
        entries.push_back(e);
      }
      res.set_content(entries.dump(), "application/json");
    });
    hub->Get(R"(/([^/]+)/([^/]+)/resolve/([^/]+)/(.+))", [this](const httplib::Request& req, httplib::Response& res) {
      if (!admit(res)) return;
      std::lock_guard<std::mutex> lock(mu);
      const MockRepo* r = repo_at_revision(req, res);
      if (!r) return;
      const std::string path = req.matches[4];
      auto f = r->files.find(path);
      if (f == r->files.end()) {
        res.status = 404;
        res.set_header("X-Error-Code", "EntryNotFound");
        return;
      }
      res.set_header("X-Repo-Commit", r->commit);
      if (is_lfs(path)) {
        const std::string sha = sha256_hex(f->second);
        res.status = 302;
        res.set_header("X-Linked-Etag", "\"" + sha + "\"");
        res.set_header("X-Linked-Size", std::to_string(f->second.size()));
        res.set_header("ETag", "\"" + MockHub::git_blob_id(f->second) + "\"");
        res.set_header("Location", cdn_base() + "/blobs/" + sha + "?expires=1");
        return;
      }
      res.set_header("ETag", "\"" + MockHub::git_blob_id(f->second) + "\"");
      res.set_content(f->second, "application/octet-stream");
    });
    hub->set_logger([this](const httplib::Request& req, const httplib::Response& res) { record("hub", req, res); });

    cdn->Get(R"(/blobs/([0-9a-f]{64}))", [this](const httplib::Request& req, httplib::Response& res) {
      if (!admit(res)) return;
      std::lock_guard<std::mutex> lock(mu);
      auto b = blobs.find(req.matches[1]);
      if (b == blobs.end()) {
        res.status = 404;
        return;
      }
      std::shared_ptr<std::string> data = std::make_shared<std::string>(b->second);
      uint64_t drop_at = UINT64_MAX;
      if (faults.drop_transfers > 0) {
        --faults.drop_transfers;
        drop_at = faults.drop_after_bytes;
      }
      if (faults.corrupt_transfers > 0) {
        --faults.corrupt_transfers;
        (*data)[data->size() / 2] ^= 1;
      }
      res.set_header("ETag", "\"" + b->first + "\"");
      // huggingface_hub 1.33 follows the resolve redirect of an LFS file's metadata request here
      // and wants the commit on the response it ends on.
      res.set_header("X-Repo-Commit", blob_commits[b->first]);
      res.set_content_provider(data->size(), "application/octet-stream",
                               [data, drop_at](size_t offset, size_t length, httplib::DataSink& sink) {
                                 if (offset >= drop_at) return false;  // the connection drops
                                 const size_t n = std::min<size_t>(length, std::min<uint64_t>(64 * 1024, drop_at - offset));
                                 sink.write(data->data() + offset, n);
                                 return true;
                               });
    });
    cdn->set_logger([this](const httplib::Request& req, const httplib::Response& res) { record("cdn", req, res); });
  }
};

MockHub::MockHub(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

std::unique_ptr<MockHub> MockHub::start(const Options& options) {
  auto impl = std::make_unique<Impl>();
  impl->options = options;
  impl->hub = std::make_unique<httplib::Server>();
  if (options.cdn_https) {
    const std::string cert = options.cert_dir + "/cert.pem", key = options.cert_dir + "/key.pem";
    std::string error;
    if (!write_test_certificate(cert, key, error)) return nullptr;
    impl->cdn = std::make_unique<httplib::SSLServer>(cert.c_str(), key.c_str());
    impl->ca_file = cert;
  } else {
    impl->cdn = std::make_unique<httplib::Server>();
  }
  impl->routes();
  impl->hub_port = options.port == 0 ? impl->hub->bind_to_any_port(options.host)
                                     : (impl->hub->bind_to_port(options.host, options.port) ? options.port : -1);
  impl->cdn_port = impl->cdn->bind_to_any_port(options.host);
  if (impl->hub_port <= 0 || impl->cdn_port <= 0) return nullptr;
  Impl* p = impl.get();
  impl->hub_thread = std::thread([p] { p->hub->listen_after_bind(); });
  impl->cdn_thread = std::thread([p] { p->cdn->listen_after_bind(); });
  while (!impl->hub->is_running() || !impl->cdn->is_running()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  return std::unique_ptr<MockHub>(new MockHub(std::move(impl)));
}

MockHub::~MockHub() {
  impl_->hub->stop();
  impl_->cdn->stop();
  impl_->hub_thread.join();
  impl_->cdn_thread.join();
}

void MockHub::add_repo(MockRepo repo) {
  if (repo.commit.empty()) {
    std::string all;
    for (const auto& [path, data] : repo.files) all += path + '\0' + git_blob_id(data);
    repo.commit = sha1_hex(repo.id + '\0' + all);
  }
  std::lock_guard<std::mutex> lock(impl_->mu);
  for (const auto& [path, data] : repo.files)
    if (is_lfs(path)) {
      impl_->blobs[sha256_hex(data)] = data;
      impl_->blob_commits[sha256_hex(data)] = repo.commit;
    }
  impl_->repos[repo.id] = std::move(repo);
}

std::string MockHub::endpoint() const { return "http://" + impl_->options.host + ":" + std::to_string(impl_->hub_port); }
std::string MockHub::ca_file() const { return impl_->ca_file; }

void MockHub::set_faults(const MockFaults& f) {
  std::lock_guard<std::mutex> lock(impl_->mu);
  impl_->faults = f;
}

std::vector<MockRequest> MockHub::requests() const {
  std::lock_guard<std::mutex> lock(impl_->mu);
  return impl_->log;
}

void MockHub::clear_requests() {
  std::lock_guard<std::mutex> lock(impl_->mu);
  impl_->log.clear();
}

}  // namespace kiln::testing
