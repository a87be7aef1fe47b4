// `kiln model pull`: a model's serving files fetched from the Hub (or a mirror, HF_ENDPOINT) into
// the Hugging Face cache, as huggingface_hub fetches them: the revision's commit and file list from
// /api/models/ORG/NAME/revision/REV, each file's metadata by HEAD on /ORG/NAME/resolve/COMMIT/PATH,
// its bytes by GET from there or the CDN it redirects to. Large (LFS) files stream into
// blobs/<sha256>.incomplete, resume with a Range request and are hashed before the blob is put in
// place; everything is retried with backoff (Retry-After honoured).
#pragma once

#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "core/status.h"
#include "hub/http_client.h"
#include "hub/hub_settings.h"
#include "hub/repo_ref.h"

namespace kiln::hub {

struct PullOptions {
  int jobs = 4;                          // weight shards fetched at once
  int max_attempts = 5;                  // tries of one request before the pull fails
  double backoff_s = 1.0;                // the first wait between tries, doubled each time (at most 30 s)
  double max_retry_after_s = 60;         // a longer Retry-After is cut to this
  bool verify_cached = true;             // hash LFS blobs already present against their names
  uint64_t disk_reserve_bytes = 256ull << 20;  // free space left over after the pull
  std::FILE* log = stderr;               // progress and notes; null: silent
  bool terminal = false;                 // redraw the progress line in place
  HttpLimits http;
};

struct PullResult {
  std::string commit;
  std::string snapshot_dir;
  std::vector<std::string> files;  // the snapshot's files this pull made sure of
  std::vector<std::string> absent; // files Kiln reads when present that the commit lacks (.no_exist markers)
  int fetched = 0;                 // files whose bytes came over the network
  uint64_t fetched_bytes = 0;
};

// Limits on what the remote controls.
inline constexpr size_t kMaxRevisionInfoBytes = 32u << 20;
inline constexpr size_t kMaxSiblings = 100000;
inline constexpr size_t kMaxShards = 4096;
inline constexpr uint64_t kMaxFileBytes = 1ull << 40;        // one LFS file
inline constexpr uint64_t kMaxSmallFileBytes = 256ull << 20;  // one file outside LFS

Result<PullResult> pull_model(const HubSettings& settings, const RepoRef& ref, const PullOptions& options);

}  // namespace kiln::hub
