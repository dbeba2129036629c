#pragma once
// RFC 9110 5.6.2 tchar: the bytes of a token (a method, a header name, a
// transfer coding).

#include <string_view>

namespace fencegate::proxy {

inline bool IsTchar(unsigned char c) {
  if ((c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9')) return true;
  return c != 0 &&
         std::string_view("!#$%&'*+-.^_`|~").find(static_cast<char>(c)) != std::string_view::npos;
}

}  // namespace fencegate::proxy
