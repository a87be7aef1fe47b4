#include "core/atomic_publish.h"

#include <fcntl.h>
#include <stdio.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <mutex>
#include <random>

namespace kiln {

namespace {

namespace fs = std::filesystem;

constexpr size_t kSuffixDigits = 16;

std::mutex& hook_mutex() {
  static std::mutex m;
  return m;
}

PublishFaultHook& hook() {
  static PublishFaultHook h;
  return h;
}

// Asks the test hook, if any, whether `step` may run.
Status enter(PublishStep step, const std::string& target) {
  PublishFaultHook h;
  {
    std::lock_guard<std::mutex> lock(hook_mutex());
    h = hook();
  }
  return h ? h(step, target) : Status();
}

std::string errno_text() { return std::strerror(errno); }

std::string random_suffix() {
  static thread_local std::mt19937_64 rng{std::random_device{}()};
  char buf[kSuffixDigits + 1];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(rng()));
  return buf;
}

std::string parent_of(const std::string& path) {
  const fs::path p = fs::path(path).parent_path();
  return p.empty() ? "." : p.string();
}

Status check_name(const std::string& name) {
  if (name.empty() || name == "." || name == ".." || name.find('/') != std::string::npos)
    return invalid_argument("'" + name + "' is not a file or folder name");
  return {};
}

Status sync_path(const std::string& path, bool folder) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | (folder ? O_DIRECTORY : 0));
  if (fd < 0) return io_error("cannot open " + path + " to sync it: " + errno_text());
  const bool ok = ::fsync(fd) == 0;
  const std::string why = ok ? "" : errno_text();
  ::close(fd);
  if (!ok) return io_error("cannot sync " + path + ": " + why);
  return {};
}

// Every file and folder under `dir`, then `dir` itself.
Status sync_tree(const std::string& dir) {
  std::error_code ec;
  for (const auto& e : fs::recursive_directory_iterator(dir, ec)) {
    if (e.is_symlink()) continue;
    if (e.is_regular_file() || e.is_directory()) KILN_RETURN_IF_ERROR(sync_path(e.path().string(), e.is_directory()));
  }
  if (ec) return io_error("cannot list " + dir + ": " + ec.message());
  return sync_path(dir, true);
}

Status sync_parent(const std::string& parent) {
  KILN_RETURN_IF_ERROR(enter(PublishStep::kSyncParent, parent));
  return sync_path(parent, true);
}

// rename(2) that never replaces `to`: kFailedPrecondition when it exists.
Status rename_no_replace(const std::string& from, const std::string& to) {
  if (::renameat2(AT_FDCWD, from.c_str(), AT_FDCWD, to.c_str(), RENAME_NOREPLACE) == 0) return {};
  if (errno == EINVAL) {  // a filesystem without RENAME_NOREPLACE: check, then rename
    std::error_code ec;
    if (!fs::exists(to, ec) && ::rename(from.c_str(), to.c_str()) == 0) return {};
    if (!fs::exists(to, ec)) return io_error("cannot rename " + from + " to " + to + ": " + errno_text());
    errno = EEXIST;
  }
  if (errno == EEXIST || errno == ENOTEMPTY) return failed_precondition(to + " already exists; it is never overwritten");
  return io_error("cannot rename " + from + " to " + to + ": " + errno_text());
}

bool starts_with(const std::string& s, std::string_view prefix) { return s.compare(0, prefix.size(), prefix) == 0; }

// The <name> of "<prefix><name>-<16 hex digits>", or "" when `entry` is not of that form.
std::string reserved_name_of(const std::string& entry, std::string_view prefix) {
  if (entry.size() < prefix.size() + kSuffixDigits + 2) return "";
  const size_t dash = entry.size() - kSuffixDigits - 1;
  if (entry[dash] != '-') return "";
  return entry.substr(prefix.size(), dash - prefix.size());
}

Status sweep_folder(const fs::path& dir, SweepResult& out) {
  std::error_code ec;
  std::vector<fs::path> entries;
  for (const auto& e : fs::directory_iterator(dir, ec)) entries.push_back(e.path());
  if (ec) return io_error("cannot list " + dir.string() + ": " + ec.message());
  bool changed = false;
  for (const fs::path& p : entries) {
    const std::string n = p.filename().string();
    if (starts_with(n, kFailedPrefix)) {
      out.kept.push_back(p.string());
      continue;
    }
    const bool replaced = starts_with(n, kReplacedPrefix);
    if (!replaced && !starts_with(n, kStagingPrefix) && !starts_with(n, kRemovedPrefix)) continue;
    changed = true;
    const std::string original = replaced ? reserved_name_of(n, kReplacedPrefix) : "";
    if (!original.empty() && check_name(original).ok() && !fs::exists(dir / original, ec)) {
      if (::rename(p.c_str(), (dir / original).c_str()) != 0)
        return io_error("cannot restore " + p.string() + " to " + (dir / original).string() + ": " + errno_text());
      out.restored.push_back((dir / original).string());
      continue;
    }
    fs::remove_all(p, ec);
    if (ec) return io_error("cannot remove the leftover " + p.string() + ": " + ec.message());
    out.removed.push_back(p.string());
  }
  return changed ? sync_path(dir.string(), true) : Status();
}

}  // namespace

