#pragma once
// Route names to the request counters' route slots (RequestShard), fixed for
// the life of the process: a route keeps its series across reloads, a route
// a reload adds gets the next free slot, and one a reload removes keeps its
// last counts. Slot 0 is a request no route matched. Bounded, so that the
// counters need no resizing while threads write them: a route past
// kMaxRoutes distinct names counts in slot 0.
//
// Thread-safe: SlotOf at start and on reload, Names at scrape time.

#include <cstddef>
#include <mutex>
#include <string>
#include <vector>

namespace fencegate::metrics {

class RouteSlots {
 public:
  static constexpr size_t kMaxRoutes = 256;
  static constexpr size_t kSlots = kMaxRoutes + 1;

  // The slot of the route `name` (assigned on its first sight); `shadow`: the
  // route is in shadow mode now, so its shadow violations are exposed.
  size_t SlotOf(const std::string& name, bool shadow) {
    std::lock_guard<std::mutex> lock(mu_);
    for (size_t i = 0; i < names_.size(); ++i) {
      if (names_[i] == name) {
        if (shadow) shadow_[i] = true;
        return i + 1;
      }
    }
    if (names_.size() == kMaxRoutes) return 0;
    names_.push_back(name);
    shadow_.push_back(shadow);
    return names_.size();
  }

  // Slot i + 1's route name and whether it was ever in shadow mode.
  void Names(std::vector<std::string>* names, std::vector<bool>* shadow) const {
    std::lock_guard<std::mutex> lock(mu_);
    *names = names_;
    *shadow = shadow_;
  }

 private:
  mutable std::mutex mu_;
  std::vector<std::string> names_;  // guarded by mu_
  std::vector<bool> shadow_;        // guarded by mu_
};

}  // namespace fencegate::metrics
