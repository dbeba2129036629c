#include "proxy/idempotency_gate.h"

#include <spdlog/spdlog.h>

#include <boost/asio/dispatch.hpp>
#include <boost/asio/write.hpp>
#include <random>

#include "net/write_whole.h"
#include "proxy/hop_by_hop.h"
#include "proxy/http_session.h"
#include "proxy/relay_io.h"
#include "proxy/replay.h"

namespace fencegate::proxy {

namespace asio = boost::asio;
using storage::IdempotencyRecord;
using storage::Status;

namespace {

int64_t NowMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

// Who holds a reservation: drawn at random per request, so that a late
// finish of an expired reservation cannot settle the one that replaced it.
uint64_t NewOwner() {
  thread_local std::mt19937_64 engine{std::random_device{}()};
  uint64_t owner = 0;
  while (owner == 0) owner = engine();
  return owner;
}

// The first lookup of a waiting repeat comes after this, each next one
// after twice the last, up to kMaxWaitStep.
constexpr std::chrono::milliseconds kFirstWaitStep{2};
constexpr std::chrono::milliseconds kMaxWaitStep{100};

// Storing a finished record is tried this many times, the next try after
// kFinishStep times the tries so far, before the client is refused.
constexpr int kFinishTries = 4;
constexpr std::chrono::milliseconds kFinishStep{100};
// A record the request could not store is tried again this often, in the
// background, while the process lives.
constexpr std::chrono::seconds kBackgroundStep{1};

// A finished record that its request could not store: stored in the
// background, every kBackgroundStep, until the store takes it (or a repeat
// took the key over); the process holds the key meanwhile.
class BackgroundFinish : public std::enable_shared_from_this<BackgroundFinish> {
 public:
  BackgroundFinish(const asio::any_io_executor& ex, storage::IdempotencyStore& store,
                   HeldKeys& held, IdempotencyCounters& counters, std::string key,
                   std::string client_key, IdempotencyRecord record)
      : timer_(ex), store_(store), held_(held), counters_(counters),
        key_(std::move(key)), client_key_(std::move(client_key)), record_(std::move(record)) {}

  void Wait() {
    timer_.expires_after(kBackgroundStep);
    timer_.async_wait([self = shared_from_this()](boost::system::error_code ec) {
      if (!ec) self->Try();
    });
  }

 private:
  void Try() {
    store_.FinishKey(key_, record_, NowMsOf(), [self = shared_from_this()](const Status& s,
                                                                        bool applied) {
      asio::any_io_executor ex = self->timer_.get_executor();
      asio::dispatch(ex, [self, s, applied] { self->OnAnswer(s, applied); });
    });
  }
  void OnAnswer(const Status& s, bool applied) {
    if (!s.ok()) {
      counters_.store_errors.fetch_add(1, std::memory_order_relaxed);
      return Wait();
    }
    held_.Drop(key_, record_.owner);
    if (applied) {
      spdlog::info("idempotency key {}: its response is stored now; repeats get it", client_key_);
    } else {
      spdlog::error("idempotency key {}: a repeat took the key over before its response could be "
                    "stored; the key's record is the repeat's",
                    client_key_);
    }
  }
  static int64_t NowMsOf() {
    return std::chrono::duration_cast<std::chrono::milliseconds>(
               std::chrono::system_clock::now().time_since_epoch())
        .count();
  }

