// A stand-in for the Hugging Face Hub on loopback, for the tests and for the interoperability
// script (tools/hub_interop.py through the kiln_mock_hub binary). It answers as the Hub does:
// GET /api/models/ORG/NAME/revision/REV (sha, siblings with blobId, size and lfs.sha256),
// HEAD/GET /ORG/NAME/resolve/REV/PATH (small files inline with the git blob id as ETag; LFS files
// (*.safetensors) as a 302 to the CDN with X-Linked-Etag = sha256 and X-Linked-Size), and a CDN on
// a second port (HTTPS with a certificate made at start, or plain HTTP) that honours Range. Gated
// repositories want a bearer token; faults can be injected: a dropped connection mid-file, a
// corrupted body, 429 with Retry-After (seconds or an HTTP-date).
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

namespace kiln::testing {

struct MockRepo {
  std::string id;                            // "org/name"
  std::string commit;                        // 40 hex; derived from the files when empty
  std::vector<std::string> refs = {"main"};  // revisions that name the commit
  std::map<std::string, std::string> files;  // path -> contents
  bool gated = false;                        // wants `MockHub::Options::token`

  // Every regular file of `dir` (recursively).
  static MockRepo from_dir(const std::string& id, const std::string& dir);
};

struct MockFaults {
  int drop_transfers = 0;        // CDN transfers that stop after drop_after_bytes and close
  uint64_t drop_after_bytes = 0;
  int corrupt_transfers = 0;     // CDN transfers whose bytes carry one flipped bit
  int throttle_requests = 0;     // requests (any route) answered 429 with Retry-After
  int retry_after_s = 1;
  bool retry_after_date = false; // Retry-After as an HTTP-date (IMF-fixdate), now + retry_after_s
};

struct MockRequest {
  std::string server;  // "hub" or "cdn"
  std::string method, path, range, authorization;
  int status = 0;
};

class MockHub {
 public:
  struct Options {
    bool cdn_https = true;                 // the CDN speaks TLS with a certificate made at start
    std::string token = "hf_mock_token";   // the one token gated repositories accept
    std::string unaccepted_token = "hf_mock_no_licence";  // a valid account that did not accept the licence (403)
    std::string cert_dir;                  // where cert.pem / key.pem are written (cdn_https)
    std::string host = "127.0.0.1";
    int port = 0;                          // the hub's port (0: any)
  };
  static std::unique_ptr<MockHub> start(const Options& options);
  ~MockHub();

  void add_repo(MockRepo repo);
  std::string endpoint() const;            // http://127.0.0.1:PORT
  std::string ca_file() const;             // the CDN's certificate (its own CA), "" without TLS
  void set_faults(const MockFaults& f);
  std::vector<MockRequest> requests() const;
  void clear_requests();

  // The git blob id the Hub gives a small file (sha1 of "blob <size>\0<contents>").
  static std::string git_blob_id(const std::string& contents);
  static bool is_lfs(const std::string& path) { return path.size() > 12 && path.ends_with(".safetensors"); }

  struct Impl;

 private:
  explicit MockHub(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// A self-signed certificate (its own CA) for 127.0.0.1 and localhost, valid for a day, and its
// P-256 key, written as PEM; false with `error` set when OpenSSL refuses.
bool write_test_certificate(const std::string& cert_path, const std::string& key_path, std::string& error);

}  // namespace kiln::testing
