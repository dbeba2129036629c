#include "proxy/session_affinity.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <boost/asio/post.hpp>
#include <boost/beast/core/buffers_to_string.hpp>
#include <memory>
#include <utility>

#include "fence/handoff.h"
#include "proxy/http_session.h"

namespace fencegate::proxy {

Worker* SessionAffinity::HomeOf(const std::string& key) const {
  if (ctx_.workers.size() < 2) return nullptr;
  return ctx_.workers[KeyQueue::ShardOf(key) % ctx_.workers.size()];
}

void SessionAffinity::NoteTurn(const KeyLease& lease, const std::string& key) {
  // Only a write that waited behind another one of its key: a key nobody
  // else writes pulls no session anywhere.
  if (!lease.waited() || !can_move_) return;
  Worker* home = HomeOf(key);
  if (home == nullptr || home == &worker_) {
    wanted_home_ = nullptr;
    home_votes_ = 0;
    return;
  }
  home_votes_ = home == wanted_home_ ? home_votes_ + 1 : 1;
  wanted_home_ = home;
}

bool SessionAffinity::Move(Worker& home, Listener::Socket& socket,
                           const boost::beast::flat_buffer& pending, ClientSlot& slot,
                           uint64_t requests_served, std::string_view client_ip,
                           std::string_view key) {
  boost::system::error_code ec;
  // Closes the socket if the post never runs (shutdown).
  HandedConnection client = HandedConnection::From(socket, ec);
  if (ec) {
    home_votes_ = 0;
    return false;
  }
  if (spdlog::should_log(spdlog::level::debug)) {
    const auto& workers = ctx_.workers;
    const auto index = std::find(workers.begin(), workers.end(), &home) - workers.begin();
    spdlog::debug("client {} moves to the I/O thread of key {} (thread {})", client_ip, key, index);
  }
  boost::asio::post(home.ioc, [ctx = &ctx_, home = &home, client = std::move(client),
                               slot = std::move(slot),
                               pending = boost::beast::buffers_to_string(pending.data()),
                               served = requests_served]() mutable {
    // A drain that began meanwhile may have closed that thread's sessions
    // already (and at its end stops their sweep): close this one, as
    // HttpSession::FinishRequest closes a kept-alive connection once
    // draining.
    if (ctx->draining.load(std::memory_order_relaxed)) return;  // `client` closes it
    Listener::Socket socket(home->ioc);
    boost::system::error_code ec;
    client.MoveInto(socket, ec);
    if (ec) return;  // `client` closes it
    auto session = std::make_shared<HttpSession>(std::move(socket), *ctx, *home);
    session->HoldClientSlot(std::move(slot));
    session->Resume(pending, served);
  });
  return true;
}

}  // namespace fencegate::proxy
