#pragma once
// The refusal log: every request fencegate answers itself with an error
// (4xx or 5xx of its own: 409 stale_token, 428, 400, 413, 431, 422, 501,
// 503, 502 and 504 when the backend failed) gets one `info` line on the
// application log, whatever log.access_log says (docs/operations.md):
//
//   refused 409 stale_token request_id=f0c6... route=objects
//     key="/objects/a" token=3 client=10.0.0.1 method=PUT path="/objects/a"
//
// (one line). Strings a client chose are JSON-quoted, so a line stays one
// line; never a body, and no header but the key and token fencegate
// classified.
//
// A flood of refusals (a writer that lost its lease retrying in a loop, a
// scanner) must not drown the application log in lines nobody reads, nor
// spend the I/O threads on writing them: RefusalLimiter lets
// kRefusalLinesPerSecond lines through per second and counts the rest, and
// the next line let through says how many were held back. Every refusal is
// still counted whole in the access log, when it is on.

#include <cstdint>
#include <limits>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>

#include "fence/fence_filter.h"

namespace fencegate::proxy {

inline constexpr uint32_t kRefusalLinesPerSecond = 100;

// Shared by every I/O thread; the lock is taken once per refusal only.
class RefusalLimiter {
 public:
  explicit RefusalLimiter(uint32_t per_second = kRefusalLinesPerSecond)
      : per_second_(per_second) {}

  // Whether the refusal at `second` (any monotonic count of seconds) gets
  // its line. When it does, *held_back is the number of lines refused in
  // earlier seconds since the last one let through (0 when none), for a
  // "N more refused requests were not logged" line before it.
  bool Admit(int64_t second, uint64_t* held_back);

 private:
  const uint32_t per_second_;
  std::mutex mutex_;
  int64_t second_ = std::numeric_limits<int64_t>::min();  // guarded by mutex_
  uint32_t admitted_ = 0;       // in second_; guarded by mutex_
  uint64_t held_back_ = 0;      // not yet reported; guarded by mutex_
};

// What the line reports, besides the classified request (`intent`).
struct Refusal {
  unsigned status = 0;
  std::string_view error;  // the reply's "error" code
  std::string_view request_id;
  std::string_view client;
  std::string_view method;
  std::string_view path;  // canonical; "" when the head was never read whole
};

// The line's text (without level or time), as shown above: route, key and
// token only when there is one.
std::string RefusalLine(const Refusal& refusal, const WriteIntent& intent);

// The "error" code of a reply body fencegate made (MakeError), or "".
std::string ErrorCodeOf(std::string_view body);

}  // namespace fencegate::proxy
