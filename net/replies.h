#pragma once
// The responses fencegate makes itself (docs/contract.md, "Responses"):
// always JSON, {"error": CODE, "message": TEXT, ...}. Every such reply is
// built here, and a storage::Status becomes an HTTP reply in exactly one
// function.

#include <boost/beast/http.hpp>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>

#include "storage/status.h"

namespace fencegate::proxy {

namespace http = boost::beast::http;
using Reply = http::response<http::string_body>;

// The JSON text of `value`, for replies and log lines. Strings that are not
// valid UTF-8 (header values, lock names and targets are bytes a client
// chose) get U+FFFD in place of each bad byte: nlohmann's default is to
// throw, and an exception out of an I/O handler ends the process.
std::string DumpJson(const nlohmann::json& value);

// Writes `reply` to `stream` as the answer to a request: the whole message,
// or for a HEAD request only its head, Content-Length included (RFC 9110
// 9.3.2). `serializer` must outlive the write (a member of the session).
using ReplySerializer = http::response_serializer<http::string_body>;
template <class Stream, class Handler>
void AsyncWriteReply(Stream& stream, Reply& reply, std::optional<ReplySerializer>& serializer,
                     bool head_request, Handler&& handler) {
  serializer.emplace(reply);
  if (head_request) {
    http::async_write_header(stream, *serializer, std::forward<Handler>(handler));
  } else {
    http::async_write(stream, *serializer, std::forward<Handler>(handler));
  }
}

// status + error code + message, plus any extra fields merged into the body.
Reply MakeError(http::status status, std::string_view code, std::string_view message,
                const nlohmann::json& extra = nlohmann::json::object());

// Any JSON body with the given status (admin API answers).
Reply MakeJson(http::status status, const nlohmann::json& body);

// 409 stale_token with key/token/current and Fencing-Token-Current.
Reply MakeStale(const std::string& key, uint64_t token, uint64_t current);

// 409 stale_token for a write over the tree of paths whose token is lower
// than that of a write that changed one of its resources (nesting: shared):
// `path` holds `current`; Fencing-Token-Current. `key` is the write's.
Reply MakeStaleTree(const std::string& key, const std::string& target, const std::string& path,
                    uint64_t token, uint64_t current);

// 409 nested_keys: a subtree write to `target` over `path`, fenced under
// `key`, that no token of the write can order (docs/contract.md, "Nested
// resources"). `covered`: the target's route is per_key (else no route
// covers it).
Reply MakeNestedKeys(const std::string& target, const std::string& path, const std::string& key,
                     bool covered);

// The one mapping of a store failure to an HTTP reply: 503 store_unavailable.
Reply MakeStoreError(const storage::Status& status);

// 503 fence_expired for a write decided while this replica owned its key
// (storage.etcd.ownership) whose ownership then lapsed, or came within its
// margin, before the write went upstream.
Reply MakeOwnershipLapsed(const std::string& key);

}  // namespace fencegate::proxy
