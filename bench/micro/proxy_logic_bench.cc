// Micro-benchmarks of the per-request logic on the hot path: token parsing,
// canonical paths, key templates, routing, the per-key queue and the heads
// sent up and down (fence/token.h, fence/canonical_path.h, fence/router.h,
// fence/key_queue.h, proxy/headers.h). No sockets, no store.
//
//   build-dir/bench/micro/proxy_logic_bench [--benchmark_filter=Route]

#include <benchmark/benchmark.h>

#include <string>
#include <vector>

#include "config/config.h"
#include <boost/asio/buffer.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/beast/http.hpp>

#include "fence/canonical_path.h"
#include "fence/fence_filter.h"
#include "fence/key_queue.h"
#include "fence/router.h"
#include "fence/token.h"
#include "proxy/headers.h"

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

// The whole classification of a request wrk's load sends: route, key and
// token of a fenced PUT, or a GET passed through, with the head's usual
// fields (what Classify reads besides the token: overrides, Destination,
// Connection).
void BM_Classify(benchmark::State& state) {
  auto router = MustBuild({Prefix("objects", "/objects/")});
  const bool fenced = state.range(0) != 0;
  boost::beast::http::fields headers;
  headers.set("Host", "127.0.0.1:8080");
  headers.set("User-Agent", "wrk");
  headers.set("Content-Length", "5");
  if (fenced) headers.set("Fencing-Token", "34");
  proxy::FenceSettings settings;
  proxy::WriteIntent intent;
  for (auto _ : state) {
    proxy::Classify(settings, *router, fenced ? "PUT" : "GET", "/objects/t0/k1234", headers,
                    &intent);
    benchmark::DoNotOptimize(intent);
  }
}
BENCHMARK(BM_Classify)->ArgName("fenced")->Arg(0)->Arg(1);

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

// The heads the session sends whole: the upstream request of a bodiless
// GET as wrk sends it, and the client's response to nginx's head of a small
// file. Two-step: a Beast message (a heap node per field), then AppendHead
// flattens it; direct: AppendUpstreamHead/AppendDownstreamHead append the
// same bytes from the parser. Each parser is filled once, outside the loop;
// the message and the string are reused, as the session's members are.
namespace http = boost::beast::http;

constexpr std::string_view kWrkGet =
    "GET /objects/t0/k1234 HTTP/1.1\r\nHost: 127.0.0.1:8080\r\n\r\n";
constexpr std::string_view kNginxResponse =
    "HTTP/1.1 200 OK\r\nServer: nginx/1.22.1\r\nDate: Mon, 30 Nov 2026 02:00:00 GMT\r\n"
    "Content-Type: application/octet-stream\r\nContent-Length: 1024\r\n"
    "Last-Modified: Tue, 13 Jun 2023 15:08:10 GMT\r\nConnection: keep-alive\r\n"
    "ETag: \"64888a1a-400\"\r\nAccept-Ranges: bytes\r\n\r\n";
constexpr std::string_view kRequestId = "0123456789abcdef0123456789abcdef";

template <class Parser>
void MustParse(Parser& parser, std::string_view head) {
  boost::beast::error_code ec;
  parser.put(boost::asio::buffer(head.data(), head.size()), ec);
  if (ec || !parser.is_header_done()) std::abort();
}

void BM_UpstreamHead(benchmark::State& state) {
  const bool direct = state.range(0) != 0;
  http::request_parser<http::buffer_body> parser;
  MustParse(parser, kWrkGet);
  proxy::CanonicalTarget target;
  if (proxy::CanonicalizeTarget(parser.get().target(), &target) != proxy::PathError::kNone) {
    std::abort();
  }
  config::Config config;
  config.upstream.host = "127.0.0.1";
  config.upstream.port = 8081;
  proxy::UpstreamRequest up;
  std::string head;
  for (auto _ : state) {
    head.clear();
    if (direct) {
      proxy::AppendUpstreamHead(parser, target, config, "127.0.0.1", kRequestId, &head);
    } else {
      proxy::BuildUpstreamRequest(parser, target, config, "127.0.0.1", kRequestId, &up);
      proxy::AppendHead(up.base(), &head);
    }
    benchmark::DoNotOptimize(head.data());
  }
}
BENCHMARK(BM_UpstreamHead)->ArgName("direct")->Arg(0)->Arg(1);

void BM_DownstreamHead(benchmark::State& state) {
  const bool direct = state.range(0) != 0;
  http::response_parser<http::buffer_body> parser;
  MustParse(parser, kNginxResponse);
  proxy::DownstreamResponse down;
  std::string head;
  for (auto _ : state) {
    head.clear();
    if (direct) {
      proxy::AppendDownstreamHead(parser, false, true, true, kRequestId, &head);
    } else {
      proxy::BuildDownstreamResponse(parser, false, true, true, &down);
      down.set("X-Request-Id", kRequestId);
      proxy::AppendHead(down.base(), &head);
    }
    benchmark::DoNotOptimize(head.data());
  }
}
BENCHMARK(BM_DownstreamHead)->ArgName("direct")->Arg(0)->Arg(1);

}  // namespace

BENCHMARK_MAIN();
