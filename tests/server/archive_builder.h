// Tests' tar.gz archives built entry by entry with libarchive: plain ones, and what a hostile
// client could send (links, devices, absolute and ".." names) that no well-behaved tar writes.
#pragma once

#include <archive.h>
#include <archive_entry.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>

#include <string>
#include <utility>
#include <vector>

namespace kiln::testing {

struct ArchiveEntry {
  enum class Kind { kFile, kFolder, kSymlink, kHardlink, kDevice };
  ArchiveEntry(std::string path, std::string data = "", Kind kind = Kind::kFile, std::string target = "")
      : path(std::move(path)), data(std::move(data)), kind(kind), target(std::move(target)) {}
  std::string path;
  std::string data;  // kFile: the contents
  Kind kind = Kind::kFile;
  std::string target;  // links: what they point at
};

inline la_ssize_t append_to_string(archive*, void* out, const void* buf, size_t n) {
  static_cast<std::string*>(out)->append(static_cast<const char*>(buf), n);
  return static_cast<la_ssize_t>(n);
}

inline std::string make_tar_gz(const std::vector<ArchiveEntry>& entries) {
  std::string out;
  archive* a = archive_write_new();
  archive_write_set_format_pax_restricted(a);
  archive_write_add_filter_gzip(a);
  archive_write_set_bytes_in_last_block(a, 1);
  archive_write_open2(a, &out, nullptr, append_to_string, nullptr, nullptr);
  for (const ArchiveEntry& e : entries) {
    archive_entry* h = archive_entry_new();
    archive_entry_set_pathname(h, e.path.c_str());
    archive_entry_set_perm(h, 0644);
    switch (e.kind) {
      case ArchiveEntry::Kind::kFile:
        archive_entry_set_filetype(h, AE_IFREG);
        archive_entry_set_size(h, static_cast<la_int64_t>(e.data.size()));
        break;
      case ArchiveEntry::Kind::kFolder: archive_entry_set_filetype(h, AE_IFDIR); break;
      case ArchiveEntry::Kind::kSymlink:
        archive_entry_set_filetype(h, AE_IFLNK);
        archive_entry_set_symlink(h, e.target.c_str());
        break;
      case ArchiveEntry::Kind::kHardlink:
        archive_entry_set_filetype(h, AE_IFREG);
        archive_entry_set_hardlink(h, e.target.c_str());
        break;
      case ArchiveEntry::Kind::kDevice:
        archive_entry_set_filetype(h, AE_IFCHR);
        archive_entry_set_rdev(h, makedev(1, 3));
        break;
    }
    archive_write_header(a, h);
    if (!e.data.empty()) archive_write_data(a, e.data.data(), e.data.size());
    archive_entry_free(h);
  }
  archive_write_close(a);
  archive_write_free(a);
  return out;
}

}  // namespace kiln::testing
