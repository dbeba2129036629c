#include "storage/idempotency_record.h"

#include <algorithm>

// The layout, all integers big-endian:
//   u8  format (1)
//   u8  state (1 reserved, 2 finished)
//   u64 owner, i64 created_ms, i64 expires_ms
//   32  head digest
//   u8  body digest length (0, or 32 once finished) and its bytes
// and, finished only:
//   u16 status, u16 header count, then per field:
//       u16 name length, name, u32 value length, value
//   u8  flags (bit 0: body kept), u64 body bytes, u32 body length, body
// and nothing after it.

#include <string>

namespace fencegate::storage {
namespace {

constexpr uint8_t kFormat = 1;
constexpr uint8_t kBodyKept = 1;

void PutInt(std::string* out, uint64_t v, int bytes) {
  for (int i = bytes - 1; i >= 0; --i) out->push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}

// RFC 9110 tchar: what a field name is made of.
bool IsTchar(unsigned char c) {
  if ((c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z')) return true;
  return std::string_view("!#$%&'*+-.^_`|~").find(static_cast<char>(c)) != std::string_view::npos;
}

// A field value a replay may write: no CR, LF or NUL (no second field or
// response smuggled in by a damaged record), other controls but HTAB
// refused as Beast's parser refuses them.
bool IsFieldValue(std::string_view v) {
  for (unsigned char c : v) {
    if ((c < 0x20 && c != '\t') || c == 0x7f) return false;
  }
  return true;
}

class Reader {
 public:
  explicit Reader(std::string_view in) : in_(in) {}

  bool Int(int bytes, uint64_t* v) {
    if (in_.size() < static_cast<size_t>(bytes)) return false;
    uint64_t x = 0;
    for (int i = 0; i < bytes; ++i) x = (x << 8) | static_cast<unsigned char>(in_[i]);
    in_.remove_prefix(bytes);
    *v = x;
    return true;
  }
  bool Bytes(size_t n, std::string* out) {
    if (in_.size() < n) return false;
    out->assign(in_.data(), n);
    in_.remove_prefix(n);
    return true;
  }
  bool Done() const { return in_.empty(); }

 private:
  std::string_view in_;
};

Status Bad(const std::string& what) {
  return Status::Corruption("idempotency record: " + what);
}

Status DecodeResponse(Reader& r, StoredResponse* resp) {
  uint64_t status = 0;
  uint64_t count = 0;
  if (!r.Int(2, &status) || !r.Int(2, &count)) return Bad("truncated response head");
  if (status < 100 || status > 599) return Bad("status " + std::to_string(status));
  if (count > kMaxStoredHeaders) return Bad(std::to_string(count) + " header fields");
  resp->status = static_cast<uint16_t>(status);
  resp->headers.clear();
  resp->headers.reserve(count);
  for (uint64_t i = 0; i < count; ++i) {
    uint64_t name_len = 0;
    uint64_t value_len = 0;
    std::string name;
    std::string value;
    if (!r.Int(2, &name_len) || name_len == 0 || !r.Bytes(name_len, &name)) {
      return Bad("header field " + std::to_string(i) + ": bad name");
    }
    if (!r.Int(4, &value_len) || name_len + value_len > kMaxStoredHeaderBytes ||
        !r.Bytes(value_len, &value)) {
      return Bad("header field " + std::to_string(i) + ": bad value length");
    }
    for (char c : name) {
      if (!IsTchar(static_cast<unsigned char>(c))) {
        return Bad("header field " + std::to_string(i) + ": name is not a token");
      }
    }
    if (!IsFieldValue(value)) {
      return Bad("header field " + std::to_string(i) + ": control character in value");
    }
    resp->headers.emplace_back(std::move(name), std::move(value));
  }
  uint64_t flags = 0;
  uint64_t body_bytes = 0;
  uint64_t body_len = 0;
  if (!r.Int(1, &flags) || !r.Int(8, &body_bytes) || !r.Int(4, &body_len)) {
    return Bad("truncated body");
  }
  if ((flags & ~uint64_t{kBodyKept}) != 0) return Bad("unknown flags");
  resp->body_kept = (flags & kBodyKept) != 0;
  resp->body_bytes = body_bytes;
  if (resp->body_kept ? body_len != body_bytes : body_len != 0) {
    return Bad("body length " + std::to_string(body_len) + " for " + std::to_string(body_bytes) +
               " bytes " + (resp->body_kept ? "kept" : "not kept"));
  }
  if (body_len > kMaxStoredBodyBytes || !r.Bytes(body_len, &resp->body)) {
    return Bad("truncated body");
  }
  return Status::Ok();
}

}  // namespace

Status ValidateIdempotencyRecord(const IdempotencyRecord& rec) {
  auto bad = [](const std::string& what) {
    return Status::InvalidArgument("idempotency record: " + what);
  };
  const bool finished = rec.state == IdempotencyRecord::State::kFinished;
  if (!finished && rec.state != IdempotencyRecord::State::kReserved) return bad("unknown state");
  if (rec.expires_ms < rec.created_ms) return bad("expires before it was created");
  if (rec.head_digest.size() != kDigestBytes) return bad("head digest is not 32 bytes");
  if (rec.body_digest.size() != (finished ? kDigestBytes : 0)) {
    return bad(finished ? "body digest is not 32 bytes" : "a reservation has no body digest");
  }
  const StoredResponse& resp = rec.response;
  if (!finished) {
    return resp == StoredResponse{} ? Status::Ok() : bad("a reservation has no response");
  }
  if (resp.status < 100 || resp.status > 599) return bad("status " + std::to_string(resp.status));
  if (resp.headers.size() > kMaxStoredHeaders) {
    return bad(std::to_string(resp.headers.size()) + " header fields");
  }
  for (size_t i = 0; i < resp.headers.size(); ++i) {
    const auto& [name, value] = resp.headers[i];
    if (name.empty() || name.size() + value.size() > kMaxStoredHeaderBytes ||
        !std::all_of(name.begin(), name.end(),
                     [](char c) { return IsTchar(static_cast<unsigned char>(c)); }) ||
        !IsFieldValue(value)) {
      return bad("header field " + std::to_string(i) + " cannot be stored");
    }
  }
  if (resp.body.size() > kMaxStoredBodyBytes) return bad("body too large");
  if (resp.body_kept ? resp.body.size() != resp.body_bytes : !resp.body.empty()) {
    return bad("body length does not match body_bytes and body_kept");
  }
  return Status::Ok();
}

std::string EncodeIdempotencyRecord(const IdempotencyRecord& rec) {
  std::string out;
  size_t size = 2 + 24 + 1 + rec.head_digest.size() + 1 + rec.body_digest.size();
  if (rec.state == IdempotencyRecord::State::kFinished) {
    size += 4 + 13 + 4 + rec.response.body.size();
    for (const auto& [name, value] : rec.response.headers) size += 6 + name.size() + value.size();
  }
  out.reserve(size);
  out.push_back(static_cast<char>(kFormat));
  out.push_back(static_cast<char>(rec.state));
  PutInt(&out, rec.owner, 8);
  PutInt(&out, static_cast<uint64_t>(rec.created_ms), 8);
  PutInt(&out, static_cast<uint64_t>(rec.expires_ms), 8);
  out += rec.head_digest;
  PutInt(&out, rec.body_digest.size(), 1);
  out += rec.body_digest;
  if (rec.state != IdempotencyRecord::State::kFinished) return out;
  const StoredResponse& resp = rec.response;
  PutInt(&out, resp.status, 2);
  PutInt(&out, resp.headers.size(), 2);
  for (const auto& [name, value] : resp.headers) {
    PutInt(&out, name.size(), 2);
    out += name;
    PutInt(&out, value.size(), 4);
    out += value;
  }
  PutInt(&out, resp.body_kept ? kBodyKept : 0, 1);
  PutInt(&out, resp.body_bytes, 8);
  PutInt(&out, resp.body.size(), 4);
  out += resp.body;
  return out;
}

Status DecodeIdempotencyRecord(std::string_view bytes, IdempotencyRecord* record) {
  Reader r(bytes);
  IdempotencyRecord rec;
  uint64_t format = 0;
  uint64_t state = 0;
  uint64_t created = 0;
  uint64_t expires = 0;
  uint64_t digest_len = 0;
  if (!r.Int(1, &format) || !r.Int(1, &state)) return Bad("truncated");
  if (format != kFormat) return Bad("format " + std::to_string(format) + ", expected 1");
  if (state != static_cast<uint64_t>(IdempotencyRecord::State::kReserved) &&
      state != static_cast<uint64_t>(IdempotencyRecord::State::kFinished)) {
    return Bad("state " + std::to_string(state));
  }
  rec.state = static_cast<IdempotencyRecord::State>(state);
  if (!r.Int(8, &rec.owner) || !r.Int(8, &created) || !r.Int(8, &expires) ||
      !r.Bytes(kDigestBytes, &rec.head_digest) || !r.Int(1, &digest_len)) {
    return Bad("truncated");
  }
  rec.created_ms = static_cast<int64_t>(created);
  rec.expires_ms = static_cast<int64_t>(expires);
  if (rec.expires_ms < rec.created_ms) return Bad("expires before it was created");
  const bool finished = rec.state == IdempotencyRecord::State::kFinished;
  if (digest_len != (finished ? kDigestBytes : 0)) {
    return Bad("body digest of " + std::to_string(digest_len) + " bytes");
  }
  if (!r.Bytes(digest_len, &rec.body_digest)) return Bad("truncated");
  if (finished) {
    Status s = DecodeResponse(r, &rec.response);
    if (!s.ok()) return s;
  }
  if (!r.Done()) return Bad("bytes after the record");
  *record = std::move(rec);
  return Status::Ok();
}

bool PeekIdempotencyExpiry(std::string_view bytes, int64_t* expires_ms) {
  Reader r(bytes);
  uint64_t format = 0;
  uint64_t skip = 0;
  uint64_t expires = 0;
  if (!r.Int(1, &format) || format != kFormat || !r.Int(1, &skip) || !r.Int(8, &skip) ||
      !r.Int(8, &skip) || !r.Int(8, &expires)) {
    return false;
  }
  *expires_ms = static_cast<int64_t>(expires);
  return true;
}

}  // namespace fencegate::storage
