#include "server/tar_gz.h"

#include <zlib.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

namespace kiln {

namespace {

constexpr size_t kBlock = 512;

void put_octal(char* field, size_t width, uint64_t value) {
  // width - 1 octal digits and a NUL, as ustar writes numbers.
  std::string digits(width - 1, '0');
  for (size_t i = width - 1; i-- > 0 && value > 0; value >>= 3) digits[i] = static_cast<char>('0' + (value & 7));
  std::memcpy(field, digits.data(), width - 1);
  field[width - 1] = '\0';
}

std::string header(const std::string& name, uint64_t size) {
  std::string h(kBlock, '\0');
  std::memcpy(&h[0], name.data(), std::min<size_t>(name.size(), 100));
  put_octal(&h[100], 8, 0644);
  put_octal(&h[108], 8, 0);
  put_octal(&h[116], 8, 0);
  put_octal(&h[124], 12, size);
  put_octal(&h[136], 12, 0);
  h[156] = '0';
  std::memcpy(&h[257], "ustar", 6);  // magic "ustar\0"
  h[263] = '0';
  h[264] = '0';
  std::memset(&h[148], ' ', 8);  // the checksum counts its own field as spaces
  unsigned sum = 0;
  for (unsigned char c : h) sum += c;
  put_octal(&h[148], 7, sum);
  h[155] = ' ';
  return h;
}

Result<std::string> gunzip(std::string_view gz, uint64_t max_bytes) {
  z_stream z{};
  if (inflateInit2(&z, 15 + 32) != Z_OK) return internal_error("zlib: inflateInit2 failed");
  z.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(gz.data()));
  z.avail_in = static_cast<uInt>(gz.size());
  std::string out;
  char buf[1 << 16];
  int rc = Z_OK;
  while (rc != Z_STREAM_END) {
    z.next_out = reinterpret_cast<Bytef*>(buf);
    z.avail_out = sizeof buf;
    rc = inflate(&z, Z_NO_FLUSH);
    if (rc != Z_OK && rc != Z_STREAM_END) {
      const std::string why = z.msg ? z.msg : ("zlib error " + std::to_string(rc));
      inflateEnd(&z);
      return format_error("the archive is not valid gzip data: " + why);
    }
    out.append(buf, sizeof buf - z.avail_out);
    if (out.size() > max_bytes) {
      inflateEnd(&z);
      return invalid_argument("the archive holds more than " + std::to_string(max_bytes) + " bytes uncompressed");
    }
    if (rc == Z_OK && z.avail_in == 0 && z.avail_out != 0) {
      inflateEnd(&z);
      return format_error("the gzip data ends early");
    }
  }
  inflateEnd(&z);
  return out;
}

Result<uint64_t> read_octal(const char* field, size_t width, const std::string& entry) {
  uint64_t v = 0;
  size_t i = 0;
  while (i < width && field[i] == ' ') ++i;
  for (; i < width && field[i] >= '0' && field[i] <= '7'; ++i) v = (v << 3) | static_cast<uint64_t>(field[i] - '0');
  if (i < width && field[i] != '\0' && field[i] != ' ')
    return format_error("tar entry '" + entry + "': a numeric field is not octal (base-256 sizes are not supported)");
  return v;
}

bool plain_name(const std::string& n) {
  return !n.empty() && n != "." && n != ".." && n.find('/') == std::string::npos && n.find('\\') == std::string::npos;
}

}  // namespace

