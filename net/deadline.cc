#include "net/deadline.h"

#include <algorithm>

namespace fencegate::proxy {

std::chrono::milliseconds SweepInterval(std::initializer_list<std::chrono::milliseconds> timeouts) {
  constexpr std::chrono::milliseconds kMin{1};
  constexpr std::chrono::milliseconds kMax{250};
  std::chrono::milliseconds shortest = kMax * 10;
  for (auto t : timeouts) shortest = std::min(shortest, t);
  return std::clamp(shortest / 10, kMin, kMax);
}

}  // namespace fencegate::proxy
