// Fuzz target: what a backend sends back, through the parsing and
// re-framing the upstream exchange applies (UpstreamExchange) before
// anything reaches the client.
//
// The first input byte chooses the request the response answers (GET or
// HEAD, from an HTTP/1.1 or an HTTP/1.0 client); the rest is the backend's
// byte stream. As the session does: a response_parser<buffer_body> with the
// session's header limit and no body limit (skip for HEAD), interim 1xx
// responses read past (101 refused), then BuildDownstreamResponse and the
// body relayed in 64 KiB steps through a response serializer.
//
// Invariants checked (a violation traps):
//  - the head sent to the client has no hop-by-hop field, no field the
//    backend's Connection header named, and one framing only;
//  - what the client receives parses back completely (EOF-delimited for
//    HTTP/1.0 clients when the backend gave no length) with the same
//    status and exactly the body bytes the backend sent;
//  - the head appended straight from the parser (AppendDownstreamHead, what
//    the session sends for a response whose body is all in hand) is byte
//    for byte the two-step one, AppendHead over BuildDownstreamResponse's
//    message with X-Request-Id set, with the same framing (and the framing
//    DecideDownstreamFraming gives), whether keep-alive is wanted or not.

#include <boost/asio/buffer.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <optional>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

#include "proxy/headers.h"
#include "tests/fuzz/fuzz_util.h"

