#pragma once
// Base64 (RFC 4648, with padding), as etcd's JSON gateway carries keys and
// values: OpenSSL's EVP_EncodeBlock and EVP_DecodeBlock, with the padding
// the latter leaves to its caller.

#include <string>
#include <string_view>

namespace fencegate::storage {

std::string Base64Encode(std::string_view bytes);
// False (and *out unspecified) for text that is not canonical base64.
bool Base64Decode(std::string_view text, std::string* out);

}  // namespace fencegate::storage
