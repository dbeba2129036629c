#include "storage/status.h"

namespace fencegate::storage {

// Renders "OK" or "<kind>: <message>", as LevelDB's Status::ToString does,
// e.g. "IO error: token store write failed: ...".
std::string Status::ToString() const {
  const char* kind = "";
  switch (code_) {
    case Code::kOk:
      return "OK";
    case Code::kNotFound:
      kind = "NotFound";
      break;
    case Code::kInvalidArgument:
      kind = "Invalid argument";
      break;
    case Code::kIoError:
      kind = "IO error";
      break;
    case Code::kCorruption:
      kind = "Corruption";
      break;
    case Code::kUnavailable:
      kind = "Unavailable";
      break;
    case Code::kBusy:
      kind = "Busy";
      break;
    case Code::kMoving:
      kind = "Key moving";
      break;
  }
  std::string out(kind);
  if (!message_.empty()) {
    out += ": ";
    out += message_;
  }
  return out;
}

}  // namespace fencegate::storage
