#pragma once
// The configuration the data plane runs under, swapped whole on reload.
//
// A ConfigSnapshot is immutable once published: the Config, the Router built
// from its routes and the fence settings. LiveConfig holds the current one;
// a session takes it (Get) when it starts reading a request head and again
// when the head is in, and keeps that shared_ptr until the request has
// ended, so a request finishes under the snapshot it was classified with
// while the next one, on the same connection too, sees a newer one. The old
// snapshot is freed by whichever holder lets go of it last.
//
// Thread-safe: Get and Set may be called from any thread (a short lock
// around the pointer copy; the snapshot itself is never written).

#include <cstddef>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "config/config.h"
#include "fence/classify.h"
#include "fence/router.h"
#include "metrics/route_slots.h"

namespace fencegate::proxy {

struct ConfigSnapshot {
  std::shared_ptr<const config::Config> config;
  std::shared_ptr<const Router> router;
  FenceSettings fence_settings;
  // Per route of config->routes, its slot in the request counters (slots
  // keep a route name's series across reloads); empty without `slots`.
  std::vector<size_t> metric_slots;

  // Builds the router of `config`; nullptr + *error when a route is invalid.
  // `slots`: where the routes' metric slots come from (nullptr: none).
  static std::shared_ptr<const ConfigSnapshot> Make(std::shared_ptr<const config::Config> config,
                                                    std::string* error,
                                                    metrics::RouteSlots* slots = nullptr) {
    std::shared_ptr<const Router> router = Router::Build(config->routes, error);
    if (!router) return nullptr;
    auto snapshot = std::make_shared<ConfigSnapshot>();
    if (slots != nullptr) {
      for (const config::RouteConfig& r : config->routes) {
        snapshot->metric_slots.push_back(
            slots->SlotOf(r.name, r.mode == config::RouteMode::kShadow));
      }
    }
    snapshot->fence_settings.token_header = config->fencing.token_header;
    snapshot->config = std::move(config);
    snapshot->router = std::move(router);
    return snapshot;
  }
};

class LiveConfig {
 public:
  // The current snapshot; nullptr before the first Set.
  std::shared_ptr<const ConfigSnapshot> Get() const {
    std::lock_guard<std::mutex> lock(mu_);
    return current_;
  }
  // Publishes `next`: every Get from now on returns it. Holders of the
  // previous snapshot keep it as long as they need it.
  void Set(std::shared_ptr<const ConfigSnapshot> next) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      current_.swap(next);
    }
    // `next` now holds the previous snapshot: freed here, outside the lock,
    // when no request holds it any more.
  }

 private:
  mutable std::mutex mu_;
  std::shared_ptr<const ConfigSnapshot> current_;  // guarded by mu_
};

}  // namespace fencegate::proxy
