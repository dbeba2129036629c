#include "proxy/admin_request.h"

#include <algorithm>
#include <boost/beast/core/string.hpp>
#include <boost/url/pct_string_view.hpp>
#include <nlohmann/json.hpp>

#include "proxy/token.h"

namespace fencegate::proxy {

namespace {
constexpr std::string_view kKeysPrefix = "/v1/keys/";
constexpr std::string_view kFenceSuffix = "/fence";
constexpr std::string_view kBearer = "Bearer ";
}  // namespace

bool ParseAdminKeyTarget(std::string_view target, std::string* key, bool* fence) {
  if (target.substr(0, kKeysPrefix.size()) != kKeysPrefix) return false;
  std::string_view rest = target.substr(kKeysPrefix.size());
  *fence = false;
  if (rest.size() > kFenceSuffix.size() &&
      rest.substr(rest.size() - kFenceSuffix.size()) == kFenceSuffix) {
    rest.remove_suffix(kFenceSuffix.size());
    *fence = true;
  }
  if (rest.empty() || rest.find('/') != std::string_view::npos ||
      rest.find('?') != std::string_view::npos) {
    return false;
  }
  auto pct = boost::urls::make_pct_string_view(rest);
  if (!pct) return false;
  *key = pct->decode();
  return !key->empty();
}

bool ConstantTimeEquals(std::string_view a, std::string_view b) {
  // Every byte of the longer input is compared, so timing depends on the
  // lengths only.
  size_t n = std::max(a.size(), b.size());
  unsigned char diff = a.size() == b.size() ? 0 : 1;
  for (size_t i = 0; i < n; ++i) {
    unsigned char x = i < a.size() ? static_cast<unsigned char>(a[i]) : 0;
    unsigned char y = i < b.size() ? static_cast<unsigned char>(b[i]) : 0;
    diff |= static_cast<unsigned char>(x ^ y);
  }
  return diff == 0;
}

bool BearerMatches(std::string_view authorization, std::string_view token) {
  if (token.empty() || authorization.size() <= kBearer.size()) return false;
  if (!boost::beast::iequals(authorization.substr(0, kBearer.size()), kBearer)) return false;
  return ConstantTimeEquals(authorization.substr(kBearer.size()), token);
}

std::optional<uint64_t> ParseFenceBody(std::string_view body) {
  auto json = nlohmann::json::parse(body, nullptr, /*allow_exceptions=*/false);
  if (!json.is_object()) return std::nullopt;
  auto it = json.find("token");
  if (it == json.end()) return std::nullopt;
  if (it->is_number_unsigned()) return it->get<uint64_t>();
  if (it->is_string()) {
    TokenParse p = ParseTokenValue(it->get_ref<const std::string&>());
    if (p.status == TokenStatus::kOk) return p.value;
  }
  return std::nullopt;
}

}  // namespace fencegate::proxy
