// What a replay repeats of the first response: its status and end-to-end
// fields as captured, framed by the stored body, marked replayed.

#include "proxy/replay.h"

#include <gtest/gtest.h>

#include <string>

namespace fencegate::proxy {
namespace {

namespace http = boost::beast::http;

storage::StoredResponse Capture(std::string_view raw) {
  http::response_parser<http::buffer_body> parser;
  boost::beast::error_code ec;
  parser.put(boost::asio::buffer(raw.data(), raw.size()), ec);
  EXPECT_TRUE(parser.is_header_done()) << ec.message();
  storage::StoredResponse out;
  CaptureResponseHead(parser, &out);
  return out;
}

TEST(Replay, TheCaptureKeepsEndToEndFieldsInOrder) {
  storage::StoredResponse r = Capture(
      "HTTP/1.1 201 Created\r\n"
      "Content-Type: application/json\r\n"
      "Connection: keep-alive, X-Hop\r\n"
      "X-Hop: dropped\r\n"
      "Set-Cookie: a=1\r\n"
      "Transfer-Encoding: chunked\r\n"
      "X-Request-Id: backend-echo\r\n"
      "Set-Cookie: b=2\r\n"
      "Location: /pay/1\r\n"
      "\r\n");
  EXPECT_EQ(r.status, 201);
  std::vector<std::pair<std::string, std::string>> want = {
      {"Content-Type", "application/json"},
      {"Set-Cookie", "a=1"},
      {"Set-Cookie", "b=2"},
      {"Location", "/pay/1"}};
  EXPECT_EQ(r.headers, want);
  EXPECT_TRUE(r.body_kept);
  EXPECT_EQ(r.body_bytes, 0u);
}

TEST(Replay, TheHeadIsFramedByTheStoredBodyAndMarked) {
  storage::StoredResponse r;
  r.status = 200;
  r.headers = {{"Content-Type", "text/plain"}, {"ETag", "\"v1\""}};
  r.body = "hello";
  std::string head;
  AppendReplayHead(r, /*client_http11=*/true, /*keep_alive=*/true, "rid-1", &head);
  EXPECT_EQ(head,
            "HTTP/1.1 200 OK\r\n"
            "Content-Type: text/plain\r\n"
            "ETag: \"v1\"\r\n"
            "Content-Length: 5\r\n"
            "Idempotent-Replayed: true\r\n"
            "X-Request-Id: rid-1\r\n"
            "\r\n");
  head.clear();
  AppendReplayHead(r, /*client_http11=*/true, /*keep_alive=*/false, "rid-2", &head);
  EXPECT_NE(head.find("Connection: close\r\n"), std::string::npos) << head;
  head.clear();
  AppendReplayHead(r, /*client_http11=*/false, /*keep_alive=*/true, "rid-3", &head);
  EXPECT_EQ(head.rfind("HTTP/1.0 200 OK\r\n", 0), 0u) << head;
  EXPECT_NE(head.find("Connection: keep-alive\r\n"), std::string::npos) << head;
}

TEST(Replay, BodilessStatusesHaveNoLengthAndUnknownOnesNoReason) {
  storage::StoredResponse r;
  r.status = 204;
  std::string head;
  AppendReplayHead(r, true, true, "rid", &head);
  EXPECT_EQ(head.find("Content-Length"), std::string::npos) << head;
  EXPECT_FALSE(ReplayHasBody(304));
  EXPECT_TRUE(ReplayHasBody(200));
  r.status = 299;
  head.clear();
  AppendReplayHead(r, true, true, "rid", &head);
  EXPECT_EQ(head.rfind("HTTP/1.1 299 \r\n", 0), 0u) << head;
  EXPECT_NE(head.find("Content-Length: 0\r\n"), std::string::npos) << head;
}

}  // namespace
}  // namespace fencegate::proxy
