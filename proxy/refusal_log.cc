#include "proxy/refusal_log.h"

#include <spdlog/fmt/fmt.h>

#include <iterator>
#include <nlohmann/json.hpp>

namespace fencegate::proxy {

namespace {

std::string Quoted(std::string_view text) {
  return nlohmann::json(text).dump(-1, ' ', /*ensure_ascii=*/false,
                                   nlohmann::json::error_handler_t::replace);
}

}  // namespace

bool RefusalLimiter::Admit(int64_t second, uint64_t* held_back) {
  std::lock_guard lock(mutex_);
  *held_back = 0;
  if (second != second_) {
    second_ = second;
    admitted_ = 0;
  }
  if (admitted_ >= per_second_) {
    ++held_back_;
    return false;
  }
  ++admitted_;
  *held_back = held_back_;
  held_back_ = 0;
  return true;
}

std::string RefusalLine(const Refusal& refusal, const WriteIntent& intent) {
  std::string line = fmt::format("refused {} {} request_id={}", refusal.status,
                                 refusal.error.empty() ? "-" : refusal.error,
                                 refusal.request_id);
  auto out = std::back_inserter(line);
  if (intent.route != nullptr) fmt::format_to(out, " route={}", Quoted(intent.route->name));
  if (!intent.key.empty()) fmt::format_to(out, " key={}", Quoted(intent.key));
  if (intent.kind == WriteIntent::Kind::kFence) fmt::format_to(out, " token={}", intent.token);
  fmt::format_to(out, " client={}", refusal.client);
  if (!refusal.method.empty()) fmt::format_to(out, " method={}", Quoted(refusal.method));
  if (!refusal.path.empty()) fmt::format_to(out, " path={}", Quoted(refusal.path));
  return line;
}

std::string ErrorCodeOf(std::string_view body) {
  auto json = nlohmann::json::parse(body, nullptr, /*allow_exceptions=*/false);
  if (!json.is_object()) return "";
  auto error = json.find("error");
  if (error == json.end() || !error->is_string()) return "";
  return error->get<std::string>();
}

}  // namespace fencegate::proxy
