#include "core/sha256.h"

#include <openssl/evp.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <memory>
#include <vector>

namespace kiln {
namespace {

struct MdCtxDeleter {
  void operator()(EVP_MD_CTX* ctx) const { EVP_MD_CTX_free(ctx); }
};
using MdCtx = std::unique_ptr<EVP_MD_CTX, MdCtxDeleter>;

std::string to_hex(const unsigned char* data, unsigned int n) {
  static const char kDigits[] = "0123456789abcdef";
  std::string out(n * 2, '0');
  for (unsigned int i = 0; i < n; ++i) {
    out[2 * i] = kDigits[data[i] >> 4];
    out[2 * i + 1] = kDigits[data[i] & 15];
  }
  return out;
}

MdCtx new_sha256() {
  MdCtx ctx(EVP_MD_CTX_new());
  if (!ctx || EVP_DigestInit_ex(ctx.get(), EVP_sha256(), nullptr) != 1) return nullptr;
  return ctx;
}

std::string finish(EVP_MD_CTX* ctx) {
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned int n = 0;
  EVP_DigestFinal_ex(ctx, md, &n);
  return to_hex(md, n);
}

}  // namespace

struct Sha256::Ctx {
  MdCtx md = new_sha256();
};

Sha256::Sha256() : ctx_(std::make_unique<Ctx>()) { assert(ctx_->md && "OpenSSL could not provide SHA-256"); }
Sha256::~Sha256() = default;
Sha256::Sha256(Sha256&&) noexcept = default;
Sha256& Sha256::operator=(Sha256&&) noexcept = default;

void Sha256::update(const void* data, size_t bytes) { EVP_DigestUpdate(ctx_->md.get(), data, bytes); }

std::string Sha256::hex() {
  std::string out = finish(ctx_->md.get());
  EVP_DigestInit_ex(ctx_->md.get(), EVP_sha256(), nullptr);
  return out;
}

std::string sha256_hex(std::string_view bytes) {
  MdCtx ctx = new_sha256();
  assert(ctx && "OpenSSL could not provide SHA-256");
  EVP_DigestUpdate(ctx.get(), bytes.data(), bytes.size());
  return finish(ctx.get());
}

Result<FileDigest> sha256_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return io_error("cannot open " + path + ": " + std::strerror(errno));
  MdCtx ctx = new_sha256();
  if (!ctx) return internal_error("OpenSSL could not provide SHA-256");
  std::vector<char> buf(1 << 20);
  FileDigest out;
  while (in) {
    in.read(buf.data(), static_cast<std::streamsize>(buf.size()));
    std::streamsize got = in.gcount();
    if (got > 0) {
      EVP_DigestUpdate(ctx.get(), buf.data(), static_cast<size_t>(got));
      out.bytes += static_cast<uint64_t>(got);
    }
  }
  if (in.bad()) return io_error("reading " + path + " failed");
  out.sha256 = finish(ctx.get());
  return out;
}

}  // namespace kiln
