#pragma once
// The access log (log.access_log): one JSON object per request, written once
// the request has ended (docs/operations.md shows a line and its fields).
//
// RequestRecord is what the line reports that is learnt while the request
// runs; the client session and its upstream exchange fill it in, on the
// session's thread. AccessLogLine builds the line; the session writes it.

#include <chrono>
#include <cstdint>
#include <string>
#include <string_view>

#include "fence/fence_filter.h"

namespace fencegate::proxy {

struct RequestRecord {
  using Clock = std::chrono::steady_clock;

  // "forwarded", or why not (docs/contract.md, "Metrics"); "client_error"
  // when the client went away first.
  std::string outcome;
  unsigned status = 0;     // the status the client got; 0 when it got none
  uint64_t bytes_in = 0;   // request body bytes read from the client
  uint64_t bytes_out = 0;  // body bytes sent to the client (the backend's or fencegate's reply's)
  Clock::time_point started;           // the head was read
  Clock::time_point upstream_started;  // the upstream exchange began (zero: never)
  Clock::time_point upstream_ended;    // it ended (earlier than upstream_started: not yet)

  // For the next request on the connection; `outcome` keeps its buffer.
  void Reset() {
    outcome.clear();
    status = 0;
    bytes_in = bytes_out = 0;
    upstream_started = upstream_ended = Clock::time_point{};
  }
};

// `wall` as RFC 3339 UTC with milliseconds: "2026-12-06T13:10:00.123Z".
// Arithmetic only (no gmtime_r, which takes glibc's time-zone lock on every
// call), so I/O threads do not contend for it.
std::string Rfc3339Millis(std::chrono::system_clock::time_point wall);

// The line for one request that `intent` classified, its fields in this
// order: ts (`wall`, Rfc3339Millis), request_id, client, method, path,
// route, then key and token (fenced writes) and idempotency_key when there
// is one, then outcome, status, bytes_in, bytes_out, upstream_ms (only when
// the request reached the backend), total_ms (from record.started to `now`)
// and shadow_violation when there is one. Strings go through
// AppendJsonString.
std::string AccessLogLine(const RequestRecord& record, std::string_view request_id,
                          std::string_view client, std::string_view method,
                          std::string_view path, const WriteIntent& intent,
                          RequestRecord::Clock::time_point now,
                          std::chrono::system_clock::time_point wall);

// Appends `text` to `out` as a JSON string: quotes, backslashes and control
// bytes escaped, well-formed UTF-8 kept, and U+FFFD for each byte that
// begins no UTF-8 character (a key may hold any header bytes), so the
// result is valid UTF-8 on one line whatever the bytes.
void AppendJsonString(std::string& out, std::string_view text);

}  // namespace fencegate::proxy
