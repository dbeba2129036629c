#include "net/client_limit.h"

#include <utility>

namespace fencegate::proxy {

namespace ip = boost::asio::ip;

namespace {
ip::address Canonical(const ip::address& address) {
  if (address.is_v6() && address.to_v6().is_v4_mapped()) {
    return ip::make_address_v4(ip::v4_mapped, address.to_v6());
  }
  return address;
}
}  // namespace

ClientSlot::ClientSlot(ClientSlot&& other) noexcept
    : limiter_(std::exchange(other.limiter_, nullptr)), address_(std::move(other.address_)) {}

ClientSlot& ClientSlot::operator=(ClientSlot&& other) noexcept {
  if (this != &other) {
    Release();
    limiter_ = std::exchange(other.limiter_, nullptr);
    address_ = std::move(other.address_);
  }
  return *this;
}

void ClientSlot::Release() {
  if (limiter_ != nullptr) std::exchange(limiter_, nullptr)->Release(address_);
}

std::optional<ClientSlot> ClientLimiter::TryAcquire(const ip::address& address) {
  if (max_ == 0) return ClientSlot();
  ip::address key = Canonical(address);
  std::lock_guard lock(mu_);
  uint64_t& n = counts_[key];
  if (n >= max_) return std::nullopt;
  ++n;
  return ClientSlot(this, key);
}

void ClientLimiter::Release(const ip::address& address) {
  std::lock_guard lock(mu_);
  auto it = counts_.find(address);
  if (it == counts_.end()) return;
  if (--it->second == 0) counts_.erase(it);
}

uint64_t ClientLimiter::count(const ip::address& address) const {
  std::lock_guard lock(mu_);
  auto it = counts_.find(Canonical(address));
  return it == counts_.end() ? 0 : it->second;
}

size_t ClientLimiter::clients() const {
  std::lock_guard lock(mu_);
  return counts_.size();
}

}  // namespace fencegate::proxy
