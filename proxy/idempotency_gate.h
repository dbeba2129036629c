#pragma once
// IdempotencyGate: the session's side of idempotency keys (docs/contract.md,
// "Idempotency keys"). For a write that carries a key on a route with
// `idempotency:` (WriteIntent::idempotency), before anything is forwarded:
// it reserves the key in the store. Reserved: the request runs (the fence
// next, when the route fences) while the gate hashes its body as it streams
// and keeps its response as it is relayed; once the response is read whole
// the record is finished with both. Not reserved: a finished record with
// the same fingerprint is replayed (never forwarded, never fenced); another
// fingerprint is 422; a running one is 409, or with `concurrent: wait` is
// looked up again until it finishes (then replayed), goes (then reserved
// again) or upstream.timeout passes (then 409). A reservation whose request
// was never sent upstream, or whose body the client cut short, is released.
//
// While the request lives (its body arrives, it waits in a key's queue, it
// is at the backend, its response streams) the reservation is renewed every
// quarter of in_flight_timeout, and the process holds the key (HeldKeys):
// a repeat never runs beside it. One that went upstream and got no whole
// response stays reserved for in_flight_timeout after that: the backend may
// have run it. The response goes to the client only once its record is
// stored; a record that cannot be stored after a few tries is kept and
// stored in the background while the process lives (the key stays held),
// and the client gets 503 store_unavailable instead of the response (or,
// when part of it went already, a cut connection).
//
// Owned by its HttpSession (a member) and run on the session's thread only,
// like UpstreamExchange; the store's answers come back to that thread, and
// each holds the session.

#include <boost/asio/steady_timer.hpp>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "fence/idempotency_key.h"
#include "proxy/held_keys.h"
#include "storage/idempotency_store.h"

namespace fencegate::proxy {

class HttpSession;

class IdempotencyGate {
 public:
  explicit IdempotencyGate(HttpSession& session) : session_(session) {}

  // The request's key was read (WriteIntent::idempotency): reserve it, then
  // run the request (HttpSession::Proceed) or answer it.
  void Begin();

  // While the request runs: hooks of the exchange. No-ops otherwise.
  bool running() const { return state_ == State::kRunning; }
  void OnRequestBody(const char* data, size_t size) {
    if (state_ == State::kRunning) body_sha_->Update(data, size);
  }
  void OnResponseHead();  // the final response head was read
  void OnResponseBody(const char* data, size_t size);
  // The response was read whole: finish the record.
  void OnResponseComplete();
  // The request will not run (refused by the fence) or never reached the
  // backend: give the key back.
  void Release();

  // A store call that settles the record is pending.
  bool pending() const { return store_pending_; }
  // The response of the request that ran goes to the client only once its
  // record is stored (a client that has the response can count on a repeat
  // getting it back): while pending(), keeps `resume` (which writes it) and
  // returns true; runs it when the store has answered.
  bool Hold(std::function<void()> resume);
  // HttpSession::FinishRequest: true when a store call is pending; the gate
  // then calls FinishRequest(keep_alive) itself when it is done, so that a
  // repeat behind this request sees the record settled.
  bool HoldFinish(bool keep_alive);
  // The session closes: stop waiting.
  void Cancel();
  // Between requests.
  void Reset();

 private:
  enum class State {
    kOff,        // not an idempotent request
    kReserving,  // ReserveKey or a wait's LookupKey pending
    kWaiting,    // concurrent: wait, between two lookups
    kRunning,    // reserved: the request runs
    kRepeat,     // a finished record found: reading the repeat's body
    kSettled,    // finished or released (or a store call for that pending)
  };
  using Clock = std::chrono::steady_clock;

  void Reserve();
  // Another request of this process holds the key (HeldKeys): answered as
  // a running reservation of the store would be.
  bool HeldHere();
  // The reservation's renewals, while the request lives.
  void ScheduleRenewal();
  void Renew(uint64_t owner);
  void OnRenewed(uint64_t owner, const storage::Status& status, bool applied);
  void StopRenewing();
  // The request went upstream and ends without a whole response: the key
  // stays reserved (and held) for in_flight_timeout from now.
  void Abandon();
  // Stores the finished record (finished_), tried again a few times.
  void StoreFinished();
  void OnFinished(const storage::Status& status, bool applied);
  // The record is not stored: the response is not relayed.
  void Withhold(const std::string& why);
  std::chrono::milliseconds InFlightTimeout() const;
  HeldKeys& held() const;
  void OnReserved(const storage::Status& status, storage::Reservation reservation);
  // A live record of another request is there.
  void OnExisting(storage::IdempotencyRecord record);
  void Poll();
  void OnPolled(const storage::Status& status, std::optional<storage::IdempotencyRecord> record);
  void DoRepeatBody();
  void OnRepeatBodyPiece(boost::system::error_code ec);
  void Replay();
  void StartBodyDigest();
  void StoreError(const storage::Status& status, const char* what);
  void CountStoreError();
  // The handler of a store call: fn(gate, status, value) on the session's
  // thread (idempotency_gate.cc).
  template <class Fn>
  auto Answered(Fn fn);
  void AfterStore();
  storage::IdempotencyStore& store() const;
  const config::IdempotencyConfig& config() const;

  HttpSession& session_;
  State state_ = State::kOff;
  uint64_t owner_ = 0;
  // The reservation's record key, client key and in_flight_timeout, kept
  // from Reserve: the request's intent is gone when an unknown outcome is
  // settled (Reset) or a store answer comes back.
  std::string key_;
  std::string client_key_;
  std::chrono::milliseconds in_flight_{0};
  int64_t created_ms_ = 0;
  std::string head_digest_;
  // The body's digest, made on first use (most connections never need
  // one), then started over for each request (StartBodyDigest).
  std::optional<Sha256> body_sha_;
  // kRepeat: the finished record whose response a repeat gets.
  std::optional<storage::IdempotencyRecord> found_;
  // kRunning: the response as it is relayed.
  storage::StoredResponse captured_;
  // The finished record while it is being stored, and the tries so far.
  std::optional<storage::IdempotencyRecord> finished_;
  int finish_tries_ = 0;
  std::optional<boost::asio::steady_timer> renew_timer_;
  std::optional<boost::asio::steady_timer> finish_timer_;
  bool renew_warned_ = false;  // one log line per request for failed renewals
  bool response_seen_ = false;
  // A store call that settles the record is pending; when FinishRequest
  // came meanwhile, the keep-alive it was called with.
  bool store_pending_ = false;
  std::optional<bool> finish_after_store_;
  std::function<void()> resume_;  // Hold's
  // The session, kept alive while a store call is pending (Answered).
  std::shared_ptr<HttpSession> pending_self_;
  // concurrent: wait.
  std::optional<boost::asio::steady_timer> timer_;
  Clock::time_point wait_until_;
  std::chrono::milliseconds wait_step_{0};
  std::string replay_head_;
  bool continue_sent_ = false;  // a repeat's 100 Continue went to the client
  bool closed_ = false;         // the session closed (Cancel): answers are dropped
};

}  // namespace fencegate::proxy
