#include "proxy/access_log.h"

#include <spdlog/fmt/fmt.h>

#include <nlohmann/json.hpp>

#include "net/replies.h"

namespace fencegate::proxy {

namespace {

double Millis(RequestRecord::Clock::duration d) {
  return std::chrono::duration<double, std::milli>(d).count();
}

}  // namespace

std::string Rfc3339Millis(std::chrono::system_clock::time_point wall) {
  using namespace std::chrono;
  const auto ms = floor<milliseconds>(wall);
  const auto day = floor<days>(ms);
  const year_month_day ymd{day};
  const hh_mm_ss<milliseconds> t{ms - day};
  return fmt::format("{:04}-{:02}-{:02}T{:02}:{:02}:{:02}.{:03}Z", static_cast<int>(ymd.year()),
                     static_cast<unsigned>(ymd.month()), static_cast<unsigned>(ymd.day()),
                     t.hours().count(), t.minutes().count(), t.seconds().count(),
                     t.subseconds().count());
}

std::string AccessLogLine(const RequestRecord& record, std::string_view request_id,
                          std::string_view client, std::string_view method,
                          std::string_view path, const WriteIntent& intent,
                          RequestRecord::Clock::time_point now,
                          std::chrono::system_clock::time_point wall) {
  // ordered_json keeps the fields in the order they are set: ts first, for
  // tools that sort or split on it, then who asked for what, then the answer.
  nlohmann::ordered_json line = {
      {"ts", Rfc3339Millis(wall)},
      {"request_id", std::string(request_id)},
      {"client", std::string(client)},
      {"method", std::string(method)},
      {"path", std::string(path)},
      {"route", intent.route ? intent.route->name : ""},
  };
  if (!intent.key.empty()) line["key"] = intent.key;
  if (intent.kind == WriteIntent::Kind::kFence) line["token"] = intent.token;
  if (intent.idempotency.on()) line["idempotency_key"] = intent.idempotency.client_key;
  line["outcome"] = record.outcome;
  line["status"] = record.status;
  line["bytes_in"] = record.bytes_in;
  line["bytes_out"] = record.bytes_out;
  if (record.upstream_started != RequestRecord::Clock::time_point{} &&
      record.upstream_ended >= record.upstream_started) {
    line["upstream_ms"] = Millis(record.upstream_ended - record.upstream_started);
  }
  line["total_ms"] = Millis(now - record.started);
  if (!intent.shadow_violation.empty()) line["shadow_violation"] = intent.shadow_violation;
  return line.dump(-1, ' ', /*ensure_ascii=*/false, nlohmann::ordered_json::error_handler_t::replace);
}

}  // namespace fencegate::proxy
