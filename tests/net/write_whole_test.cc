// WriteWhole on a real loopback connection. The partial write (the socket
// takes part of the message at once, async_write sends the rest) needs a
// full send buffer, which loopback's autotuned buffers almost never give:
// here the writer's SO_SNDBUF and the reader's SO_RCVBUF are fixed small,
// and the reader reads only after WriteWhole has returned.

#include "net/write_whole.h"

#include <gtest/gtest.h>

#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/read.hpp>
#include <boost/beast/core/basic_stream.hpp>
#include <array>
#include <chrono>
#include <memory>
#include <optional>
#include <string>

namespace fencegate::proxy {
namespace {

namespace asio = boost::asio;
using tcp = asio::ip::tcp;
using Stream = boost::beast::basic_stream<tcp, asio::io_context::executor_type>;

// A connected pair on 127.0.0.1: `writer` (a Beast stream, as the proxy
// uses) and `reader`, both with small fixed buffers when `small`.
struct StreamPair {
  explicit StreamPair(bool small) : writer(ioc.get_executor()), reader(ioc) {
    tcp::acceptor acceptor(ioc, tcp::endpoint(asio::ip::address_v4::loopback(), 0));
    if (small) acceptor.set_option(asio::socket_base::receive_buffer_size(4096));
    writer.socket().open(tcp::v4());
    if (small) writer.socket().set_option(asio::socket_base::send_buffer_size(4096));
    writer.socket().connect(acceptor.local_endpoint());
    acceptor.accept(reader);
    writer.socket().non_blocking(true);
  }
  asio::io_context ioc;
  Stream writer;
  tcp::socket reader;
};

// Reads what the writer sends until it shuts down its side: `got` holds
// every byte, however many the writer sent.
void ReadToEnd(tcp::socket& reader, std::string& got) {
  auto chunk = std::make_shared<std::array<char, 65536>>();
  reader.async_read_some(asio::buffer(*chunk), [&reader, &got, chunk](
                                                   boost::system::error_code ec, size_t n) {
    got.append(chunk->data(), n);
    if (!ec) ReadToEnd(reader, got);
  });
}

std::string Pattern(size_t n, char seed) {
  std::string s(n, '\0');
  for (size_t i = 0; i < n; ++i) s[i] = static_cast<char>(seed + i * 7 % 61);
  return s;
}

TEST(WriteWhole, WhatTheSocketDoesNotTakeAtOnceFollowsAsynchronously) {
  StreamPair p(/*small=*/true);
  Deadline deadline;
  const std::string head = Pattern(3000, 'A');
  const std::string body = Pattern(size_t{2} << 20, 'a');  // far beyond both buffers
  std::optional<boost::system::error_code> result;
  bool at_once = true;
  WriteWhole(p.writer, {asio::buffer(head), asio::buffer(body)}, deadline, std::chrono::seconds(30),
             [&](boost::system::error_code ec, bool whole_at_once) {
               result = ec;
               at_once = whole_at_once;
               p.writer.socket().shutdown(tcp::socket::shutdown_send, ec);
             });
  ASSERT_FALSE(result.has_value()) << "the socket took 2 MiB at once: nothing was tested";
  EXPECT_TRUE(deadline.armed()) << "the pending write is not bounded by the deadline";

  std::string got;
  ReadToEnd(p.reader, got);
  p.ioc.run();
  ASSERT_TRUE(result.has_value()) << "done never ran";
  EXPECT_FALSE(*result) << result->message();
  EXPECT_FALSE(at_once) << "done said the socket took it all at once";
  EXPECT_FALSE(deadline.armed()) << "the deadline outlived the write";
  ASSERT_EQ(got.size(), head.size() + body.size());
  EXPECT_TRUE(got == head + body) << "the bytes differ from head + body";
}

TEST(WriteWhole, AMessageTheSocketTakesWholeIsDoneBeforeItReturns) {
  StreamPair p(/*small=*/false);
  Deadline deadline;
  const std::string head = "HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\n";
  const std::string body = "hello";
  std::optional<boost::system::error_code> result;
  bool at_once = false;
  WriteWhole(p.writer, {asio::buffer(head), asio::buffer(body)}, deadline, std::chrono::seconds(30),
             [&](boost::system::error_code ec, bool whole_at_once) {
               result = ec;
               at_once = whole_at_once;
             });
  ASSERT_TRUE(result.has_value());
  EXPECT_FALSE(*result) << result->message();
  EXPECT_TRUE(at_once) << "written before WriteWhole returned, yet done says otherwise";
  EXPECT_FALSE(deadline.armed()) << "no operation was pending, yet the deadline was armed";
  std::string got(head.size() + body.size(), '\0');
  asio::read(p.reader, asio::buffer(got));
  EXPECT_EQ(got, head + body);
}

TEST(WriteWhole, ABlockingSocketWritesEverythingAsynchronously) {
  StreamPair p(/*small=*/true);
  Deadline deadline;
  p.writer.socket().non_blocking(false);  // as a TLS stream's socket
  const std::string head = Pattern(100, 'H');
  const std::string body = Pattern(size_t{256} << 10, 'b');
  std::optional<boost::system::error_code> result;
  WriteWhole(p.writer, {asio::buffer(head), asio::buffer(body)}, deadline, std::chrono::seconds(30),
             [&](boost::system::error_code ec, bool) {
               result = ec;
               p.writer.socket().shutdown(tcp::socket::shutdown_send, ec);
             });
  EXPECT_FALSE(result.has_value());
  std::string got;
  ReadToEnd(p.reader, got);
  p.ioc.run();
  ASSERT_TRUE(result.has_value());
  EXPECT_FALSE(*result) << result->message();
  ASSERT_EQ(got.size(), head.size() + body.size());
  EXPECT_TRUE(got == head + body);
}

TEST(WriteWhole, AWriteToAClosedPeerReportsTheError) {
  StreamPair p(/*small=*/true);
  Deadline deadline;
  p.reader.set_option(asio::socket_base::linger(true, 0));
  p.reader.close();  // RST: the writer's sends fail
  const std::string body = Pattern(size_t{1} << 20, 'x');
  std::optional<boost::system::error_code> result;
  WriteWhole(p.writer, {asio::const_buffer(), asio::buffer(body)}, deadline, std::chrono::seconds(30),
             [&](boost::system::error_code ec, bool) { result = ec; });
  p.ioc.run();
  ASSERT_TRUE(result.has_value());
  EXPECT_TRUE(*result) << "a write to a reset connection reported success";
}

}  // namespace
}  // namespace fencegate::proxy
