// The Hugging Face cache as huggingface_hub lays it out, read and written:
//   <cache>/models--ORG--NAME/blobs/<etag>                  file contents, named by ETag (sha256 for LFS files)
//   <cache>/models--ORG--NAME/blobs/<etag>.incomplete       a download in progress (resumed from its size)
//   <cache>/models--ORG--NAME/snapshots/<commit>/<path>     relative symlinks to ../../blobs/<etag>
//   <cache>/models--ORG--NAME/refs/<revision>               the commit a branch or tag named when fetched
//   <cache>/models--ORG--NAME/.no_exist/<commit>/<path>     an empty file: <path> does not exist at <commit>
//   <cache>/.locks/models--ORG--NAME/<etag>.lock            flock(2) held while a blob is written
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/status.h"
#include "hub/repo_ref.h"

namespace kiln::hub {

class HfCache {
 public:
  explicit HfCache(std::string cache_dir) : dir_(std::move(cache_dir)) {}
  const std::string& dir() const { return dir_; }

  std::string repo_dir(const RepoRef& ref) const { return dir_ + "/" + ref.folder(); }
  std::string snapshot_dir(const RepoRef& ref, const std::string& commit) const;
  std::string blob_path(const RepoRef& ref, const std::string& etag) const;

  // The commit `ref.revision` names here: itself when a commit hash, else refs/<revision>'s
  // contents; kNotFound when the cache has no such ref.
  Result<std::string> commit_of(const RepoRef& ref) const;
  Status write_ref(const RepoRef& ref, const std::string& commit) const;

  // snapshots/<commit>/<path> pointing at blobs/<etag> (a relative link, replaced atomically).
  Status link(const RepoRef& ref, const std::string& commit, const std::string& path, const std::string& etag) const;

  // The .no_exist marker huggingface_hub leaves for a file a commit lacks (an empty file, so that
  // an optional file is not asked for again). Writing one is idempotent.
  std::string no_exist_path(const RepoRef& ref, const std::string& commit, const std::string& path) const;
  Status mark_absent(const RepoRef& ref, const std::string& commit, const std::string& path) const;
  bool known_absent(const RepoRef& ref, const std::string& commit, const std::string& path) const;

  struct Revision {
    std::string commit;
    std::vector<std::string> refs;  // the refs naming it ("main", "refs/pr/1")
    std::string dir;                // the snapshot folder
    uint64_t bytes = 0;             // the blobs its files point at
  };
  struct Repo {
    std::string id;      // "ORG/NAME"
    std::string dir;
    uint64_t bytes = 0;  // every blob, partial downloads included
    std::vector<Revision> revisions;
  };
  // Every model repository of the cache (datasets and spaces are not listed).
  Result<std::vector<Repo>> list() const;

  // ref without "@REVISION": the whole repository folder. With one: that snapshot, its .no_exist
  // markers and the refs naming it, then every blob no remaining snapshot points at. Returns the
  // bytes freed.
  Result<uint64_t> remove(const RepoRef& ref) const;

 private:
  std::string dir_;
};

// An ETag as huggingface_hub stores it: "W/" and quotes removed. kInvalidArgument unless the
// result is 1-128 characters of [A-Za-z0-9._-] (it becomes a file name).
Result<std::string> normalize_etag(const std::string& etag);

// An exclusive flock(2) on a lock file, released when destroyed.
class FileLock {
 public:
  static Result<FileLock> acquire(const std::string& path);
  FileLock(FileLock&& o) noexcept : fd_(o.fd_) { o.fd_ = -1; }
  FileLock& operator=(FileLock&&) = delete;
  ~FileLock();

 private:
  explicit FileLock(int fd) : fd_(fd) {}
  int fd_ = -1;
};

}  // namespace kiln::hub
