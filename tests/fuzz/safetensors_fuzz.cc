// A safetensors file's header and layout (Checkpoint::open_file on the real mmap path, the input
// written to a memfd). Every tensor it accepts must have dims >= 0 and lie inside the file: each
// is read whole.
#include <sys/mman.h>
#include <unistd.h>

#include <string>

#include "fuzz_target.h"
#include "model/safetensors.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const int fd = memfd_create("safetensors_fuzz", MFD_CLOEXEC);
  kiln::fuzz::expect(fd >= 0, "memfd_create works");
  for (size_t done = 0; done < size;) {
    const ssize_t n = write(fd, data + done, size - done);
    kiln::fuzz::expect(n > 0, "the memfd takes the input");
    done += static_cast<size_t>(n);
  }
  auto ckpt = kiln::Checkpoint::open_file("/proc/self/fd/" + std::to_string(fd));
  close(fd);
  if (!ckpt.ok()) return 0;
  unsigned sum = 0;  // kept in a volatile so the reads happen
  for (const auto& [name, entry] : ckpt->tensors()) {
    const kiln::Tensor& t = entry.tensor;
    for (int i = 0; i < t.shape().rank(); ++i) kiln::fuzz::expect(t.shape()[i] >= 0, "every dim is non-negative");
    kiln::fuzz::expect(t.offset_bytes() + t.nbytes() <= t.storage()->bytes(), "a tensor lies inside its file");
    const auto* bytes = static_cast<const unsigned char*>(t.raw());
    for (size_t i = 0; i < t.nbytes(); ++i) sum += bytes[i];
  }
  static volatile unsigned sink;
  sink = sum;
  return 0;
}
