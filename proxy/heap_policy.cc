#include "proxy/heap_policy.h"

#include <malloc.h>

#include <cstdlib>
#include <string_view>

namespace fencegate::proxy {

bool KeepFreedHeapMemory() {
  const char* tunables = std::getenv("GLIBC_TUNABLES");
  if (tunables != nullptr &&
      std::string_view(tunables).find("glibc.malloc.trim_threshold") != std::string_view::npos) {
    return false;
  }
  return mallopt(M_TRIM_THRESHOLD, static_cast<int>(kHeapTrimThreshold)) == 1;
}

}  // namespace fencegate::proxy
