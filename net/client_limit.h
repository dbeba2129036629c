#pragma once
// ClientLimiter: how many connections each client address may hold open at
// once (limits.max_connections_per_client), so that one client cannot take
// every descriptor that limits.max_connections leaves. The address is the
// TCP peer's: clients behind one proxy or NAT share a budget.
//
// Thread-safe: sessions start and end on any worker thread. A ClientSlot is
// one counted connection; destroying it gives the slot back.

#include <boost/asio/ip/address.hpp>
#include <cstdint>
#include <mutex>
#include <optional>
#include <unordered_map>
#include <utility>

namespace fencegate::proxy {

class ClientLimiter;

class ClientSlot {
 public:
  ClientSlot() = default;
  ClientSlot(ClientSlot&& other) noexcept;
  ClientSlot& operator=(ClientSlot&& other) noexcept;
  ClientSlot(const ClientSlot&) = delete;
  ClientSlot& operator=(const ClientSlot&) = delete;
  ~ClientSlot() { Release(); }

  void Release();
  bool held() const { return limiter_ != nullptr; }

 private:
  friend class ClientLimiter;
  ClientSlot(ClientLimiter* limiter, boost::asio::ip::address address)
      : limiter_(limiter), address_(std::move(address)) {}
  ClientLimiter* limiter_ = nullptr;
  boost::asio::ip::address address_;
};

class ClientLimiter {
 public:
  // max_per_client 0 = no limit (every TryAcquire succeeds, nothing is counted).
  explicit ClientLimiter(uint64_t max_per_client) : max_(max_per_client) {}

  // A slot for one more connection from `address`, or nullopt when the
  // address already holds max_per_client connections (refuse it). Without
  // a limit the slot is empty (!held()) and counts nothing. IPv4-mapped
  // IPv6 addresses count as their IPv4 address.
  std::optional<ClientSlot> TryAcquire(const boost::asio::ip::address& address);

  // Connections `address` holds now (0 without a limit).
  uint64_t count(const boost::asio::ip::address& address) const;
  // Addresses holding at least one connection.
  size_t clients() const;

 private:
  friend class ClientSlot;
  void Release(const boost::asio::ip::address& address);

  const uint64_t max_;
  mutable std::mutex mu_;
  std::unordered_map<boost::asio::ip::address, uint64_t> counts_;  // guarded by mu_; no zeros
};

}  // namespace fencegate::proxy
