// Adapter archives (extract_tar_gz, what POST /v1/adapters/upload unpacks). The first byte chooses
// what the rest is: odd, a tar that is gzipped here so mutations reach the tar reader; even, the
// gzip bytes as sent. What it accepts must survive the writer: archived by TarGzStream and
// extracted again, the same files.
#include <unistd.h>
#include <zlib.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <string>

#include "fuzz_target.h"
#include "server/tar_gz.h"

namespace fs = std::filesystem;

namespace {

// One gzip member holding `raw`.
std::string gzip(std::string_view raw) {
  z_stream z{};
  deflateInit2(&z, Z_BEST_SPEED, Z_DEFLATED, 15 + 16, 8, Z_DEFAULT_STRATEGY);
  std::string out(deflateBound(&z, raw.size()) + 64, '\0');
  z.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(raw.data()));
  z.avail_in = static_cast<uInt>(raw.size());
  z.next_out = reinterpret_cast<Bytef*>(out.data());
  z.avail_out = static_cast<uInt>(out.size());
  deflate(&z, Z_FINISH);
  out.resize(z.total_out);
  deflateEnd(&z);
  return out;
}

void write(const fs::path& p, std::string_view bytes) {
  std::ofstream(p, std::ios::binary | std::ios::trunc).write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

// A folder's files by name.
std::map<std::string, std::string> files_in(const fs::path& dir) {
  std::map<std::string, std::string> out;
  for (const auto& e : fs::directory_iterator(dir)) {
    std::ifstream in(e.path(), std::ios::binary);
    out[e.path().filename().string()] = std::string(std::istreambuf_iterator<char>(in), {});
  }
  return out;
}

// A scratch folder of this process, emptied for each input.
fs::path scratch() {
  static const fs::path root = [] {
    const fs::path shm = "/dev/shm";
    const fs::path base = fs::is_directory(shm) ? shm : fs::temp_directory_path();
    return base / ("kiln_tar_gz_fuzz_" + std::to_string(::getpid()));
  }();
  fs::remove_all(root);
  fs::create_directories(root / "a");
  fs::create_directories(root / "b");
  return root;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  constexpr uint64_t kMaxBytes = 4 << 20;
  const std::string_view rest = kiln::fuzz::as_text(data + 1, size - 1);
  const fs::path root = scratch();
  write(root / "in.tar.gz", data[0] & 1 ? gzip(rest) : std::string(rest));
  auto n = kiln::extract_tar_gz((root / "in.tar.gz").string(), (root / "a").string(), kMaxBytes);
  if (n.ok()) {
    const auto files = files_in(root / "a");
    kiln::fuzz::expect(files.size() == *n, "as many files written as the extraction says");
    auto stream = kiln::TarGzStream::open((root / "a").string());
    kiln::fuzz::expect(stream.ok(), "an extracted folder can be archived");
    std::string archive;
    for (;;) {
      auto more = (*stream)->next(archive);
      kiln::fuzz::expect(more.ok(), "archiving an extracted folder succeeds");
      if (!*more) break;
    }
    write(root / "out.tar.gz", archive);
    auto again = kiln::extract_tar_gz((root / "out.tar.gz").string(), (root / "b").string(), kMaxBytes);
    kiln::fuzz::expect(again.ok(), "a written archive extracts again");
    kiln::fuzz::expect(files_in(root / "b") == files, "the same files, names and bytes");
  }
  fs::remove_all(root);
  return 0;
}
