#pragma once
// Request ids: the X-Request-Id fencegate sends upstream and back to the
// client, the client's own when it is acceptable, else a new one.

#include <string>
#include <string_view>

namespace fencegate::proxy {

// A request id a client may choose: 1..128 of [A-Za-z0-9._:-]. Anything else
// is replaced by a generated one.
bool IsValidRequestId(std::string_view id);
// Sets *id to 32 lowercase hex digits from a per-thread random generator
// (in the string's own buffer: a session's id is rewritten, not reallocated,
// request after request).
void NewRequestId(std::string* id);

}  // namespace fencegate::proxy
