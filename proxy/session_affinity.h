#pragma once
// SessionAffinity: which I/O thread a client connection should live on, and
// the move there. A key has a home thread (HomeOf); a session whose
// forwarded writes keep waiting behind other writes of keys homed on another
// thread moves to that thread between two requests, so that the hand-overs
// of a hot key stay on one thread. Why, and what it saves:
// docs/architecture.md, "Moving a session to its key's thread".
//
// One per HttpSession (a member), on the session's thread only. Move() is
// the one part that reaches another thread: it posts the connection there.

#include <boost/beast/core/flat_buffer.hpp>
#include <cstdint>
#include <string>
#include <string_view>

#include "net/client_limit.h"
#include "fence/key_queue.h"
#include "net/listener.h"
#include "proxy/proxy_context.h"

namespace fencegate::proxy {

class SessionAffinity {
 public:
  // `can_move`: false for a TLS connection, whose TLS state lives in its
  // session's stream object and cannot follow the socket.
  SessionAffinity(ProxyContext& context, Worker& worker, bool can_move)
      : ctx_(context), worker_(worker), can_move_(can_move) {}

  // The Worker whose thread `key`'s writes gather on
  // (KeyQueue::ShardOf(key) modulo the number of threads); nullptr with one
  // thread.
  Worker* HomeOf(const std::string& key) const;

  // A forwarded write of `key` got its turn. Counts it when it waited
  // behind another write of the key (KeyLease::waited) and the key's home
  // is another thread: waits in a row for keys of the same other thread
  // make a move due. A wait for a key homed here starts the count again.
  void NoteTurn(const KeyLease& lease, const std::string& key);

  // The thread to move to now, or nullptr: kFirstMoveAfter waits in a row
  // for a connection that has not moved yet, kMoveAfter for one that has.
  Worker* Due() const {
    return home_votes_ >= (moved_ ? kMoveAfter : kFirstMoveAfter) ? wanted_home_ : nullptr;
  }

  // This session continues a connection that moved here (HttpSession::Resume).
  void Arrived() { moved_ = true; }

  // Hands the client connection to `home`'s thread, where a new HttpSession
  // continues it (HttpSession::Resume) with `pending` (bytes the client
  // already sent of its next requests), `slot` and `requests_served`.
  // Only between two requests: the response went whole and no operation is
  // pending on `socket`. True when the socket went (the calling session
  // ends; `slot` is taken). False when it could not be released: the count
  // starts again and the caller keeps the connection (and `slot`).
  // `client_ip` and `key` are for the debug log only.
  bool Move(Worker& home, Listener::Socket& socket, const boost::beast::flat_buffer& pending,
            ClientSlot& slot, uint64_t requests_served, std::string_view client_ip,
            std::string_view key);

 private:
  static constexpr int kFirstMoveAfter = 1;
  static constexpr int kMoveAfter = 2;

  ProxyContext& ctx_;
  Worker& worker_;
  bool can_move_;
  bool moved_ = false;              // Arrived: this connection moved once already
  int home_votes_ = 0;              // waits in a row for keys homed on wanted_home_
  Worker* wanted_home_ = nullptr;
};

}  // namespace fencegate::proxy
