// Adapter archives (read_tar_gz, what POST /v1/adapters/upload reads). The first byte chooses
// what the rest is: odd, a tar that is gzipped here so mutations reach the tar reader; even, the
// gzip bytes as sent. What it accepts must survive the writer: written and read back, the same
// files.
#include <string>
#include <vector>

#include "fuzz_target.h"
#include "server/tar_gz.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  constexpr uint64_t kMaxBytes = 4 << 20;
  const std::string_view rest = kiln::fuzz::as_text(data + 1, size - 1);
  const std::string gz = data[0] & 1 ? kiln::gzip_bytes(rest) : std::string(rest);
  auto files = kiln::read_tar_gz(gz, kMaxBytes);
  if (!files.ok()) return 0;
  auto again = kiln::read_tar_gz(kiln::write_tar_gz(*files), kMaxBytes + 1024 * (files->size() + 2));
  kiln::fuzz::expect(again.ok(), "a written archive reads back");
  kiln::fuzz::expect(again->size() == files->size(), "the same number of files");
  for (const kiln::ArchiveFile& f : *files) {
    bool found = false;
    for (const kiln::ArchiveFile& g : *again) found |= g.name == f.name && g.data == f.data;
    kiln::fuzz::expect(found, "every file reads back with its name and bytes");
  }
  return 0;
}
