#include "net/heap_policy.h"

#include <malloc.h>

#include <cstdlib>
#include <string_view>

namespace fencegate::proxy {

bool KeepFreedHeapMemory() {
  // NOLINTNEXTLINE(concurrency-mt-unsafe): before any thread starts
  const char* tunables = std::getenv("GLIBC_TUNABLES");
  if (tunables != nullptr &&
      std::string_view(tunables).find("glibc.malloc.trim_threshold") != std::string_view::npos) {
    return false;
  }
  // NOLINTNEXTLINE(concurrency-mt-unsafe): before any thread starts
  return mallopt(M_TRIM_THRESHOLD, static_cast<int>(kHeapTrimThreshold)) == 1;
}

}  // namespace fencegate::proxy
