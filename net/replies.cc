#include "net/replies.h"

namespace fencegate::proxy {

std::string DumpJson(const nlohmann::json& value) {
  return value.dump(-1, ' ', /*ensure_ascii=*/false, nlohmann::json::error_handler_t::replace);
}

Reply MakeJson(http::status status, const nlohmann::json& body) {
  Reply reply{status, 11};
  reply.set(http::field::content_type, "application/json");
  reply.set(http::field::cache_control, "no-store");
  reply.body() = DumpJson(body);
  reply.body().push_back('\n');
  reply.prepare_payload();
  return reply;
}

Reply MakeError(http::status status, std::string_view code, std::string_view message,
                const nlohmann::json& extra) {
  nlohmann::json body = {{"error", code}, {"message", message}};
  for (const auto& [k, v] : extra.items()) body[k] = v;
  return MakeJson(status, body);
}

Reply MakeStale(const std::string& key, uint64_t token, uint64_t current) {
  Reply reply = MakeError(
      http::status::conflict, "stale_token",
      "token " + std::to_string(token) + " is lower than " + std::to_string(current) +
          ", the highest token already accepted for this key; the lock was granted to a newer holder",
      {{"key", key}, {"token", token}, {"current", current}});
  reply.set("Fencing-Token-Current", std::to_string(current));
  return reply;
}

Reply MakeStaleTree(const std::string& key, const std::string& target, const std::string& path,
                    uint64_t token, uint64_t current) {
  const std::string where =
      path == target ? "the highest token already accepted for " + path
      : path.size() > target.size() && path.compare(0, target.size(), target) == 0
          ? "the token of a write already accepted below it, at " + path
          : "the token of a write already accepted to " + path + ", which changed " + target;
  Reply reply = MakeError(
      http::status::conflict, "stale_token",
      "token " + std::to_string(token) + " is lower than " + std::to_string(current) + ", " +
          where + " (the route's tokens come from one counter: nesting: shared); the lock was "
          "granted to a newer holder",
      {{"key", key}, {"token", token}, {"current", current}, {"path", path}});
  reply.set("Fencing-Token-Current", std::to_string(current));
  return reply;
}

Reply MakeNestedKeys(const std::string& target, const std::string& path, const std::string& key,
                     bool covered) {
  const std::string what = path == target ? target + " is fenced" : path + ", below " + target +
                                                                        ", is fenced";
  const std::string how =
      covered ? "; tokens of different keys do not compare (the route's nesting: per_key). "
                "Change what lies below with writes to each path under its own lock, or give "
                "the route one token counter for the whole tree (nesting: shared)"
              : "; no route covers " + target +
                    ", so no token can order this write after it. Send it to the fenced paths "
                    "themselves, each under its own lock, or cover " + target + " with a route";
  return MakeError(http::status::conflict, "nested_keys",
                   "this write may change everything below " + target + ", and " + what +
                       (key.empty() ? std::string() : " under the key '" + key + "'") + how,
                   {{"path", path}, {"key", key}});
}

Reply MakeOwnershipLapsed(const std::string& key) {
  Reply r = MakeError(
      http::status::service_unavailable, "fence_expired",
      "this replica's ownership of the key (storage.etcd.ownership) had less than its margin "
      "left, or had lapsed, when the write was to go upstream, so it was not forwarded: "
      "meanwhile the key may move to another replica. A retry with the same token is judged "
      "anew",
      {{"key", key}});
  r.set(http::field::retry_after, "1");
  return r;
}

Reply MakeStoreError(const storage::Status& status) {
  if (status.code() == storage::Status::Code::kMoving) {
    Reply r = MakeError(http::status::service_unavailable, "key_moving",
                        "the key is moving between fencegate replicas, so the write was not "
                        "forwarded: " + status.message() +
                            ". Nothing was decided; a retry with the same token is judged anew");
    r.set(http::field::retry_after, "1");
    return r;
  }
  return MakeError(http::status::service_unavailable, "store_unavailable",
                   "the token store cannot be used, so the write was not forwarded: " +
                       status.ToString());
}

}  // namespace fencegate::proxy
