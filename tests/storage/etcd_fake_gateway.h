#pragma once
// FakeGateway: a listener on 127.0.0.1 that stands where an etcd member
// would and answers every request with one canned HTTP response (then
// closes the connection), or never answers at all: what the etcd client
// tests need to make a member that cannot serve, without etcd.

#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cstdint>
#include <string>
#include <thread>
#include <vector>

namespace fencegate::storage::testing {

class FakeGateway {
 public:
  // An HTTP/1.1 response with `status` and an etcd error body.
  static std::string EtcdError(int status, int code, const std::string& message) {
    const std::string body = "{\"error\":\"" + message + "\",\"message\":\"" + message +
                             "\",\"code\":" + std::to_string(code) + "}";
    return "HTTP/1.1 " + std::to_string(status) + " X\r\nContent-Type: application/json\r\n" +
           "Content-Length: " + std::to_string(body.size()) + "\r\nConnection: close\r\n\r\n" +
           body;
  }

  // answer: the whole response; "" = read requests and never answer.
  explicit FakeGateway(std::string answer) : answer_(std::move(answer)) {
    listener_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof(addr);
    if (listener_ >= 0 && ::bind(listener_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0 &&
        ::listen(listener_, 16) == 0 &&
        ::getsockname(listener_, reinterpret_cast<sockaddr*>(&addr), &len) == 0) {
      port_ = ntohs(addr.sin_port);
    }
    thread_ = std::thread([this] { Run(); });
  }
  ~FakeGateway() {
    stop_ = true;
    thread_.join();
    for (const int fd : held_) ::close(fd);
    if (listener_ >= 0) ::close(listener_);
  }
  FakeGateway(const FakeGateway&) = delete;
  FakeGateway& operator=(const FakeGateway&) = delete;

  uint16_t port() const { return port_; }
  std::string endpoint() const { return "http://127.0.0.1:" + std::to_string(port_); }
  // Requests read whole so far.
  int requests() const { return requests_.load(); }

 private:
  void Run() {
    while (!stop_) {
      pollfd p{listener_, POLLIN, 0};
      if (::poll(&p, 1, 20) <= 0) continue;
      const int fd = ::accept4(listener_, nullptr, nullptr, SOCK_CLOEXEC);
      if (fd < 0) continue;
      if (ReadRequest(fd)) {
        ++requests_;
        if (!answer_.empty()) {
          (void)::send(fd, answer_.data(), answer_.size(), MSG_NOSIGNAL);
        }
      }
      if (answer_.empty()) {
        held_.push_back(fd);  // silent: keep it open, unanswered
      } else {
        ::close(fd);
      }
    }
  }

  // Reads one request (head and Content-Length body); false when the peer
  // went away first or the test ends.
  bool ReadRequest(int fd) {
    std::string data;
    char buffer[4096];
    for (;;) {
      const size_t head_end = data.find("\r\n\r\n");
      if (head_end != std::string::npos) {
        size_t length = 0;
        const size_t at = data.find("Content-Length: ");
        if (at != std::string::npos && at < head_end) length = std::stoul(data.substr(at + 16));
        if (data.size() >= head_end + 4 + length) return true;
      }
      pollfd p{fd, POLLIN, 0};
      if (stop_) return false;
      if (::poll(&p, 1, 20) <= 0) continue;
      const ssize_t n = ::recv(fd, buffer, sizeof(buffer), 0);
      if (n <= 0) return false;
      data.append(buffer, static_cast<size_t>(n));
    }
  }

  const std::string answer_;
  int listener_ = -1;
  uint16_t port_ = 0;
  std::atomic<bool> stop_{false};
  std::atomic<int> requests_{0};
  std::vector<int> held_;  // only the thread, then the destructor after join
  std::thread thread_;
};

}  // namespace fencegate::storage::testing