const char* publish_step_name(PublishStep step) {
  switch (step) {
    case PublishStep::kSyncFiles: return "sync files";
    case PublishStep::kRename: return "rename";
    case PublishStep::kSyncParent: return "sync parent";
    case PublishStep::kRemoveReplaced: return "remove replaced";
  }
  return "?";
}

void set_publish_fault_hook(PublishFaultHook h) {
  std::lock_guard<std::mutex> lock(hook_mutex());
  hook() = std::move(h);
}

Status write_file_atomically(const std::string& path, const std::function<Status(const std::string&)>& write,
                             PublishMode mode) {
  const std::string parent = parent_of(path);
  const std::string name = fs::path(path).filename().string();
  KILN_RETURN_IF_ERROR(check_name(name));
  const std::string staged = parent + "/" + std::string(kStagingPrefix) + name + "-" + random_suffix();
  Status st = write(staged);
  if (st.ok()) st = enter(PublishStep::kSyncFiles, staged);
  if (st.ok()) st = sync_path(staged, false);
  if (st.ok()) st = enter(PublishStep::kRename, path);
  if (st.ok()) {
    if (mode == PublishMode::kCreateNew) st = rename_no_replace(staged, path);
    else if (::rename(staged.c_str(), path.c_str()) != 0)
      st = io_error("cannot rename " + staged + " to " + path + ": " + errno_text());
  }
  if (!st.ok()) {
    ::unlink(staged.c_str());
    return st;
  }
  if (Status synced = sync_parent(parent); !synced.ok())
    return synced.with_context(path + " is in place, but it may not survive a crash");
  return {};
}

