// Micro-benchmarks of the per-request logic on the hot path: token parsing,
// canonical paths, key templates, routing and the per-key queue
// (proxy/token.h, proxy/canonical_path.h, proxy/router.h, proxy/key_queue.h).
// No sockets, no store.
//
//   build-dir/bench/micro/proxy_logic_bench [--benchmark_filter=Route]

#include <benchmark/benchmark.h>

#include <string>
#include <vector>

#include "config/config.h"
#include <boost/asio/io_context.hpp>

#include "proxy/canonical_path.h"
#include "proxy/key_queue.h"
#include "proxy/router.h"
#include "proxy/token.h"

namespace {

using namespace fencegate;

void BM_ParseTokenValue(benchmark::State& state, std::string_view value) {
  for (auto _ : state) {
    proxy::TokenParse p = proxy::ParseTokenValue(value);
    benchmark::DoNotOptimize(p);
  }
}
BENCHMARK_CAPTURE(BM_ParseTokenValue, short, std::string_view("34"));
BENCHMARK_CAPTURE(BM_ParseTokenValue, max_u64, std::string_view("18446744073709551615"));
BENCHMARK_CAPTURE(BM_ParseTokenValue, malformed, std::string_view("12a4"));

void BM_CanonicalizeTarget(benchmark::State& state, std::string_view target) {
  proxy::CanonicalTarget out;
  for (auto _ : state) {
    proxy::PathError e = proxy::CanonicalizeTarget(target, &out);
    benchmark::DoNotOptimize(e);
    benchmark::DoNotOptimize(out);
  }
}
BENCHMARK_CAPTURE(BM_CanonicalizeTarget, clean, std::string_view("/objects/t0/k1234"));
BENCHMARK_CAPTURE(BM_CanonicalizeTarget, with_query,
                  std::string_view("/objects/t0/k1234?versionId=7&x=y"));
BENCHMARK_CAPTURE(BM_CanonicalizeTarget, messy,
                  std::string_view("//objects/./a/../b//%61%62%63/%c3%a9/x/y/z/"));
BENCHMARK_CAPTURE(BM_CanonicalizeTarget, long_256,
                  std::string_view("/objects/" + std::string(247, 'a')));

proxy::KeyTemplate MustCompile(std::string_view text) {
  std::string error;
  auto t = proxy::KeyTemplate::Compile(text, &error);
  if (!t) std::abort();
  return *t;
}

void BM_KeyTemplateExpand(benchmark::State& state, std::string_view text) {
  proxy::KeyTemplate key = MustCompile(text);
  std::vector<std::string> captures{"/tenants/acme/", "acme"};
  proxy::KeyTemplate::HeaderLookup headers =
      [](std::string_view name) -> std::optional<std::string_view> {
    if (name == "X-Tenant") return std::string_view("acme");
    return std::nullopt;
  };
  std::string out;
  for (auto _ : state) {
    out.clear();
    auto e = key.Expand("/tenants/acme/objects/k1234", captures, headers, &out);
    benchmark::DoNotOptimize(e);
    benchmark::DoNotOptimize(out);
  }
}
BENCHMARK_CAPTURE(BM_KeyTemplateExpand, path, std::string_view("{path}"));
BENCHMARK_CAPTURE(BM_KeyTemplateExpand, capture, std::string_view("tenant:{1}:{path}"));
BENCHMARK_CAPTURE(BM_KeyTemplateExpand, header, std::string_view("{header:X-Tenant}{path}"));

std::unique_ptr<proxy::Router> MustBuild(std::vector<config::RouteConfig> routes) {
  std::string error;
  auto r = proxy::Router::Build(routes, &error);
  if (!r) std::abort();
  return r;
}

config::RouteConfig Prefix(std::string name, std::string prefix) {
  config::RouteConfig r;
  r.name = std::move(name);
  r.path_prefix = std::move(prefix);
  return r;
}

config::RouteConfig Regex(std::string name, std::string regex, std::string key) {
  config::RouteConfig r;
  r.name = std::move(name);
  r.path_regex = std::move(regex);
  r.key = std::move(key);
  return r;
}

// One prefix route (the benchmark's and the demo's configuration).
void BM_RouterMatchPrefix(benchmark::State& state) {
  auto router = MustBuild({Prefix("objects", "/objects/")});
  const std::string_view method = state.range(0) ? "PUT" : "GET";
  for (auto _ : state) {
    proxy::RouteMatch m = router->Match(method, "/objects/t0/k1234");
    benchmark::DoNotOptimize(m);
  }
}
BENCHMARK(BM_RouterMatchPrefix)->ArgName("fenced")->Arg(0)->Arg(1);

// A regex route with a capture, matched after nine prefix routes that miss.
void BM_RouterMatchRegexAfterTen(benchmark::State& state) {
  std::vector<config::RouteConfig> routes;
  for (int i = 0; i < 9; ++i) routes.push_back(Prefix("p" + std::to_string(i), "/other" + std::to_string(i) + "/"));
  routes.push_back(Regex("tenant", "^/tenants/([^/]+)/", "{1}:{path}"));
  auto router = MustBuild(routes);
  for (auto _ : state) {
    proxy::RouteMatch m = router->Match("PUT", "/tenants/acme/objects/k1234");
    benchmark::DoNotOptimize(m);
  }
}
BENCHMARK(BM_RouterMatchRegexAfterTen);

// One fenced write's trip through the per-key queue with no contention:
// Acquire, the posted handler, Release. Every fenced write pays this.
void BM_KeyQueueUncontended(benchmark::State& state) {
  boost::asio::io_context ioc(1);
  proxy::KeyQueue queue;
  const std::string key = "/objects/t0/k1234";
  for (auto _ : state) {
    queue.Acquire(key, ioc.get_executor(),
                  [](proxy::KeyLease lease) { benchmark::DoNotOptimize(lease); });
    ioc.poll();
    ioc.restart();
  }
}
BENCHMARK(BM_KeyQueueUncontended);

}  // namespace

BENCHMARK_MAIN();
