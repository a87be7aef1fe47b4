// server/tar_gz against the system's tar and against hostile archives: what `tar -czf` writes of a
// flat folder extracts byte for byte and what TarGzStream writes, `tar` reads back (the same bytes
// each time, in bounded pieces); links, devices, absolute and ".." names, nested folders and
// duplicates are refused naming the entry, before anything lands outside the folder; the size cap
// stops a gzip bomb; an archive cut short is a format error.
#include "server/tar_gz.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <map>

#include "server/archive_builder.h"

namespace kiln {
namespace {

namespace fs = std::filesystem;
using testing::ArchiveEntry;

struct TempDir {
  fs::path path;
  TempDir() {
    char tmpl[] = "/tmp/kiln-targz-XXXXXX";
    path = ::mkdtemp(tmpl);
  }
  ~TempDir() { fs::remove_all(path); }
};

std::string file_bytes(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

void write_bytes(const fs::path& path, const std::string& bytes) { std::ofstream(path, std::ios::binary) << bytes; }

std::map<std::string, std::string> folder_files(const fs::path& dir) {
  std::map<std::string, std::string> out;
  for (const auto& e : fs::directory_iterator(dir)) out[e.path().filename().string()] = file_bytes(e.path());
  return out;
}

// Bytes that gzip cannot shrink.
std::string noise(size_t n, uint32_t seed) {
  std::string s(n, '\0');
  for (size_t i = 0; i < n; ++i) {
    seed = seed * 1664525u + 1013904223u;
    s[i] = static_cast<char>(seed >> 24);
  }
  return s;
}

// Extracts `archive` (bytes) into a fresh folder `out` inside `t`.
Result<size_t> extract(const TempDir& t, const std::string& archive, uint64_t max_bytes = 1 << 20) {
  write_bytes(t.path / "in.tar.gz", archive);
  fs::remove_all(t.path / "out");
  fs::create_directories(t.path / "out");
  return extract_tar_gz((t.path / "in.tar.gz").string(), (t.path / "out").string(), max_bytes);
}

TEST(TarGz, WhatTarWritesOfAFlatFolderExtractsByteForByte) {
  TempDir t;
  fs::create_directories(t.path / "flat");
  const std::string big = noise(100000, 7);
  write_bytes(t.path / "flat" / "a.json", "{\"x\": 1}");
  write_bytes(t.path / "flat" / "b.bin", big);
  const std::map<std::string, std::string> want = {{"a.json", "{\"x\": 1}"}, {"b.bin", big}};
  // Under one top-level folder, and as "./" entries.
  for (const std::string args : {"-czf flat.tgz flat", "-czf flat.tgz -C flat ."}) {
    ASSERT_EQ(std::system(("cd " + t.path.string() + " && tar " + args).c_str()), 0);
    auto n = extract(t, file_bytes(t.path / "flat.tgz"));
    ASSERT_TRUE(n.ok()) << args << ": " << n.status().to_string();
    EXPECT_EQ(*n, 2u);
    EXPECT_EQ(folder_files(t.path / "out"), want) << args;
  }
}

TEST(TarGz, LinksDevicesEscapesNestingAndDuplicatesAreRefusedNamingTheEntry) {
  using K = ArchiveEntry::Kind;
  struct Case {
    std::vector<ArchiveEntry> entries;
    std::string named;  // the entry the error names
    bool lands_nothing = true;  // else an earlier, valid entry of that name is there
  };
  const std::vector<Case> cases = {
      {{{"link", "", K::kSymlink, "/etc/passwd"}}, "link"},
      {{{"a", "x"}, {"hard", "", K::kHardlink, "a"}}, "hard"},
      {{{"null", "", K::kDevice}}, "null"},
      {{{"/tmp/abs", "x"}}, "/tmp/abs"},
      {{{"../escape", "x"}}, "../escape"},
      {{{"dir/../../escape", "x"}}, "dir/../../escape"},
      {{{"dir/sub/c", "x"}}, "dir/sub/c"},
      {{{"one/a", "x"}, {"two/b", "x"}}, "two/b"},
      {{{"a", "x"}, {"./a", "y"}}, "./a", false},
  };
  for (const Case& c : cases) {
    TempDir t;
    auto n = extract(t, testing::make_tar_gz(c.entries));
    ASSERT_FALSE(n.ok()) << c.named;
    EXPECT_EQ(n.status().code(), ErrorCode::kInvalidArgument) << c.named << ": " << n.status().to_string();
    EXPECT_NE(n.status().message().find("'" + c.named + "'"), std::string::npos) << n.status().message();
    EXPECT_FALSE(fs::exists(t.path / "escape")) << c.named;
    if (c.lands_nothing) {
      EXPECT_FALSE(fs::exists(t.path / "out" / c.named)) << c.named;
    }
  }
}

TEST(TarGz, ExtractionStopsAtMaxBytesAGzipBombIncluded) {
  TempDir t;
  const std::string files = noise(3000, 1);
  auto fits = extract(t, testing::make_tar_gz({{"a", files}, {"b", files}}), 6000);
  ASSERT_TRUE(fits.ok()) << fits.status().to_string();
  auto over = extract(t, testing::make_tar_gz({{"a", files}, {"b", files}}), 5999);
  ASSERT_FALSE(over.ok());
  EXPECT_EQ(over.status().code(), ErrorCode::kResourceExhausted);
  EXPECT_NE(over.status().message().find("more than 5999 bytes"), std::string::npos) << over.status().message();
  // 64 MiB of zeros in well under 1 MiB of gzip.
  const std::string bomb = testing::make_tar_gz({{"zeros", std::string(64 << 20, '\0')}});
  ASSERT_LT(bomb.size(), 1u << 20);
  auto stopped = extract(t, bomb, 1 << 20);
  EXPECT_EQ(stopped.status().code(), ErrorCode::kResourceExhausted) << stopped.status().to_string();
}

TEST(TarGz, AnArchiveCutShortOrNotGzipIsAFormatError) {
  TempDir t;
  const std::string whole = testing::make_tar_gz({{"a", noise(50000, 3)}, {"b", noise(50000, 4)}});
  auto cut = extract(t, whole.substr(0, whole.size() / 2));
  EXPECT_EQ(cut.status().code(), ErrorCode::kFormatError) << cut.status().to_string();
  // A gzip stream without its 8-byte trailer: libarchive fails to open it and gives no reason.
  const std::string small = testing::make_tar_gz({{"a", "abc"}});
  for (size_t drop : {4, 8}) {
    auto no_trailer = extract(t, small.substr(0, small.size() - drop));
    EXPECT_EQ(no_trailer.status().code(), ErrorCode::kFormatError) << no_trailer.status().to_string();
    EXPECT_NE(no_trailer.status().message().find("not tar.gz data"), std::string::npos) << no_trailer.status().to_string();
  }
  auto junk = extract(t, "not an archive");
  EXPECT_EQ(junk.status().code(), ErrorCode::kFormatError) << junk.status().to_string();
  auto empty = extract(t, testing::make_tar_gz({}));
  EXPECT_EQ(empty.status().code(), ErrorCode::kInvalidArgument) << empty.status().to_string();
}

// Everything a stream gives, and the largest piece.
std::pair<std::string, size_t> drain(TarGzStream& s) {
  std::string all;
  size_t largest = 0;
  for (;;) {
    std::string piece;
    auto more = s.next(piece);
    EXPECT_TRUE(more.ok()) << more.status().to_string();
    largest = std::max(largest, piece.size());
    all += piece;
    if (!more.ok() || !*more) return {all, largest};
  }
}

TEST(TarGz, TheStreamWritesWhatTarReadsTheSameBytesEachTimeInBoundedPieces) {
  TempDir t;
  fs::create_directories(t.path / "adapter");
  const std::map<std::string, std::string> files = {
      {"adapter_config.json", "{}"}, {"adapter_model.safetensors", noise(600000, 5)}, {"empty", ""}};
  for (const auto& [name, bytes] : files) write_bytes(t.path / "adapter" / name, bytes);
  auto s = TarGzStream::open((t.path / "adapter").string());
  ASSERT_TRUE(s.ok()) << s.status().to_string();
  const auto [archive, largest] = drain(**s);
  EXPECT_GT(archive.size(), 600000u);
  EXPECT_LE(largest, 128u << 10) << "the archive comes in pieces, not whole";
  auto again = TarGzStream::open((t.path / "adapter").string());
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(drain(**again).first, archive);

  write_bytes(t.path / "a.tgz", archive);
  fs::create_directories(t.path / "x");
  const std::string cmd = "tar -xzf " + (t.path / "a.tgz").string() + " -C " + (t.path / "x").string() +
                          " && tar -tzf " + (t.path / "a.tgz").string() + " > " + (t.path / "list").string();
  ASSERT_EQ(std::system(cmd.c_str()), 0);
  EXPECT_EQ(file_bytes(t.path / "list"), "adapter_config.json\nadapter_model.safetensors\nempty\n");
  EXPECT_EQ(folder_files(t.path / "x"), files);

  fs::create_directories(t.path / "adapter" / "sub");
  auto nested = TarGzStream::open((t.path / "adapter").string());
  ASSERT_FALSE(nested.ok());
  EXPECT_NE(nested.status().message().find("'sub'"), std::string::npos) << nested.status().message();
}

}  // namespace
}  // namespace kiln