Status write_file_atomically(const std::string& path, std::string_view contents, PublishMode mode) {
  return write_file_atomically(
      path,
      [contents](const std::string& staged) -> Status {
        const int fd = ::open(staged.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
        if (fd < 0) return io_error("cannot create " + staged + ": " + errno_text());
        for (size_t done = 0; done < contents.size();) {
          const ssize_t n = ::write(fd, contents.data() + done, contents.size() - done);
          if (n < 0 && errno == EINTR) continue;
          if (n <= 0) {
            const std::string why = errno_text();
            ::close(fd);
            return io_error("cannot write " + staged + ": " + why);
          }
          done += static_cast<size_t>(n);
        }
        if (::close(fd) != 0) return io_error("cannot write " + staged + ": " + errno_text());
        return {};
      },
      mode);
}

StagedFolder::StagedFolder(std::string parent, std::string name, std::string suffix)
    : parent_(std::move(parent)), name_(std::move(name)), suffix_(std::move(suffix)) {
  path_ = parent_ + "/" + std::string(kStagingPrefix) + name_ + "-" + suffix_;
}

StagedFolder::StagedFolder(StagedFolder&& other) noexcept
    : parent_(std::move(other.parent_)),
      name_(std::move(other.name_)),
      suffix_(std::move(other.suffix_)),
      path_(std::move(other.path_)),
      done_(other.done_) {
  other.done_ = true;
}

StagedFolder& StagedFolder::operator=(StagedFolder&& other) noexcept {
  if (this == &other) return *this;
  discard();
  parent_ = std::move(other.parent_);
  name_ = std::move(other.name_);
  suffix_ = std::move(other.suffix_);
  path_ = std::move(other.path_);
  done_ = other.done_;
  other.done_ = true;
  return *this;
}

StagedFolder::~StagedFolder() { discard(); }

void StagedFolder::discard() {
  if (done_) return;
  done_ = true;
  std::error_code ec;
  fs::remove_all(path_, ec);
}

Result<StagedFolder> StagedFolder::create(const std::string& parent, const std::string& name) {
  KILN_RETURN_IF_ERROR(check_name(name));
  std::error_code ec;
  fs::create_directories(parent, ec);
  if (ec) return io_error("cannot create the folder " + parent + ": " + ec.message());
  StagedFolder staged(parent, name, random_suffix());
  if (::mkdir(staged.path_.c_str(), 0755) != 0) {
    staged.done_ = true;  // not ours to remove
    return io_error("cannot create the staging folder " + staged.path_ + ": " + errno_text());
  }
  return staged;
}

std::string StagedFolder::destination() const { return parent_ + "/" + name_; }

Result<std::string> StagedFolder::publish(PublishMode mode) {
  if (done_) return failed_precondition(path_ + " was published or kept already");
  const std::string dest = destination();
  KILN_RETURN_IF_ERROR(enter(PublishStep::kSyncFiles, path_));
  KILN_RETURN_IF_ERROR(sync_tree(path_));
  KILN_RETURN_IF_ERROR(enter(PublishStep::kRename, dest));
  std::string replaced;  // where the old version is once the new one is in place
  if (mode == PublishMode::kCreateNew) {
    KILN_RETURN_IF_ERROR(rename_no_replace(path_, dest));
  } else if (::renameat2(AT_FDCWD, path_.c_str(), AT_FDCWD, dest.c_str(), RENAME_EXCHANGE) == 0) {
    replaced = path_;  // readers saw the old folder or the new one, never none
  } else if (errno == ENOENT) {
    if (::rename(path_.c_str(), dest.c_str()) != 0)
      return io_error("cannot rename " + path_ + " to " + dest + ": " + errno_text());
  } else if (errno == EINVAL) {
    // A filesystem that cannot exchange: the old version moves aside first. A crash between the
    // two renames leaves no destination; sweep_staging then puts the old version back.
    const std::string aside = parent_ + "/" + std::string(kReplacedPrefix) + name_ + "-" + suffix_;
    if (::rename(dest.c_str(), aside.c_str()) != 0)
      return io_error("cannot move the old " + dest + " aside: " + errno_text());
    if (::rename(path_.c_str(), dest.c_str()) != 0) {
      const std::string why = errno_text();
      (void)::rename(aside.c_str(), dest.c_str());
      return io_error("cannot rename " + path_ + " to " + dest + ": " + why);
    }
    replaced = aside;
  } else {
    return io_error("cannot exchange " + path_ + " with " + dest + ": " + errno_text());
  }
  done_ = true;
  const Status synced = sync_parent(parent_);
  // A deletion that fails or is cut short is finished by the next sweep.
  if (!replaced.empty() && enter(PublishStep::kRemoveReplaced, replaced).ok()) {
    std::error_code ec;
    fs::remove_all(replaced, ec);
  }
  if (!synced.ok()) return synced.with_context(dest + " is in place, but it may not survive a crash");
  return dest;
}

Result<std::string> StagedFolder::keep() {
  if (done_) return failed_precondition(path_ + " was published or kept already");
  const std::string kept = parent_ + "/" + std::string(kFailedPrefix) + name_ + "-" + suffix_;
  KILN_RETURN_IF_ERROR(enter(PublishStep::kRename, kept));
  if (::rename(path_.c_str(), kept.c_str()) != 0)
    return io_error("cannot rename " + path_ + " to " + kept + ": " + errno_text());
  done_ = true;
  (void)sync_parent(parent_);  // the files are there either way; only the name may not last
  return kept;
}

Status remove_published(const std::string& parent, const std::string& name) {
  KILN_RETURN_IF_ERROR(check_name(name));
  const std::string path = parent + "/" + name;
  std::error_code ec;
  if (!fs::exists(fs::symlink_status(path, ec))) return not_found(path + " does not exist");
  const std::string aside = parent + "/" + std::string(kRemovedPrefix) + name + "-" + random_suffix();
  KILN_RETURN_IF_ERROR(enter(PublishStep::kRename, aside));
  if (::rename(path.c_str(), aside.c_str()) != 0) return io_error("cannot remove " + path + ": " + errno_text());
  KILN_RETURN_IF_ERROR(sync_parent(parent));
  // Gone from its name already; a deletion cut short is finished by the next sweep.
  if (enter(PublishStep::kRemoveReplaced, aside).ok()) fs::remove_all(aside, ec);
  return {};
}

std::string SweepResult::summary() const {
  auto list = [](const std::vector<std::string>& v) {
    std::string s;
    for (const std::string& p : v) s += (s.empty() ? "" : ", ") + p;
    return s;
  };
  std::string out;
  auto add = [&](const std::vector<std::string>& v, const char* what) {
    if (!v.empty()) out += (out.empty() ? "" : "; ") + std::string(what) + " " + list(v);
  };
  add(removed, "removed the leftovers");
  add(restored, "restored");
  add(kept, "kept the failed publications");
  return out;
}

Result<SweepResult> sweep_staging(const std::string& dir) {
  SweepResult out;
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) return out;
  KILN_RETURN_IF_ERROR(sweep_folder(dir, out));
  std::vector<fs::path> inner;
  for (const auto& e : fs::directory_iterator(dir, ec))
    if (e.is_directory() && !e.is_symlink() && e.path().filename().string()[0] != '.') inner.push_back(e.path());
  if (ec) return io_error("cannot list " + dir + ": " + ec.message());
  for (const fs::path& d : inner) KILN_RETURN_IF_ERROR(sweep_folder(d, out));
  return out;
}

}  // namespace kiln