namespace fencegate::fuzz {
namespace {

namespace http = boost::beast::http;
constexpr uint32_t kHeaderLimit = 64 * 1024;  // the session's floor for response heads
constexpr size_t kStep = size_t{64} * 1024;    // the session's body buffer
constexpr std::string_view kRequestId = "0123456789abcdef0123456789abcdef";

bool SameFraming(const proxy::DownstreamFraming& a, const proxy::DownstreamFraming& b) {
  return a.keep_alive == b.keep_alive && a.close_delimited == b.close_delimited &&
         a.chunked == b.chunked;
}

// Feeds `parser` from input[*offset..]; false when the stream ended first or is malformed.
template <class Parser, class Done>
bool Feed(Parser& parser, std::string_view input, size_t* offset, Done done) {
  boost::beast::error_code ec;
  while (!done()) {
    if (*offset == input.size()) {
      parser.put_eof(ec);  // the backend closed the connection
      return !ec && done();
    }
    size_t used = parser.put(boost::asio::buffer(input.data() + *offset, input.size() - *offset), ec);
    *offset += used;
    if (ec == http::error::need_buffer) continue;
    if (ec) return false;
    if (used == 0) return false;
  }
  return true;
}

void CheckHead(const http::response_header<>& upstream, const proxy::DownstreamResponse& down) {
  for (const auto& f : down.base()) {
    std::string_view name = f.name_string();
    for (std::string_view hop : {"Connection", "Keep-Alive", "Proxy-Connection", "TE", "Trailer",
                                 "Upgrade", "Proxy-Authenticate", "Proxy-Authorization"}) {
      if (boost::beast::iequals(name, hop)) {
        // Beast writes keep-alive/close itself for the client's connection.
        FUZZ_CHECK(boost::beast::iequals(name, "Connection") &&
                   (f.value() == "close" || f.value() == "keep-alive"));
      }
    }
    for (auto it = upstream.find(http::field::connection);
         it != upstream.end() && it->name() == http::field::connection; ++it) {
      for (auto token : http::token_list{it->value()}) {
        if (!boost::beast::iequals(token, "close") && !boost::beast::iequals(token, "keep-alive")) {
          FUZZ_CHECK(!boost::beast::iequals(name, token));
        }
      }
    }
  }
  FUZZ_CHECK(down.count(http::field::content_length) <= 1);
  FUZZ_CHECK(!(down.count(http::field::content_length) == 1 && down.chunked()));
  FUZZ_CHECK(down.count(http::field::transfer_encoding) <= 1);
}

}  // namespace
}  // namespace fencegate::fuzz

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace fencegate::fuzz;
  if (size == 0) return 0;
  const bool head_request = (data[0] & 1) != 0;
  const bool client_http11 = (data[0] & 2) == 0;
  const std::string_view input = AsText(data + 1, size - 1);
  size_t offset = 0;

  // Interim responses first, as DoReadResponseHeader loops.
  std::optional<http::response_parser<http::buffer_body>> parser;
  for (;;) {
    parser.emplace();
    parser->header_limit(kHeaderLimit);
    parser->body_limit(boost::none);
    if (head_request) parser->skip(true);
    if (!Feed(*parser, input, &offset, [&] { return parser->is_header_done(); })) return 0;
    unsigned status = parser->get().result_int();
    if (status == 101) return 0;  // the session answers 502: upgrades are not relayed
    if (status / 100 != 1) break;
  }

  fencegate::proxy::DownstreamResponse down;
  fencegate::proxy::DownstreamFraming framing = fencegate::proxy::BuildDownstreamResponse(
      *parser, head_request, client_http11, /*keep_alive=*/true, &down);
  CheckHead(parser->get().base(), down);
  // A response whose body is all in hand goes out with a head the session
  // writes itself (AppendHead): it must be Beast's, byte for byte.
  std::ostringstream beast_head;
  beast_head << down.base();
  std::string own;
  fencegate::proxy::AppendHead(down.base(), &own);
  FUZZ_CHECK(own == beast_head.str());
  for (bool keep_alive : {true, false}) {
    fencegate::proxy::DownstreamResponse two_step;
    fencegate::proxy::DownstreamFraming built = fencegate::proxy::BuildDownstreamResponse(
        *parser, head_request, client_http11, keep_alive, &two_step);
    two_step.set("X-Request-Id", kRequestId);  // as the session does
    std::string two_step_head;
    fencegate::proxy::AppendHead(two_step.base(), &two_step_head);
    std::string direct;
    fencegate::proxy::DownstreamFraming appended = fencegate::proxy::AppendDownstreamHead(
        *parser, head_request, client_http11, keep_alive, kRequestId, &direct);
    FUZZ_CHECK(direct == two_step_head);
    FUZZ_CHECK(SameFraming(appended, built));
    FUZZ_CHECK(SameFraming(fencegate::proxy::DecideDownstreamFraming(*parser, head_request,
                                                                     client_http11, keep_alive),
                           built));
    FUZZ_CHECK(built.chunked == two_step.chunked());
  }

  // Relay: read the body into a 64 KiB buffer, write each piece through
  // the serializer, as DoResponseBody / OnResponseBodyRead do.
  std::string wire;
  std::string upstream_body;
  std::vector<char> buffer(kStep);
  http::response_serializer<http::buffer_body> sr{down};
  boost::beast::error_code ec;
  auto write_some = [&] {
    while (!sr.is_done()) {
      bool wrote = false;
      sr.next(ec, [&](boost::beast::error_code&, const auto& buffers) {
        size_t n = 0;
        for (auto b : boost::beast::buffers_range_ref(buffers)) {
          wire.append(static_cast<const char*>(b.data()), b.size());
          n += b.size();
        }
        sr.consume(n);
        wrote = true;
      });
      if (ec == http::error::need_buffer) {
        ec = {};
        return;
      }
      FUZZ_CHECK(!ec);
      if (!wrote) return;
    }
  };
  down.body().data = nullptr;
  down.body().size = 0;
  down.body().more = true;
  sr.split(true);
  write_some();  // the head
  while (!parser->is_done()) {
    auto& body = parser->get().body();
    body.data = buffer.data();
    body.size = buffer.size();
    if (!Feed(*parser, input, &offset, [&] {
          return parser->is_done() || parser->get().body().size == 0;
        })) {
      return 0;  // upstream failed mid-body: the session cuts the client connection
    }
    size_t n = buffer.size() - parser->get().body().size;
    upstream_body.append(buffer.data(), n);
    down.body().data = n ? buffer.data() : nullptr;  // as OnResponseBodyRead
    down.body().size = n;
    down.body().more = !parser->is_done();
    write_some();
  }
  down.body().data = nullptr;
  down.body().size = 0;
  down.body().more = false;
  write_some();
  FUZZ_CHECK(sr.is_done());

  // The client's view.
  http::response_parser<http::string_body> client;
  client.header_limit(kHeaderLimit * 2);
  client.body_limit(boost::none);
  client.eager(true);
  if (head_request) client.skip(true);
  size_t used = client.put(boost::asio::buffer(wire), ec);
  if (!ec && !client.is_done()) {
    // Delimited by close: only allowed when the connection does close.
    FUZZ_CHECK(!framing.keep_alive);
    client.put_eof(ec);
  }
  FUZZ_CHECK(!ec);
  FUZZ_CHECK(client.is_done());
  FUZZ_CHECK(used == wire.size());
  FUZZ_CHECK(client.get().result_int() == parser->get().result_int());
  if (!head_request && !fencegate::proxy::BodilessStatus(parser->get().result_int())) {
    FUZZ_CHECK(client.get().body() == upstream_body);
  }
  return 0;
}
