#include "core/mapped_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace kiln {

Result<std::shared_ptr<MappedFile>> MappedFile::open(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    if (errno == ENOENT) return not_found(path + ": no such file");
    return io_error(path + ": " + std::strerror(errno));
  }
  struct stat st {};
  if (fstat(fd, &st) != 0) {
    Status s = io_error(path + ": " + std::strerror(errno));
    ::close(fd);
    return s;
  }
  size_t size = static_cast<size_t>(st.st_size);
  void* data = nullptr;
  if (size > 0) {
    data = mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd, 0);
    if (data == MAP_FAILED) {
      Status s = io_error(path + ": mmap failed: " + std::strerror(errno));
      ::close(fd);
      return s;
    }
  }
  ::close(fd);
  return std::shared_ptr<MappedFile>(new MappedFile(data, size, path));
}

MappedFile::~MappedFile() {
  if (data_ != nullptr) munmap(data_, bytes_);
}

}  // namespace kiln