std::string gzip_bytes(std::string_view raw) {
  z_stream z{};
  deflateInit2(&z, Z_DEFAULT_COMPRESSION, Z_DEFLATED, 15 + 16, 8, Z_DEFAULT_STRATEGY);
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

std::string write_tar_gz(const std::vector<ArchiveFile>& files) {
  std::vector<const ArchiveFile*> order;
  for (const auto& f : files) order.push_back(&f);
  std::sort(order.begin(), order.end(), [](auto* a, auto* b) { return a->name < b->name; });
  std::string tar;
  for (const ArchiveFile* f : order) {
    tar += header(f->name, f->data.size());
    tar += f->data;
    tar.append((kBlock - f->data.size() % kBlock) % kBlock, '\0');
  }
  tar.append(2 * kBlock, '\0');
  return gzip_bytes(tar);
}

Result<std::vector<ArchiveFile>> read_tar_gz(std::string_view gz, uint64_t max_bytes) {
  KILN_ASSIGN_OR_RETURN(std::string tar, gunzip(gz, max_bytes));
  std::vector<ArchiveFile> files;
  std::string folder;  // the one top-level folder entries may sit in
  bool first = true;
  for (size_t pos = 0; pos + kBlock <= tar.size();) {
    const char* h = tar.data() + pos;
    if (std::all_of(h, h + kBlock, [](char c) { return c == '\0'; })) break;  // end of archive
    std::string name(h, strnlen(h, 100));
    const std::string prefix(h + 345, strnlen(h + 345, 155));
    if (std::memcmp(h + 257, "ustar", 5) == 0 && !prefix.empty()) name = prefix + "/" + name;
    unsigned sum = 0;
    for (size_t i = 0; i < kBlock; ++i) sum += (i >= 148 && i < 156) ? ' ' : static_cast<unsigned char>(h[i]);
    KILN_ASSIGN_OR_RETURN(uint64_t stored, read_octal(h + 148, 8, name));
    if (stored != sum) return format_error("tar entry '" + name + "': header checksum mismatch");
    KILN_ASSIGN_OR_RETURN(uint64_t size, read_octal(h + 124, 12, name));
    const char type = h[156];
    pos += kBlock;
    if (size > tar.size() - pos) return format_error("tar entry '" + name + "' runs past the end of the archive");
    const std::string data = tar.substr(pos, size);
    pos += (size + kBlock - 1) / kBlock * kBlock;
    if (type == 'x' || type == 'g') continue;  // pax attributes: names here are short, nothing needed
    while (name.rfind("./", 0) == 0) name = name.substr(2);
    if (type == '5') {
      while (!name.empty() && name.back() == '/') name.pop_back();
      if (name.empty() || name == ".") continue;
      if (!plain_name(name) || (!first && folder != name))
        return invalid_argument("tar entry '" + name + "/': an adapter archive holds one flat folder");
      folder = name;
      first = false;
      continue;
    }
    if (type != '0' && type != '\0')
      return invalid_argument("tar entry '" + name + "': only regular files may be in an adapter archive (type '" +
                              std::string(1, type) + "')");
    const size_t slash = name.find('/');
    if (slash != std::string::npos) {
      const std::string dir = name.substr(0, slash);
      if (!first && folder != dir) return invalid_argument("tar entry '" + name + "': entries lie in more than one folder");
      folder = dir;
      name = name.substr(slash + 1);
    } else if (!folder.empty()) {
      return invalid_argument("tar entry '" + name + "': entries lie in more than one folder");
    }
    first = false;
    if (!plain_name(folder.empty() ? "x" : folder) || !plain_name(name))
      return invalid_argument("tar entry '" + name + "': not a plain file name (no '..', '/' or nested folders)");
    for (const auto& f : files)
      if (f.name == name) return invalid_argument("tar entry '" + name + "' appears twice");
    files.push_back({name, data});
  }
  if (files.empty()) return invalid_argument("the archive holds no files");
  return files;
}

Result<std::vector<ArchiveFile>> read_flat_directory(const std::string& dir) {
  namespace fs = std::filesystem;
  std::error_code ec;
  std::vector<ArchiveFile> files;
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    const std::string name = e.path().filename().string();
    if (!e.is_regular_file()) return unsupported(dir + ": '" + name + "' is not a regular file");
    std::ifstream in(e.path(), std::ios::binary);
    std::ostringstream data;
    data << in.rdbuf();
    if (!in) return io_error("cannot read " + e.path().string());
    files.push_back({name, data.str()});
  }
  if (ec) return io_error(dir + ": " + ec.message());
  std::sort(files.begin(), files.end(), [](const auto& a, const auto& b) { return a.name < b.name; });
  return files;
}

}  // namespace kiln
