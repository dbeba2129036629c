#include "proxy/access_log.h"

#include <nlohmann/json.hpp>

#include "net/replies.h"

namespace fencegate::proxy {

namespace {

double Millis(RequestRecord::Clock::duration d) {
  return std::chrono::duration<double, std::milli>(d).count();
}

}  // namespace

std::string AccessLogLine(const RequestRecord& record, std::string_view request_id,
                          std::string_view client, std::string_view method,
                          std::string_view path, const WriteIntent& intent,
                          RequestRecord::Clock::time_point now) {
  nlohmann::json line = {
      {"request_id", std::string(request_id)},
      {"client", std::string(client)},
      {"method", std::string(method)},
      {"path", std::string(path)},
      {"route", intent.route ? intent.route->name : ""},
      {"outcome", record.outcome},
      {"status", record.status},
      {"bytes_in", record.bytes_in},
      {"bytes_out", record.bytes_out},
      {"total_ms", Millis(now - record.started)},
  };
  if (!intent.key.empty()) line["key"] = intent.key;
  if (intent.kind == WriteIntent::Kind::kFence) line["token"] = intent.token;
  if (!intent.shadow_violation.empty()) line["shadow_violation"] = intent.shadow_violation;
  if (intent.idempotency.on()) line["idempotency_key"] = intent.idempotency.client_key;
  if (record.upstream_started != RequestRecord::Clock::time_point{} &&
      record.upstream_ended >= record.upstream_started) {
    line["upstream_ms"] = Millis(record.upstream_ended - record.upstream_started);
  }
  return DumpJson(line);
}

}  // namespace fencegate::proxy
