#include "qualify/atomic_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

namespace kiln::qualify {

Status write_new_file_atomically(const std::string& path, std::string_view contents) {
  std::filesystem::path target(path);
  std::string dir = target.parent_path().empty() ? "." : target.parent_path().string();
  std::string tmpl = dir + "/." + target.filename().string() + ".tmp-XXXXXX";
  int fd = mkstemp(tmpl.data());
  if (fd < 0) return io_error("cannot create a temporary file in " + dir + ": " + std::strerror(errno));
  size_t written = 0;
  while (written < contents.size()) {
    ssize_t n = write(fd, contents.data() + written, contents.size() - written);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      int err = errno;
      close(fd);
      unlink(tmpl.c_str());
      return io_error("writing " + tmpl + ": " + std::strerror(err));
    }
    written += static_cast<size_t>(n);
  }
  if (fsync(fd) != 0 || close(fd) != 0) {
    unlink(tmpl.c_str());
    return io_error("flushing " + tmpl + " failed");
  }
  chmod(tmpl.c_str(), 0644);
  if (link(tmpl.c_str(), path.c_str()) != 0) {
    int err = errno;
    unlink(tmpl.c_str());
    if (err == EEXIST) return failed_precondition(path + " already exists; it is never overwritten");
    return io_error("publishing " + path + ": " + std::strerror(err));
  }
  unlink(tmpl.c_str());
  int dfd = open(dir.c_str(), O_RDONLY | O_DIRECTORY);
  if (dfd >= 0) {
    fsync(dfd);
    close(dfd);
  }
  return Status::ok_status();
}

}  // namespace kiln::qualify
