#include "fence/idempotency_key.h"

#include <algorithm>
#include <stdexcept>

namespace fencegate::proxy {

bool IsValidIdempotencyKey(std::string_view key) {
  return !key.empty() && key.size() <= kMaxIdempotencyKeyBytes &&
         std::all_of(key.begin(), key.end(), [](char c) {
           auto u = static_cast<unsigned char>(c);
           return u >= 0x21 && u <= 0x7e;
         });
}

std::string HexOf(std::string_view bytes) {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string out;
  out.reserve(bytes.size() * 2);
  for (char c : bytes) {
    auto u = static_cast<unsigned char>(c);
    out.push_back(kDigits[u >> 4]);
    out.push_back(kDigits[u & 0xf]);
  }
  return out;
}

std::string IdempotencyRecordKey(std::string_view route, std::string_view scope,
                                 std::string_view client_key) {
  std::string out = std::to_string(route.size());
  out.push_back(':');
  out.append(route);
  out.push_back('/');
  if (!scope.empty()) {
    Sha256 sha;
    sha.Update(scope);
    out.append(HexOf(sha.Finish()));
  }
  out.push_back('/');
  out.append(client_key);
  return out;
}

namespace {

// SHA-256 fetched from OpenSSL's provider once: a digest started with
// EVP_sha256() looks the algorithm up again at every start, under a lock.
// Kept for the process's life.
const EVP_MD* Sha256Md() {
  static EVP_MD* const md = EVP_MD_fetch(nullptr, "SHA256", nullptr);
  return md;
}

}  // namespace

Sha256::Sha256() : ctx_(EVP_MD_CTX_new()) {
  if (!ctx_ || Sha256Md() == nullptr) {
    throw std::runtime_error("OpenSSL could not start a SHA-256 digest");
  }
  Reset();
}

void Sha256::Reset() { EVP_DigestInit_ex(ctx_.get(), Sha256Md(), nullptr); }

void Sha256::Update(const void* data, size_t size) {
  if (size > 0) EVP_DigestUpdate(ctx_.get(), data, size);
}

std::string Sha256::Finish() {
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int size = 0;
  EVP_DigestFinal_ex(ctx_.get(), digest, &size);
  Reset();
  return {reinterpret_cast<const char*>(digest), size};
}

std::string IdempotencyHeadDigest(std::string_view method, std::string_view path,
                                  std::optional<std::string_view> query,
                                  std::string_view destination, std::string_view scope) {
  Sha256 sha;
  auto part = [&sha](char tag, std::string_view text) {
    std::string frame(1, tag);
    frame.append(std::to_string(text.size())).push_back(':');
    sha.Update(frame);
    sha.Update(text);
  };
  part('m', method);
  part('p', path);
  if (query) part('q', *query);
  part('d', destination);
  part('s', scope);
  return sha.Finish();
}

}  // namespace fencegate::proxy