  asio::steady_timer timer_;
  storage::IdempotencyStore& store_;
  HeldKeys& held_;
  IdempotencyCounters& counters_;
  const std::string key_;
  const std::string client_key_;
  const IdempotencyRecord record_;
};

}  // namespace

// The store answers on its own thread. Its handler holds no reference to
// the session: the one reference (pending_self_) is moved into the
// dispatch to the session's thread, so that the session's last reference
// is always dropped there (it leaves its worker's list in its destructor),
// whatever copies of the handler the store keeps.
template <class Fn>
auto IdempotencyGate::Answered(Fn fn) {
  pending_self_ = session_.shared_from_this();
  asio::any_io_executor ex = session_.stream_.get_executor();
  return [gate = this, ex, fn = std::move(fn)](const Status& s, auto value) {
    std::shared_ptr<HttpSession> self = std::move(gate->pending_self_);
    asio::dispatch(ex, [self = std::move(self), fn, s, value = std::move(value)]() mutable {
      fn(self->idem_, s, std::move(value));
    });
  };
}

storage::IdempotencyStore& IdempotencyGate::store() const { return *session_.ctx_.idempotency; }

HeldKeys& IdempotencyGate::held() const { return session_.ctx_.held_keys; }

const config::IdempotencyConfig& IdempotencyGate::config() const {
  return *session_.intent_.idempotency.config;
}

void IdempotencyGate::Reset() {
  if (state_ == State::kRunning) Abandon();  // went upstream, no whole response
  StopRenewing();
  finished_.reset();
  finish_tries_ = 0;
  renew_warned_ = false;
  state_ = State::kOff;
  found_.reset();
  captured_ = {};
  response_seen_ = false;
  store_pending_ = false;
  finish_after_store_.reset();
  resume_ = nullptr;
  continue_sent_ = false;
  std::string().swap(replay_head_);
}

void IdempotencyGate::Cancel() {
  closed_ = true;
  if (timer_) timer_->cancel();
  // A reservation whose request went upstream stays (the session releases
  // one that did not); a record being stored keeps being stored.
  if (state_ == State::kRunning && session_.exchange_.request_started()) Abandon();
  if (!finished_) StopRenewing();
}

void IdempotencyGate::Abandon() {
  state_ = State::kSettled;
  StopRenewing();
  held().DropAt(key_, owner_, Clock::now() + in_flight_);
  const int64_t now = NowMs();
  auto* counters = &session_.ctx_.idempotency_counters;
  store().RenewKey(key_, owner_, now + in_flight_.count(), now,
                   [counters](const Status& s, bool) {
                     if (!s.ok()) counters->store_errors.fetch_add(1, std::memory_order_relaxed);
                   });
}

void IdempotencyGate::ScheduleRenewal() {
  if (!renew_timer_) renew_timer_.emplace(session_.stream_.get_executor());
  renew_timer_->expires_after(
      std::max<std::chrono::milliseconds>(in_flight_ / 4, std::chrono::milliseconds(50)));
  renew_timer_->async_wait(
      [self = session_.shared_from_this(), owner = owner_](boost::system::error_code ec) {
        if (!ec) self->idem_.Renew(owner);
      });
}

void IdempotencyGate::StopRenewing() {
  if (renew_timer_) renew_timer_->cancel();
}

void IdempotencyGate::Renew(uint64_t owner) {
  if (owner != owner_ || !(state_ == State::kRunning || finished_)) return;
  const int64_t now = NowMs();
  std::weak_ptr<HttpSession> weak = session_.shared_from_this();
  asio::any_io_executor ex = session_.stream_.get_executor();
  store().RenewKey(key_, owner, now + in_flight_.count(), now,
                   [weak = std::move(weak), ex, owner](const Status& s, bool applied) {
                     asio::dispatch(ex, [weak, owner, s, applied] {
                       if (auto self = weak.lock()) self->idem_.OnRenewed(owner, s, applied);
                     });
                   });
  ScheduleRenewal();
}

void IdempotencyGate::OnRenewed(uint64_t owner, const Status& status, bool applied) {
  if (owner != owner_ || renew_warned_) return;
  if (!status.ok()) {
    CountStoreError();
    renew_warned_ = true;
    spdlog::warn("idempotency key {}: renewing its reservation failed ({}); this process holds "
                 "the key while the request lives, another replica may take it once "
                 "in_flight_timeout passes without a renewal",
                 client_key_, status.ToString());
  } else if (!applied) {
    renew_warned_ = true;
    spdlog::error("idempotency key {}: its reservation was taken over while the request ran "
                  "(not renewed within in_flight_timeout); its response will not be relayed",
                  client_key_);
  }
}

bool IdempotencyGate::HeldHere() {
  std::optional<HeldKeys::Holder> holder = held().Holding(key_);
  if (!holder) return false;
  IdempotencyRecord running;
  running.state = IdempotencyRecord::State::kReserved;
  running.owner = holder->owner;
  running.head_digest = std::move(holder->head_digest);
  OnExisting(std::move(running));
  return true;
}

void IdempotencyGate::Begin() {
  const auto& req = session_.req_parser_->get();
  const CanonicalTarget& target = session_.target_;
  const auto* destination = session_.Destination();
  head_digest_ = IdempotencyHeadDigest(
      req.method_string(), target.path,
      target.has_query ? std::optional<std::string_view>(target.query) : std::nullopt,
      destination != nullptr ? std::string_view(destination->target.path) : std::string_view{},
      session_.intent_.idempotency.scope);
  wait_until_ = Clock::now() + session_.config_->upstream.timeout;
  wait_step_ = kFirstWaitStep;
  Reserve();
}

void IdempotencyGate::Reserve() {
  state_ = State::kReserving;
  owner_ = NewOwner();
  key_ = session_.intent_.idempotency.record_key;
  client_key_ = session_.intent_.idempotency.client_key;
  in_flight_ = config().in_flight_timeout;
  if (HeldHere()) return;
  created_ms_ = NowMs();
  IdempotencyRecord reservation;
  reservation.state = IdempotencyRecord::State::kReserved;
  reservation.owner = owner_;
  reservation.created_ms = created_ms_;
  reservation.expires_ms = created_ms_ + config().in_flight_timeout.count();
  reservation.head_digest = head_digest_;
  store().ReserveKey(session_.intent_.idempotency.record_key, std::move(reservation),
                     Answered([](IdempotencyGate& gate, const Status& s, storage::Reservation r) {
                       gate.OnReserved(s, std::move(r));
                     }));
}

void IdempotencyGate::StartBodyDigest() {
  if (body_sha_) {
    body_sha_->Reset();
  } else {
    body_sha_.emplace();
  }
}

void IdempotencyGate::CountStoreError() {
  session_.ctx_.idempotency_counters.store_errors.fetch_add(1, std::memory_order_relaxed);
}

void IdempotencyGate::StoreError(const Status& status, const char* what) {
  CountStoreError();
  spdlog::error("idempotency key {} on route {}: {} failed: {}",
                session_.intent_.idempotency.client_key, session_.intent_.idempotency.route, what,
                status.ToString());
  state_ = State::kSettled;
  session_.SendReply(MakeStoreError(status), "store_unavailable");
}

void IdempotencyGate::OnReserved(const Status& status, storage::Reservation reservation) {
  if (closed_) {
    // The session closed while the store decided (a shutdown, a deadline):
    // nothing runs; a reservation made meanwhile is given back.
    if (status.ok() && reservation.reserved) {
      state_ = State::kRunning;
      Release();
    }
    return;
  }
  if (!status.ok()) return StoreError(status, "reserving the key");
  auto& counters = session_.ctx_.idempotency_counters;
  if (reservation.reserved && NowMs() + in_flight_.count() / 2 >= created_ms_ + in_flight_.count()) {
    // The store decided so late (it was slow or unreachable) that the
    // reservation has less than half its time left, or none: a repeat
    // asked meanwhile, here or through another replica, may be decided
    // right after it and take it over before the first renewal lands. The
    // request does not run; the reservation is given back.
    state_ = State::kRunning;
    Release();
    return StoreError(Status::Unavailable("the store took longer than half of in_flight_timeout "
                                          "to reserve the key; the request did not run"),
                      "reserving the key");
  }
  if (reservation.reserved) {
    state_ = State::kRunning;
    held().Hold(key_, owner_, head_digest_);
    ScheduleRenewal();
    counters.executions.fetch_add(1, std::memory_order_relaxed);
    if (reservation.replaced_expired) counters.expirations.fetch_add(1, std::memory_order_relaxed);
    StartBodyDigest();
    response_seen_ = false;
    return session_.Proceed();
  }
  OnExisting(std::move(*reservation.existing));
}

void IdempotencyGate::OnExisting(IdempotencyRecord record) {
  auto& counters = session_.ctx_.idempotency_counters;
  const IdempotentRequest& idem = session_.intent_.idempotency;
  if (record.head_digest != head_digest_) {
    counters.mismatches.fetch_add(1, std::memory_order_relaxed);
    state_ = State::kSettled;
    return session_.SendReply(
        MakeError(http::status::unprocessable_entity, "idempotency_mismatch",
                  "this idempotency key was used with another method, path or scope",
                  {{"key", idem.client_key}}),
        "idempotency_mismatch");
  }
  if (record.state == IdempotencyRecord::State::kFinished) {
    found_ = std::move(record);
    state_ = State::kRepeat;
    StartBodyDigest();
    return DoRepeatBody();
  }
  // Still running.
  if (config().concurrent == config::IdempotencyConcurrency::kWait &&
      Clock::now() + wait_step_ < wait_until_) {
    if (state_ != State::kWaiting) counters.waits.fetch_add(1, std::memory_order_relaxed);
    state_ = State::kWaiting;
    if (!timer_) timer_.emplace(session_.stream_.get_executor());
    timer_->expires_after(wait_step_);
    wait_step_ = std::min(wait_step_ * 2, kMaxWaitStep);
    timer_->async_wait([self = session_.shared_from_this()](boost::system::error_code ec) {
      if (ec) return;  // cancelled: the session closed
      self->idem_.Poll();
    });
    return;
  }
  counters.conflicts.fetch_add(1, std::memory_order_relaxed);
  state_ = State::kSettled;
  session_.SendReply(
      MakeError(http::status::conflict, "idempotency_in_flight",
                config().concurrent == config::IdempotencyConcurrency::kWait
                    ? "a request with this idempotency key is still running after "
                      "upstream.timeout; retry later"
                    : "a request with this idempotency key is still running; retry later",
                {{"key", idem.client_key}}),
      "idempotency_in_flight");
}

void IdempotencyGate::Poll() {
  state_ = State::kWaiting;
  if (HeldHere()) return;
  store().LookupKey(session_.intent_.idempotency.record_key, NowMs(),
                    Answered([](IdempotencyGate& gate, const Status& s,
                                std::optional<IdempotencyRecord> record) {
                      gate.OnPolled(s, std::move(record));
                    }));
}

void IdempotencyGate::OnPolled(const Status& status, std::optional<IdempotencyRecord> record) {
  if (closed_) return;
  if (!status.ok()) return StoreError(status, "looking the key up");
  // Released or expired: this request may run now.
  if (!record) return Reserve();
  OnExisting(std::move(*record));
}

// ---------------------------------------------------------------------------
// A repeat of a finished request: its body is read and hashed, not sent.

void IdempotencyGate::DoRepeatBody() {
  auto& parser = *session_.req_parser_;
  if (parser.is_done()) {
    if (body_sha_->Finish() != found_->body_digest) {
      session_.ctx_.idempotency_counters.mismatches.fetch_add(1, std::memory_order_relaxed);
      state_ = State::kSettled;
      return session_.SendReply(
          MakeError(http::status::unprocessable_entity, "idempotency_mismatch",
                    "this idempotency key was used with another request body",
                    {{"key", session_.intent_.idempotency.client_key}}),
          "idempotency_mismatch");
    }
    return Replay();
  }
  if (!continue_sent_ && ExpectsContinue(parser.get().base())) {
    // The client waits for a go-ahead before it sends the body that must
    // be compared.
    continue_sent_ = true;
    static constexpr std::string_view kContinue = "HTTP/1.1 100 Continue\r\n\r\n";
    return asio::async_write(
        session_.stream_, asio::buffer(kContinue.data(), kContinue.size()),
        Timed(session_.client_deadline_, session_.config_->limits.idle_timeout,
              [self = session_.shared_from_this()](boost::system::error_code ec, size_t) {
                if (ec) return self->Close();
                self->idem_.DoRepeatBody();
              }));
  }
  auto& body = parser.get().body();
  BodyBuffer& buffer = session_.exchange_.body();
  body.data = buffer.Get(parser.content_length_remaining().value_or(BodyBuffer::kMaxSize));
  body.size = buffer.capacity();
  boost::system::error_code ec;
  if (ParseBuffered(parser, session_.buffer_, kMessageDone, ec)) return OnRepeatBodyPiece(ec);
  http::async_read_some(session_.stream_, session_.buffer_, parser,
                   Timed(session_.client_deadline_, session_.config_->limits.idle_timeout,
                         [self = session_.shared_from_this()](boost::system::error_code ec,
                                                              size_t) {
                           self->idem_.OnRepeatBodyPiece(ec);
                         }));
}

void IdempotencyGate::OnRepeatBodyPiece(boost::system::error_code ec) {
  if (ec && ec == http::error::need_buffer) ec = {};
  if (ec && ec == http::error::body_limit) {
    state_ = State::kSettled;
    session_.request_keep_alive_ = false;
    return session_.SendReply(
        MakeError(http::status::payload_too_large, "body_too_large",
                  "the request body is larger than limits.max_body_bytes (" +
                      std::to_string(session_.config_->limits.max_body_bytes) + ")"),
        "bad_request");
  }
  if (ec) {
    state_ = State::kSettled;
    session_.record_.outcome = "client_error";
    return session_.Close();
  }
  BodyBuffer& buffer = session_.exchange_.body();
  size_t n = buffer.capacity() - session_.req_parser_->get().body().size;
  body_sha_->Update(buffer.data(), n);
  session_.record_.bytes_in += n;
  DoRepeatBody();
}

void IdempotencyGate::Replay() {
  state_ = State::kSettled;
  auto& counters = session_.ctx_.idempotency_counters;
  const storage::StoredResponse& stored = found_->response;
  if (!stored.body_kept) {
    counters.not_kept.fetch_add(1, std::memory_order_relaxed);
    return session_.SendReply(
        MakeError(http::status::conflict, "idempotency_response_not_kept",
                  "the request with this idempotency key already ran, but its response body (" +
                      std::to_string(stored.body_bytes) +
                      " bytes) was larger than max_response_bytes and was not kept",
                  {{"key", session_.intent_.idempotency.client_key},
                   {"status", stored.status},
                   {"body_bytes", stored.body_bytes}}),
        "idempotency_response_not_kept");
  }
  counters.replays.fetch_add(1, std::memory_order_relaxed);
  const auto& req = session_.req_parser_->get();
  const bool keep_alive = session_.request_keep_alive_ &&
                          !session_.ctx_.draining.load(std::memory_order_relaxed);
  session_.request_keep_alive_ = keep_alive;
  replay_head_.clear();
  AppendReplayHead(stored, req.version() >= 11, keep_alive, session_.request_id_, &replay_head_);
  auto& record = session_.record_;
  record.outcome = "replayed";
  record.status = stored.status;
  const bool has_body = ReplayHasBody(stored.status);
  record.bytes_out += has_body ? stored.body.size() : 0;
  session_.CountEnded();
  WriteWhole(session_.stream_,
             {asio::buffer(replay_head_),
              has_body ? asio::buffer(stored.body) : asio::const_buffer()},
             session_.client_deadline_, session_.config_->limits.idle_timeout,
             [self = session_.shared_from_this()](boost::system::error_code ec, bool) {
               if (ec) return self->Close();
               self->FinishRequest(self->request_keep_alive_);
             });
}

// ---------------------------------------------------------------------------
// The request that runs: its response is kept as it is relayed.

void IdempotencyGate::OnResponseHead() {
  if (state_ != State::kRunning) return;
  CaptureResponseHead(session_.exchange_.response_parser(), &captured_);
  response_seen_ = true;
}

void IdempotencyGate::OnResponseBody(const char* data, size_t size) {
  if (state_ != State::kRunning || !response_seen_) return;
  captured_.body_bytes += size;
  if (!captured_.body_kept) return;
  if (captured_.body.size() + size > config().max_response_bytes) {
    captured_.body_kept = false;
    std::string().swap(captured_.body);
    return;
  }
  captured_.body.append(data, size);
}

void IdempotencyGate::OnResponseComplete() {
  if (state_ != State::kRunning || !response_seen_) return;
  const IdempotentRequest& idem = session_.intent_.idempotency;
  if (!session_.req_parser_->is_done()) {
    // The backend answered before it read the whole body: the body's
    // digest is unknown, so a repeat could not be matched. The request
    // stays runnable: the key is given back.
    spdlog::info("idempotency key {} on route {}: the backend answered {} before the request "
                 "body ended; the key is released, not kept",
                 idem.client_key, idem.route, captured_.status);
    return Release();
  }
  state_ = State::kSettled;
  IdempotencyRecord finished;
  finished.state = IdempotencyRecord::State::kFinished;
  finished.owner = owner_;
  finished.created_ms = created_ms_;
  const int64_t now = NowMs();
  finished.expires_ms = now + config().window.count();
  finished.head_digest = head_digest_;
  finished.body_digest = body_sha_->Finish();
  if (captured_.headers.size() > storage::kMaxStoredHeaders) {
    // More fields than a record holds: keep what identifies the response,
    // not a truncated head that would replay as something else.
    captured_.body_kept = false;
  }
  finished.response = std::move(captured_);
  if (!finished.response.body_kept) finished.response.headers.clear();
  finished_ = std::move(finished);
  finish_tries_ = 0;
  store_pending_ = true;
  StoreFinished();
}

void IdempotencyGate::StoreFinished() {
  ++finish_tries_;
  store().FinishKey(key_, *finished_, NowMs(),
                    Answered([](IdempotencyGate& gate, const Status& s, bool applied) {
                      gate.OnFinished(s, applied);
                    }));
}

void IdempotencyGate::OnFinished(const Status& status, bool applied) {
  if (status.ok()) {
    StopRenewing();
    finished_.reset();
    held().Drop(key_, owner_);
    if (applied) return AfterStore();
    spdlog::error("idempotency key {}: a repeat took the key over (this replica had not renewed "
                  "its reservation within in_flight_timeout) before the response was stored; "
                  "the response is not relayed",
                  client_key_);
    return Withhold("its reservation was taken over by a repeat before its response was "
                    "stored (it was not renewed within in_flight_timeout), so the key's record "
                    "is the repeat's; a repeat gets that one");
  }
  CountStoreError();
  if (finish_tries_ < kFinishTries) {
    if (!finish_timer_) finish_timer_.emplace(session_.stream_.get_executor());
    finish_timer_->expires_after(kFinishStep * finish_tries_);
    finish_timer_->async_wait([self = session_.shared_from_this()](boost::system::error_code) {
      self->idem_.StoreFinished();
    });
    return;
  }
  spdlog::error("idempotency key {}: storing the response failed {} times ({}); it is not "
                "relayed, it is stored in the background while fencegate runs, and the key stays "
                "reserved until then",
                client_key_, finish_tries_, status.ToString());
  StopRenewing();
  std::make_shared<BackgroundFinish>(session_.stream_.get_executor(), store(), held(),
                                     session_.ctx_.idempotency_counters, key_, client_key_,
                                     std::move(*finished_))
      ->Wait();
  finished_.reset();
  Withhold("its idempotency record could not be stored (" + status.ToString() +
           "); it is stored as soon as the store takes writes again, and until then a repeat "
           "gets 409 idempotency_in_flight, then this response");
}

void IdempotencyGate::Withhold(const std::string& why) {
  store_pending_ = false;
  resume_ = nullptr;
  finish_after_store_.reset();
  if (closed_) return;
  if (!session_.exchange_.response_started()) {
    Reply reply = MakeError(http::status::service_unavailable, "store_unavailable",
                            "the request ran at the backend, but " + why +
                                ". Its response is not relayed",
                            {{"key", client_key_}});
    reply.set(http::field::retry_after, "1");
    return session_.SendReply(std::move(reply), "store_unavailable");
  }
  // Part of the response went already: the client sees it cut short.
  session_.record_.outcome = "store_unavailable";
  session_.Close();
}

void IdempotencyGate::Release() {
  if (state_ != State::kRunning) return;
  state_ = State::kSettled;
  StopRenewing();
  held().Drop(key_, owner_);
  session_.ctx_.idempotency_counters.releases.fetch_add(1, std::memory_order_relaxed);
  store_pending_ = true;
  store().ReleaseKey(key_, owner_,
                     Answered([](IdempotencyGate& gate, const Status& s, bool) {
                       if (!s.ok()) {
                         gate.CountStoreError();
                         spdlog::error("idempotency key {}: releasing it failed ({}); it stays "
                                       "reserved until its in_flight_timeout",
                                       gate.client_key_, s.ToString());
                       }
                       gate.AfterStore();
                     }));
}

bool IdempotencyGate::Hold(std::function<void()> resume) {
  if (!store_pending_) return false;
  resume_ = std::move(resume);
  return true;
}

void IdempotencyGate::AfterStore() {
  store_pending_ = false;
  if (resume_) {
    std::function<void()> resume = std::move(resume_);
    resume_ = nullptr;
    return resume();
  }
  if (!finish_after_store_) return;
  bool keep_alive = *finish_after_store_;
  finish_after_store_.reset();
  session_.FinishRequest(keep_alive);
}

bool IdempotencyGate::HoldFinish(bool keep_alive) {
  if (!store_pending_) return false;
  finish_after_store_ = keep_alive;
  return true;
}

}  // namespace fencegate::proxy
