// LiveConfig: a snapshot published by Set is what Get returns from then on;
// one taken before stays whole for its holder; and readers on other threads
// always see a snapshot whose parts belong together.

#include <gtest/gtest.h>

#include <atomic>
#include <memory>
#include <string>
#include <thread>
#include <variant>
#include <vector>

#include "proxy/live_config.h"

namespace fencegate::proxy {
namespace {

// A configuration with `routes` routes /r0/, /r1/, ... and a token header
// that names the count, so that a snapshot's parts can be matched.
std::shared_ptr<const ConfigSnapshot> SnapshotWith(int routes) {
  std::string yaml = "upstream: {url: \"http://127.0.0.1:9000\"}\n";
  yaml += "fencing: {token_header: T-" + std::to_string(routes) + "}\n";
  yaml += routes == 0 ? "routes: []\n" : "routes:\n";
  for (int i = 0; i < routes; ++i) {
    yaml += "  - {name: r" + std::to_string(i) + ", path_prefix: /r" + std::to_string(i) + "/}\n";
  }
  config::LoadResult loaded = config::LoadFromString(yaml, "test.yaml");
  if (auto* error = std::get_if<config::ConfigError>(&loaded)) {
    ADD_FAILURE() << error->message;
    return nullptr;
  }
  std::string error;
  auto snapshot = ConfigSnapshot::Make(
      std::make_shared<const config::Config>(std::get<config::Config>(std::move(loaded))), &error);
  EXPECT_NE(snapshot, nullptr) << error;
  return snapshot;
}

TEST(LiveConfigTest, MakeBuildsTheRouterAndSettingsOfItsConfig) {
  auto s = SnapshotWith(2);
  ASSERT_NE(s, nullptr);
  EXPECT_EQ(s->router->routes().size(), 2u);
  EXPECT_EQ(s->fence_settings.token_header, "T-2");
  EXPECT_TRUE(s->router->Match("PUT", "/r1/x").fenced);
  EXPECT_FALSE(s->router->Match("PUT", "/r2/x").fenced);
}

TEST(LiveConfigTest, SetPublishesAndAnEarlierHolderKeepsItsSnapshot) {
  LiveConfig live;
  EXPECT_EQ(live.Get(), nullptr);
  live.Set(SnapshotWith(1));
  std::shared_ptr<const ConfigSnapshot> held = live.Get();  // a request under way
  std::weak_ptr<const ConfigSnapshot> watch = held;
  live.Set(SnapshotWith(3));
  EXPECT_EQ(live.Get()->router->routes().size(), 3u);
  // The request under way still routes as it began.
  EXPECT_EQ(held->router->routes().size(), 1u);
  EXPECT_FALSE(held->router->Match("PUT", "/r2/x").fenced);
  EXPECT_TRUE(live.Get()->router->Match("PUT", "/r2/x").fenced);
  // Freed once its last holder lets go, not before.
  EXPECT_FALSE(watch.expired());
  held.reset();
  EXPECT_TRUE(watch.expired());
}

TEST(LiveConfigTest, ReadersOnOtherThreadsSeeWholeSnapshots) {
  LiveConfig live;
  live.Set(SnapshotWith(0));
  std::vector<std::shared_ptr<const ConfigSnapshot>> versions;
  for (int i = 1; i <= 5; ++i) versions.push_back(SnapshotWith(i));
  std::atomic<bool> stop{false};
  std::atomic<int> mismatches{0};
  std::atomic<long> reads{0};
  constexpr int kReaders = 4;
  std::vector<std::thread> readers;
  readers.reserve(kReaders);
  for (int t = 0; t < kReaders; ++t) {
    readers.emplace_back([&] {
      while (!stop.load()) {
        std::shared_ptr<const ConfigSnapshot> s = live.Get();
        const size_t n = s->router->routes().size();
        if (s->config->routes.size() != n ||
            s->fence_settings.token_header != "T-" + std::to_string(n)) {
          mismatches.fetch_add(1);
        }
        reads.fetch_add(1);
      }
    });
  }
  // Swaps until the readers have read many times while they happened.
  size_t round = 0;
  for (; round < 2000 || reads.load() < 20000; ++round) {
    live.Set(versions[round % versions.size()]);
  }
  stop.store(true);
  for (auto& r : readers) r.join();
  EXPECT_EQ(mismatches.load(), 0);
  EXPECT_EQ(live.Get(), versions[(round - 1) % versions.size()]);
}

}  // namespace
}  // namespace fencegate::proxy
