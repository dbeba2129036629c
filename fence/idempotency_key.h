#pragma once
// Idempotency keys on the request side (docs/contract.md, "Idempotency
// keys"): which record a write's key names, what a repeat must match (its
// fingerprint), and the SHA-256 both are made with. Pure: no store and no
// socket. Classify reads the key; the session (proxy/idempotency_gate.h)
// reserves, replays and finishes the record.

#include <openssl/evp.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "config/config.h"

namespace fencegate::proxy {

// The longest key a client may send, as the IETF draft and Stripe allow.
inline constexpr size_t kMaxIdempotencyKeyBytes = 255;

// What Classify read of a write's idempotency key on a route that has
// `idempotency:` on. Empty (on() false) for every other request.
struct IdempotentRequest {
  const config::IdempotencyConfig* config = nullptr;  // the route's; nullptr = not idempotent
  std::string route;        // the route's name
  std::string scope;        // the scope template's expansion; "" without a scope
  std::string client_key;   // the header's value, as sent
  std::string record_key;   // IdempotencyRecordKey(route, scope, client_key)

  bool on() const { return config != nullptr; }
  void Reset() {
    config = nullptr;
    route.clear();
    scope.clear();
    client_key.clear();
    record_key.clear();
  }
};

// 1..255 bytes, each visible ASCII (0x21..0x7e): what a key may be.
bool IsValidIdempotencyKey(std::string_view key);

// The store's name for a record: the route's name (length-prefixed, so no
// name can run into the next part), the SHA-256 of the scope in hex (empty
// without a scope: the scope may hold credentials, which the store never
// keeps), and the client's key. At most 24 + route + 64 + 255 bytes.
std::string IdempotencyRecordKey(std::string_view route, std::string_view scope,
                                 std::string_view client_key);

// SHA-256, through OpenSSL's EVP interface. Fed piece by piece as a body
// streams; Finish() returns the 32-byte digest and starts over.
class Sha256 {
 public:
  Sha256();
  void Update(const void* data, size_t size);
  void Update(std::string_view text) { Update(text.data(), text.size()); }
  std::string Finish();
  // Starts over, dropping what was fed.
  void Reset();

 private:
  struct Free {
    void operator()(EVP_MD_CTX* ctx) const { EVP_MD_CTX_free(ctx); }
  };
  std::unique_ptr<EVP_MD_CTX, Free> ctx_;
};

// What a repeat must match before its body: the method as sent, the
// canonical path, the raw query (when the target has one), the canonical
// Destination (COPY, MOVE) and the scope, each framed by its length.
std::string IdempotencyHeadDigest(std::string_view method, std::string_view path,
                                  std::optional<std::string_view> query,
                                  std::string_view destination, std::string_view scope);

// What the idempotency gates of one server counted (proxy/idempotency_gate.h),
// which the admin listener shows (GET /v1/idempotency, and GET /metrics).
// Relaxed atomics: counts, not synchronisation.
struct IdempotencyCounters {
  std::atomic<uint64_t> executions{0};  // reserved: the request ran (or was sent to)
  std::atomic<uint64_t> replays{0};     // a repeat got the stored response
  std::atomic<uint64_t> mismatches{0};  // 422: the key with another fingerprint
  std::atomic<uint64_t> conflicts{0};   // 409: the key still in flight
  std::atomic<uint64_t> waits{0};       // concurrent: wait, a repeat waited
  std::atomic<uint64_t> expirations{0};  // a reservation replaced an expired record
  std::atomic<uint64_t> releases{0};     // a reservation given back unrun
  std::atomic<uint64_t> not_kept{0};     // a repeat of a response too large to keep
  std::atomic<uint64_t> store_errors{0};  // a store call failed
};

// Lower-case hex of `bytes` (digests in admin answers and logs).
std::string HexOf(std::string_view bytes);

}  // namespace fencegate::proxy
