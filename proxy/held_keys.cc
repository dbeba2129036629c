#include "proxy/held_keys.h"

namespace fencegate::proxy {

void HeldKeys::Hold(const std::string& key, uint64_t owner, const std::string& head_digest,
                    std::optional<Clock::time_point> until) {
  std::lock_guard lock(mu_);
  if (++holds_ % kSweepEvery == 0) SweepLocked(Clock::now());
  held_[key] = Entry{Holder{owner, head_digest}, until};
}

void HeldKeys::SweepLocked(Clock::time_point now) const {
  std::erase_if(held_, [now](const auto& entry) {
    return entry.second.until && now >= *entry.second.until;
  });
}

void HeldKeys::Drop(const std::string& key, uint64_t owner) {
  std::lock_guard lock(mu_);
  auto it = held_.find(key);
  if (it != held_.end() && it->second.holder.owner == owner) held_.erase(it);
}

void HeldKeys::DropAt(const std::string& key, uint64_t owner, Clock::time_point until) {
  std::lock_guard lock(mu_);
  auto it = held_.find(key);
  if (it != held_.end() && it->second.holder.owner == owner) it->second.until = until;
}

std::optional<HeldKeys::Holder> HeldKeys::Holding(const std::string& key) const {
  std::lock_guard lock(mu_);
  auto it = held_.find(key);
  if (it == held_.end()) return std::nullopt;
  if (it->second.until && Clock::now() >= *it->second.until) {
    held_.erase(it);  // its time is over: forgotten on the next look
    return std::nullopt;
  }
  return it->second.holder;
}

size_t HeldKeys::size() const {
  std::lock_guard lock(mu_);
  return held_.size();
}

}  // namespace fencegate::proxy
