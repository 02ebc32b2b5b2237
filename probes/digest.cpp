#include "probes/digest.h"

#include <sys/random.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <memory>

#include <fmt/format.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>

#include "launcher/error.h"

namespace muster {
namespace {

using DigestContext = std::unique_ptr<EVP_MD_CTX, decltype(&EVP_MD_CTX_free)>;

DigestContext new_sha256() {
  DigestContext ctx(EVP_MD_CTX_new(), &EVP_MD_CTX_free);
  if (!ctx || EVP_DigestInit_ex(ctx.get(), EVP_sha256(), nullptr) != 1)
    throw Error(ErrorKind::Runtime, "libcrypto could not start a SHA-256 digest");
  return ctx;
}

std::string finish(EVP_MD_CTX* ctx) {
  unsigned char out[EVP_MAX_MD_SIZE];
  unsigned int size = 0;
  if (EVP_DigestFinal_ex(ctx, out, &size) != 1)
    throw Error(ErrorKind::Runtime, "libcrypto could not finish a SHA-256 digest");
  return to_hex(std::string_view(reinterpret_cast<const char*>(out), size));
}

}  // namespace

std::string to_hex(std::string_view bytes) {
  std::string hex;
  hex.reserve(bytes.size() * 2);
  for (unsigned char c : bytes) fmt::format_to(std::back_inserter(hex), "{:02x}", c);
  return hex;
}

std::string sha256_hex(std::string_view data) {
  DigestContext ctx = new_sha256();
  EVP_DigestUpdate(ctx.get(), data.data(), data.size());
  return finish(ctx.get());
}

std::string sha256_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in)
    throw Error(ErrorKind::Runtime, fmt::format("{}: cannot read: {}", path, std::strerror(errno)));
  DigestContext ctx = new_sha256();
  char buffer[1 << 16];
  while (in.read(buffer, sizeof buffer) || in.gcount() > 0)
    EVP_DigestUpdate(ctx.get(), buffer, size_t(in.gcount()));
  return finish(ctx.get());
}

std::string hmac_sha256(std::string_view key, std::string_view message) {
  unsigned char out[EVP_MAX_MD_SIZE];
  unsigned int size = 0;
  if (!HMAC(EVP_sha256(), key.data(), int(key.size()),
            reinterpret_cast<const unsigned char*>(message.data()), message.size(), out, &size))
    throw Error(ErrorKind::Runtime, "libcrypto could not compute an HMAC");
  return std::string(reinterpret_cast<const char*>(out), size);
}

std::string random_bytes(size_t size) {
  std::string out(size, '\0');
  for (size_t got = 0; got < size;) {
    ssize_t n = getrandom(out.data() + got, size - got, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0)
      throw Error(ErrorKind::Runtime, fmt::format("no random bytes from the kernel: {}",
                                                  std::strerror(errno)));
    got += size_t(n);
  }
  return out;
}

}  // namespace muster
