// PutHead: limits.max_header_bytes bounds a request head whole, however its
// bytes are cut into reads and fields.

#include "net/head_limit.h"

#include <gtest/gtest.h>

#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http/buffer_body.hpp>
#include <boost/beast/http/parser.hpp>
#include <cstdio>
#include <string>
#include <string_view>

namespace fencegate::proxy {
namespace {

namespace http = boost::beast::http;
using boost::beast::error_code;

struct Outcome {
  bool done = false;      // the head is complete (or failed)
  error_code ec;
  uint64_t consumed = 0;  // head bytes the parser took
  size_t held = 0;        // the most bytes buffered unparsed after a put
};

// Feeds `input` to a fresh parser `piece` bytes at a time, appended to a
// buffer as reads append to the session's, until PutHead says the head is
// complete or failed.
Outcome Feed(std::string_view input, size_t piece, uint64_t max) {
  http::request_parser<http::buffer_body> parser;
  boost::beast::flat_buffer buffer;
  Outcome out;
  size_t offset = 0;
  while (!out.done && offset < input.size()) {
    const size_t n = std::min(piece, input.size() - offset);
    buffer.commit(boost::asio::buffer_copy(buffer.prepare(n),
                                           boost::asio::buffer(input.data() + offset, n)));
    offset += n;
    out.done = PutHead(parser, buffer, max, &out.consumed, out.ec);
    out.held = std::max(out.held, buffer.size());
  }
  return out;
}

// A head of exactly `size` bytes (request line to the blank line), padded
// with one field.
std::string HeadOf(size_t size) {
  const std::string start = "PUT /objects/a HTTP/1.1\r\nHost: x\r\nX-Pad: ";
  const std::string end = "\r\n\r\n";
  return start + std::string(size - start.size() - end.size(), 'p') + end;
}

// 6,000 fields of 32 bytes behind a first part of 127 bytes: every 512-byte
// piece ends one byte into a field, so Beast's parser takes each piece's
// fields whole and never holds more than a piece unparsed.
std::string ManySmallFields() {
  std::string head = "PUT /objects/a HTTP/1.1\r\nHost: x\r\nX-Pad: ";
  head += std::string(127 - head.size() - 2, 'p') + "\r\n";
  char field[40];
  for (int i = 0; i < 6000; ++i) {
    std::snprintf(field, sizeof field, "X-Field-%05d: %s\r\n", i, "vvvvvvvvvvvvvvv");
    head += field;
  }
  return head + "\r\n";
}

TEST(HeadLimit, ManySmallFieldsInPiecesAreRefusedOnceTheHeadPassesTheLimit) {
  const std::string head = ManySmallFields();
  ASSERT_EQ(head.size(), 127u + 6000 * 32 + 2);
  // What Beast's own limit does with it: the whole head goes through.
  {
    http::request_parser<http::buffer_body> parser;
    parser.header_limit(16384);
    boost::beast::flat_buffer buffer;
    error_code ec;
    for (size_t offset = 0; offset < head.size() && !parser.is_header_done(); offset += 512) {
      const size_t n = std::min<size_t>(512, head.size() - offset);
      buffer.commit(boost::asio::buffer_copy(buffer.prepare(n),
                                             boost::asio::buffer(head.data() + offset, n)));
      buffer.consume(parser.put(buffer.data(), ec));
      if (ec == http::error::need_more) ec = {};
      ASSERT_FALSE(ec) << ec.message();
    }
    EXPECT_TRUE(parser.is_header_done());
  }
  Outcome o = Feed(head, 512, 16384);
  EXPECT_TRUE(o.done);
  EXPECT_EQ(o.ec, http::error::header_limit);
  EXPECT_LE(o.consumed, 16384u + 512);  // refused within a read of the limit
  EXPECT_LT(o.held, size_t{1024});
}

TEST(HeadLimit, AHeadOfExactlyTheLimitPassesOneByteMoreDoesNot) {
  for (size_t piece : {size_t{1}, size_t{7}, size_t{512}, size_t{1} << 20}) {
    Outcome o = Feed(HeadOf(2000), piece, 2000);
    EXPECT_TRUE(o.done) << piece;
    EXPECT_FALSE(o.ec) << piece << ": " << o.ec.message();
    EXPECT_EQ(o.consumed, 2000u);

    o = Feed(HeadOf(2001), piece, 2000);
    EXPECT_TRUE(o.done) << piece;
    EXPECT_EQ(o.ec, http::error::header_limit) << piece;
  }
}

TEST(HeadLimit, OneHugeFieldIsRefusedBeforeItIsWhole) {
  std::string head = "PUT /objects/a HTTP/1.1\r\nHost: x\r\nX-Big: " + std::string(1 << 20, 'b');
  Outcome o = Feed(head, 4096, 16384);
  EXPECT_TRUE(o.done);
  EXPECT_EQ(o.ec, http::error::header_limit);
  EXPECT_LT(o.held, size_t{16384} + 4096);
}

TEST(HeadLimit, TheBodyAndTheNextRequestAreNotCounted) {
  // Bytes behind the head stay in the buffer for the body read.
  const std::string head = HeadOf(100);
  Outcome o = Feed(head + "PUT /objects/b HTTP/1.1\r\nHost: x\r\n\r\n", 1 << 20, 100);
  EXPECT_TRUE(o.done);
  EXPECT_FALSE(o.ec) << o.ec.message();
  EXPECT_EQ(o.consumed, 100u);
}

}  // namespace
}  // namespace fencegate::proxy
