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

Reply MakeStoreError(const storage::Status& status) {
  return MakeError(http::status::service_unavailable, "store_unavailable",
                   "the token store cannot be used, so the write was not forwarded: " +
                       status.ToString());
}

}  // namespace fencegate::proxy
