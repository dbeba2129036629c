#pragma once
// IdempotencyRecord: what the store keeps for one idempotency key
// (docs/contract.md, "Idempotency keys"), and its byte encoding, the one
// every engine stores. A record is either a reservation (a first request
// is running: nobody else may run the key) or a finished request's
// response, which a repeat within the window gets back byte for byte.
//
// Times are milliseconds since the Unix epoch, given by the caller: a
// record is live while now < expires_ms. For a reservation that is the
// in_flight_timeout after it was made (a request that never finished is
// released then); for a finished request, the end of its window.
//
// DecodeIdempotencyRecord reads bytes from disk or from another replica:
// it accepts exactly what EncodeIdempotencyRecord writes and answers
// Corruption, naming the problem, for anything else.

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "storage/status.h"

namespace fencegate::storage {

// The stored response of a finished request.
struct StoredResponse {
  uint16_t status = 0;  // 100..599
  // End-to-end header fields in the order the backend sent them.
  std::vector<std::pair<std::string, std::string>> headers;
  // The body when it was kept (body_kept); empty otherwise.
  std::string body;
  // False when the body was longer than the route's max_response_bytes: the
  // status and headers are kept, the body is not, and a repeat is answered
  // with an error that says so instead of running again.
  bool body_kept = true;
  uint64_t body_bytes = 0;  // the body's length as the backend sent it

  bool operator==(const StoredResponse&) const = default;
};

struct IdempotencyRecord {
  enum class State : uint8_t { kReserved = 1, kFinished = 2 };

  State state = State::kReserved;
  // Who holds a reservation: a number its holder drew at random, so that
  // only the holder finishes or releases it (not a request that reserved the
  // key again after this reservation expired).
  uint64_t owner = 0;
  int64_t created_ms = 0;  // when the key was reserved
  int64_t expires_ms = 0;  // live while now < expires_ms
  // SHA-256 of what a repeat must match before the body: method, canonical
  // path and scope (kDigestBytes).
  std::string head_digest;
  // SHA-256 of the first request's body (kDigestBytes), once it was read
  // whole; empty while reserved.
  std::string body_digest;
  StoredResponse response;  // kFinished only

  bool Live(int64_t now_ms) const { return now_ms < expires_ms; }
  bool operator==(const IdempotencyRecord&) const = default;
};

inline constexpr size_t kDigestBytes = 32;
// Bounds a decoder checks, so that a damaged length cannot make it allocate
// more than a record can hold.
inline constexpr size_t kMaxStoredHeaders = 256;
inline constexpr size_t kMaxStoredHeaderBytes = size_t{64} * 1024;  // name + value, each field
inline constexpr size_t kMaxStoredBodyBytes = size_t{64} << 20;

std::string EncodeIdempotencyRecord(const IdempotencyRecord& record);
// Whether `record` encodes and decodes back to itself, decided on its
// fields, without encoding it (the body may be large): what
// DecodeIdempotencyRecord accepts, said of the struct. InvalidArgument
// naming the first problem, or ok.
Status ValidateIdempotencyRecord(const IdempotencyRecord& record);
Status DecodeIdempotencyRecord(std::string_view bytes, IdempotencyRecord* record);
// The expiry of an encoded record without decoding the rest, for a sweep
// over many records: false when the bytes do not begin as a record does.
bool PeekIdempotencyExpiry(std::string_view bytes, int64_t* expires_ms);

}  // namespace fencegate::storage
