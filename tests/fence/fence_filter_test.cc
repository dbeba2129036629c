#include "fence/fence_filter.h"

#include <gtest/gtest.h>
#include <sys/socket.h>
#include <unistd.h>

#include <boost/asio/io_context.hpp>
#include <chrono>
#include <future>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "storage/fault_injecting_store.h"
#include "storage/memory_store.h"
#include "tests/support/gated_store.h"

namespace fencegate::proxy {
namespace {

namespace http = boost::beast::http;

// A route of the flat model (nesting: off): these tests are about the
// queue of one key; the tree's are below, on routes that nest.
config::RouteConfig RouteAt(std::string prefix, config::RouteMode mode,
                            config::RouteNesting nesting = config::RouteNesting::kOff) {
  config::RouteConfig r;
  r.name = "objects";
  r.path_prefix = std::move(prefix);
  r.mode = mode;
  r.nesting = nesting;
  return r;
}

class FenceFilterTest : public ::testing::Test {
 protected:
  void UseRoutes(std::vector<config::RouteConfig> routes) {
    std::string error;
    router_ = Router::Build(routes, &error);
    ASSERT_TRUE(router_) << error;
  }
  WriteIntent Classify(std::string_view method, std::string_view path,
                       std::optional<std::string> token) {
    http::fields headers;
    if (token) headers.set("Fencing-Token", *token);
    return proxy::Classify(settings_, *router_, method, path, headers);
  }
  FenceVerdict Check(const WriteIntent& intent) {
    boost::asio::io_context ioc;
    FenceVerdict out;
    filter_.Check(intent, ioc.get_executor(), [&](FenceVerdict v) { out = std::move(v); });
    ioc.run();  // returns once the verdict was delivered (work is tracked)
    return out;
  }
  FenceVerdict Write(std::string_view path, uint64_t token) {
    WriteIntent intent = Classify("PUT", path, std::to_string(token));
    EXPECT_EQ(intent.kind, WriteIntent::Kind::kFence);
    return Check(intent);
  }

  FenceSettings settings_;
  std::unique_ptr<Router> router_;
  // The in-memory engine, behind faults a test may turn on.
  storage::FaultInjectingStore store_{std::make_unique<storage::MemoryStore>()};
  KeyQueue queue_;
  FenceFilter filter_{store_, queue_};
};

TEST_F(FenceFilterTest, UnmatchedPathAndUnfencedMethodPassThrough) {
  UseRoutes({RouteAt("/objects/", config::RouteMode::kEnforce)});
  EXPECT_EQ(Classify("PUT", "/other/a", std::nullopt).kind, WriteIntent::Kind::kPassThrough);
  EXPECT_EQ(Classify("GET", "/objects/a", std::nullopt).kind, WriteIntent::Kind::kPassThrough);
}

// A session classifies request after request into one WriteIntent: each
// decision leaves nothing of the one before (the reply, the key, shadow).
TEST_F(FenceFilterTest, ClassifyingIntoAnEarlierIntentLeavesNothingOfIt) {
  UseRoutes({RouteAt("/objects/", config::RouteMode::kEnforce),
             RouteAt("/shadow/", config::RouteMode::kShadow)});
  struct Case {
    std::string method, path;
    std::optional<std::string> token;
  };
  const std::vector<Case> cases = {
      {"PUT", "/objects/a-key-longer-than-fifteen-bytes", std::nullopt},  // 428, key named
      {"GET", "/objects/a", std::nullopt},                                // pass through
      {"PUT", "/shadow/b", "x"},            // shadow: forwarded, violation noted
      {"PUT", "/objects/c", "7"},           // fenced
      {"PUT", "/objects/d", "0x1"},         // 400 bad_token
      {"PUT", "/other/e", std::nullopt},    // no route
      {"PUT", "/shadow/f", "8"},            // shadow, fenced
  };
  WriteIntent reused;
  for (const Case& c : cases) {
    http::fields headers;
    if (c.token) headers.set("Fencing-Token", *c.token);
    const WriteIntent fresh = proxy::Classify(settings_, *router_, c.method, c.path, headers);
    proxy::Classify(settings_, *router_, c.method, c.path, headers, &reused);
    EXPECT_EQ(reused.kind, fresh.kind) << c.path;
    EXPECT_EQ(reused.route, fresh.route) << c.path;
    EXPECT_EQ(reused.outcome, fresh.outcome) << c.path;
    EXPECT_EQ(reused.key, fresh.key) << c.path;
    EXPECT_EQ(reused.token, fresh.token) << c.path;
    EXPECT_EQ(reused.shadow, fresh.shadow) << c.path;
    EXPECT_EQ(reused.shadow_violation, fresh.shadow_violation) << c.path;
    ASSERT_EQ(reused.reply.has_value(), fresh.reply.has_value()) << c.path;
    if (fresh.reply) {
      EXPECT_EQ(reused.reply->body(), fresh.reply->body()) << c.path;
    }
  }
}

TEST_F(FenceFilterTest, MissingTokenIs428WithKey) {
  UseRoutes({RouteAt("/objects/", config::RouteMode::kEnforce)});
  WriteIntent i = Classify("PUT", "/objects/a", std::nullopt);
  ASSERT_EQ(i.kind, WriteIntent::Kind::kReject);
  EXPECT_EQ(i.reply->result(), http::status::precondition_required);
  auto body = nlohmann::json::parse(i.reply->body());
  EXPECT_EQ(body["error"], "token_required");
  EXPECT_EQ(body["key"], "/objects/a");
  EXPECT_EQ(i.reply->at(http::field::content_type), "application/json");
}

TEST_F(FenceFilterTest, MalformedTokenIs400) {
  UseRoutes({RouteAt("/objects/", config::RouteMode::kEnforce)});
  WriteIntent i = Classify("PUT", "/objects/a", "0x10");
  ASSERT_EQ(i.kind, WriteIntent::Kind::kReject);
  EXPECT_EQ(i.reply->result(), http::status::bad_request);
  EXPECT_EQ(nlohmann::json::parse(i.reply->body())["error"], "bad_token");
}

TEST_F(FenceFilterTest, TheMissionTimeline) {
  UseRoutes({RouteAt("/objects/", config::RouteMode::kEnforce)});
  EXPECT_TRUE(Write("/objects/x", 33).forward);
  EXPECT_TRUE(Write("/objects/x", 34).forward);
  FenceVerdict stale = Write("/objects/x", 33);
  ASSERT_FALSE(stale.forward);
  EXPECT_FALSE(stale.lease.held());
  EXPECT_EQ(stale.reply->result(), http::status::conflict);
  EXPECT_EQ(stale.reply->at("Fencing-Token-Current"), "34");
  auto body = nlohmann::json::parse(stale.reply->body());
  EXPECT_EQ(body["error"], "stale_token");
  EXPECT_EQ(body["current"], 34);
  EXPECT_EQ(body["token"], 33);
  EXPECT_EQ(body["key"], "/objects/x");
  EXPECT_TRUE(Write("/objects/x", 34).forward);  // equal token: same holder again
  EXPECT_TRUE(Write("/objects/y", 1).forward);   // another key is independent
}

TEST_F(FenceFilterTest, ForwardedVerdictHoldsTheKey) {
  UseRoutes({RouteAt("/objects/", config::RouteMode::kEnforce)});
  FenceVerdict first = Write("/objects/x", 5);
  ASSERT_TRUE(first.forward);
  EXPECT_TRUE(first.lease.held());
  EXPECT_EQ(queue_.active_keys(), 1u);
  first.lease.Release();
  EXPECT_EQ(queue_.active_keys(), 0u);
}

TEST_F(FenceFilterTest, FullKeyQueueIs503AtOnceAndTheQueueStillDrains) {
  UseRoutes({RouteAt("/objects/", config::RouteMode::kEnforce)});
  // Declared in this order so that they are destroyed the other way round:
  // the store joins its threads (which still hold executors of `ioc`)
  // before `ioc` goes.
  boost::asio::io_context ioc;
  storage::MemoryStore store;
  KeyQueue small(1);  // one write may wait behind the one in flight
  FenceFilter filter(store, small);
  // The store answers from its own thread: keep the io_context from running
  // out of work (and stopping) between verdicts.
  auto guard = boost::asio::make_work_guard(ioc);
  std::vector<FenceVerdict> got;
  WriteIntent intent = Classify("PUT", "/objects/x", "5");
  auto run_until = [&](size_t n) {
    for (int i = 0; i < 1000 && got.size() < n; ++i) {
      ioc.run_one_for(std::chrono::milliseconds(10));
    }
    return got.size() == n;
  };
  filter.Check(intent, ioc.get_executor(), [&](FenceVerdict v) { got.push_back(std::move(v)); });
  ASSERT_TRUE(run_until(1));  // the first holds the key
  ASSERT_TRUE(got[0].forward);
  filter.Check(intent, ioc.get_executor(), [&](FenceVerdict v) { got.push_back(std::move(v)); });
  filter.Check(intent, ioc.get_executor(), [&](FenceVerdict v) { got.push_back(std::move(v)); });
  ASSERT_TRUE(run_until(2));  // the third is refused without waiting; the second waits
  EXPECT_FALSE(got[1].forward);
  EXPECT_FALSE(got[1].lease.held());
  EXPECT_EQ(got[1].outcome, "overloaded");
  EXPECT_EQ(got[1].reply->result(), http::status::service_unavailable);
  EXPECT_EQ(got[1].reply->at(http::field::retry_after), "1");
  auto body = nlohmann::json::parse(got[1].reply->body());
  EXPECT_EQ(body["error"], "too_many_waiting");
  EXPECT_EQ(body["key"], "/objects/x");
  EXPECT_EQ(small.waiting(), 1u);
  got[0].lease.Release();
  ASSERT_TRUE(run_until(3));  // the waiting one goes on
  EXPECT_TRUE(got[2].forward);
  got[2].lease.Release();
  EXPECT_EQ(small.active_keys(), 0u);
}

// The check-and-advance of a write that waits for its key is made at once
// (it overlaps the exchange ahead of it), but the write is forwarded only in
// its turn; a stale one is refused without waiting for its turn.
TEST_F(FenceFilterTest, AWaitingWriteIsCheckedAtOnceAndForwardedInItsTurn) {
  UseRoutes({RouteAt("/objects/", config::RouteMode::kEnforce)});
  boost::asio::io_context ioc;  // see the test above for this order
  storage::MemoryStore store;
  KeyQueue queue;
  FenceFilter filter(store, queue);
  auto guard = boost::asio::make_work_guard(ioc);
  std::vector<FenceVerdict> got;
  auto run_until = [&](size_t n) {
    for (int i = 0; i < 1000 && got.size() < n; ++i) {
      ioc.run_one_for(std::chrono::milliseconds(10));
    }
    return got.size() == n;
  };
  auto check = [&](const char* token) {
    filter.Check(Classify("PUT", "/objects/x", token), ioc.get_executor(),
                 [&](FenceVerdict v) { got.push_back(std::move(v)); });
  };
  check("5");
  ASSERT_TRUE(run_until(1));
  ASSERT_TRUE(got[0].forward);  // holds the key

  check("6");  // already checked and advanced (the store decides in call order) ...
  std::promise<std::optional<uint64_t>> stored;
  store.Get("/objects/x", [&](const storage::Status&, std::optional<uint64_t> v) {
    stored.set_value(v);
  });
  EXPECT_EQ(stored.get_future().get(), 6u);
  check("4");  // ... and a stale write behind both is refused at once
  ASSERT_TRUE(run_until(2));
  EXPECT_EQ(got[1].outcome, "stale");
  EXPECT_EQ(got[1].current, 6u);
  EXPECT_FALSE(got[1].lease.held());
  EXPECT_TRUE(got[0].lease.held());  // while the first still holds the key
  EXPECT_EQ(queue.waiting(), 2u);    // the refused one still has its place

  got[0].lease.Release();  // ... the token-6 write goes on
  ASSERT_TRUE(run_until(3));
  EXPECT_TRUE(got[2].forward);
  EXPECT_TRUE(got[2].lease.held());
  EXPECT_EQ(queue.waiting(), 1u);  // the refused one's turn is next, and is handed on
  got[2].lease.Release();
  for (int i = 0; i < 1000 && queue.active_keys() > 0; ++i) {
    ioc.run_one_for(std::chrono::milliseconds(10));
  }
  EXPECT_EQ(queue.active_keys(), 0u);
  EXPECT_EQ(got.size(), 3u);
}

// Hands out one end of a socket pair as "the connection" each time, and
// records what it was asked to send.
class PairCourier : public Courier {
 public:
  std::optional<HandedConnection> Send(std::string_view request) override {
    requests.emplace_back(request);
    int fds[2];
    if (::socketpair(AF_UNIX, SOCK_STREAM, 0, fds) != 0) return std::nullopt;
    ::close(fds[1]);
    HandedConnection handed(fds[0], false);
    handed.sent = request.size();
    return handed;
  }
  std::vector<std::string> requests;
};

// A write whose turn is handed on from another thread is sent there by the
// courier only once the store accepted it; the verdict then carries the
// connection. Refused, unanswered, or without a whole request: not sent.
TEST_F(FenceFilterTest, TheHandingThreadSendsAWaitingWriteOnlyOnceTheStoreAcceptedIt) {
  UseRoutes({RouteAt("/objects/", config::RouteMode::kEnforce)});
  boost::asio::io_context mine;  // the holder's thread
  boost::asio::io_context theirs;  // the waiters' thread
  storage::MemoryStore memory;   // after the io_contexts: see above
  testing::GatedStore store(memory);  // holds the Advance of "8"
  KeyQueue queue;
  FenceFilter filter(store, queue);
  auto guard_mine = boost::asio::make_work_guard(mine);
  auto guard_theirs = boost::asio::make_work_guard(theirs);
  PairCourier courier;
  std::vector<FenceVerdict> holder;
  std::map<std::string, FenceVerdict> got;  // by token
  auto check = [&](const char* token, std::string_view whole) {
    filter.Check(
        Classify("PUT", "/objects/x", token), theirs.get_executor(),
        [&got, token](FenceVerdict v) { got.emplace(token, std::move(v)); }, whole);
  };
  // Hands the key on from `mine`, with the courier.
  auto hand_on = [&](KeyLease& lease) {
    boost::asio::post(mine, [&] { lease.HandOn(&courier); });
    mine.restart();
    mine.poll();
  };
  auto run_theirs_until = [&](size_t n) {
    for (int i = 0; i < 1000 && got.size() < n; ++i) {
      theirs.run_one_for(std::chrono::milliseconds(10));
    }
    return got.size() == n;
  };

  filter.Check(Classify("PUT", "/objects/x", "5"), mine.get_executor(),
               [&](FenceVerdict v) { holder.push_back(std::move(v)); });
  for (int i = 0; i < 1000 && holder.empty(); ++i) mine.run_one_for(std::chrono::milliseconds(10));
  ASSERT_EQ(holder.size(), 1u);
  ASSERT_TRUE(holder[0].forward);

  check("6", "PUT six");  // accepted
  check("4", "PUT four");  // stale: refused at once
  check("7", "");          // accepted, nothing whole to send
  store.Hold();
  check("8", "PUT eight");  // accepted, but not answered yet when its turn comes
  memory.Drain();
  ASSERT_TRUE(run_theirs_until(1));
  EXPECT_EQ(got.at("4").outcome, "stale");

  hand_on(holder[0].lease);  // to 6: sent here
  EXPECT_EQ(courier.requests, (std::vector<std::string>{"PUT six"}));
  ASSERT_TRUE(run_theirs_until(2));
  ASSERT_TRUE(got.at("6").forward);
  ASSERT_TRUE(got.at("6").handed);
  EXPECT_GE(got.at("6").handed->fd(), 0);
  EXPECT_EQ(got.at("6").handed->sent, 7u);

  hand_on(got.at("6").lease);  // to 4 (refused: passes the key on) and then 7
  ASSERT_TRUE(run_theirs_until(3));
  ASSERT_TRUE(got.at("7").forward);
  EXPECT_FALSE(got.at("7").handed);

  hand_on(got.at("7").lease);  // to 8, still unanswered: not sent
  EXPECT_EQ(courier.requests, (std::vector<std::string>{"PUT six"}));
  store.Release();
  ASSERT_TRUE(run_theirs_until(4));
  ASSERT_TRUE(got.at("8").forward);
  EXPECT_FALSE(got.at("8").handed);
  got.at("8").lease.Release();
  EXPECT_EQ(courier.requests.size(), 1u);
}

TEST_F(FenceFilterTest, ShadowModeNeverRefusesAFullKeyQueue) {
  UseRoutes({RouteAt("/objects/", config::RouteMode::kShadow)});
  boost::asio::io_context ioc;  // see the test above for this order
  storage::MemoryStore store;
  KeyQueue small(1);
  FenceFilter filter(store, small);
  auto guard = boost::asio::make_work_guard(ioc);
  std::vector<FenceVerdict> got;
  WriteIntent intent = Classify("PUT", "/objects/x", "5");
  ASSERT_TRUE(intent.shadow);
  for (int i = 0; i < 3; ++i) {
    filter.Check(intent, ioc.get_executor(), [&](FenceVerdict v) { got.push_back(std::move(v)); });
  }
  for (size_t done = 1; done <= 3; ++done) {
    for (int i = 0; i < 1000 && got.size() < done; ++i) {
      ioc.run_one_for(std::chrono::milliseconds(10));
    }
    ASSERT_EQ(got.size(), done);
    EXPECT_TRUE(got.back().forward) << got.back().outcome;  // queued, never refused
    got.back().lease.Release();
  }
  EXPECT_EQ(small.active_keys(), 0u);
}

TEST_F(FenceFilterTest, StoreFailureFailsClosed) {
  UseRoutes({RouteAt("/objects/", config::RouteMode::kEnforce)});
  store_.SetFaults({.fail_writes = true});
  FenceVerdict v = Write("/objects/x", 7);
  EXPECT_FALSE(v.forward);
  EXPECT_EQ(v.outcome, "store_unavailable");
  EXPECT_EQ(v.reply->result(), http::status::service_unavailable);
  EXPECT_EQ(nlohmann::json::parse(v.reply->body())["error"], "store_unavailable");
}

// storage.etcd.forward_within: an accepted write whose turn comes later than
// the limit after its check-and-advance began is refused, not forwarded; its
// token stays accepted, so a retry with it goes. A limit of one nanosecond
// is always passed by then, an hour never.
TEST_F(FenceFilterTest, AnAcceptedWriteLaterThanForwardWithinIsRefusedAtItsTurn) {
  UseRoutes({RouteAt("/objects/", config::RouteMode::kEnforce),
             RouteAt("/shadow/", config::RouteMode::kShadow)});
  FenceFilter expiring(store_, queue_, std::chrono::nanoseconds(1));
  auto check = [&](FenceFilter& filter, const WriteIntent& intent) {
    boost::asio::io_context ioc;
    FenceVerdict out;
    filter.Check(intent, ioc.get_executor(), [&](FenceVerdict v) { out = std::move(v); });
    ioc.run();
    return out;
  };
  FenceVerdict v = check(expiring, Classify("PUT", "/objects/x", "7"));
  EXPECT_FALSE(v.forward);
  EXPECT_FALSE(v.lease.held());
  EXPECT_EQ(v.outcome, "expired");
  ASSERT_TRUE(v.reply);
  EXPECT_EQ(v.reply->result(), http::status::service_unavailable);
  EXPECT_EQ(v.reply->at(http::field::retry_after), "0");
  const auto body = nlohmann::json::parse(v.reply->body());
  EXPECT_EQ(body["error"], "fence_expired");
  EXPECT_EQ(body["key"], "/objects/x");
  EXPECT_NE(body["message"].get<std::string>().find("storage.etcd.forward_within"),
            std::string::npos);
  // The token was accepted: a lower one is stale, the same one goes again.
  EXPECT_EQ(Write("/objects/x", 6).outcome, "stale");
  FenceFilter patient(store_, queue_, std::chrono::hours(1));
  EXPECT_TRUE(check(patient, Classify("PUT", "/objects/x", "7")).forward);
  // A stale write is still refused as stale, not expired.
  EXPECT_EQ(check(expiring, Classify("PUT", "/objects/x", "5")).outcome, "stale");
  // Shadow mode forwards it and names what enforce would have done.
  FenceVerdict shadow = check(expiring, Classify("PUT", "/shadow/y", "3"));
  EXPECT_TRUE(shadow.forward);
  EXPECT_EQ(shadow.shadow_violation, "expired");
}

TEST_F(FenceFilterTest, ShadowModeForwardsWhatEnforceWouldRefuse) {
  UseRoutes({RouteAt("/objects/", config::RouteMode::kShadow)});
  EXPECT_TRUE(Write("/objects/x", 10).forward);
  FenceVerdict stale = Write("/objects/x", 9);
  EXPECT_TRUE(stale.forward);
  EXPECT_EQ(stale.shadow_violation, "stale");
  EXPECT_EQ(filter_.shadow_violations(), 1u);
  WriteIntent missing = Classify("PUT", "/objects/x", std::nullopt);
  EXPECT_EQ(missing.kind, WriteIntent::Kind::kPassThrough);
  EXPECT_EQ(missing.shadow_violation, "token_required");
}

TEST_F(FenceFilterTest, ModeOffExemptsASubtree) {
  UseRoutes({RouteAt("/objects/tmp/", config::RouteMode::kOff),
             RouteAt("/objects/", config::RouteMode::kEnforce)});
  EXPECT_EQ(Classify("PUT", "/objects/tmp/a", std::nullopt).kind,
            WriteIntent::Kind::kPassThrough);
  EXPECT_EQ(Classify("PUT", "/objects/a", std::nullopt).kind, WriteIntent::Kind::kReject);
}

TEST_F(FenceFilterTest, HeaderKeyTemplateMissingHeaderIsBadKey) {
  auto route = RouteAt("/objects/", config::RouteMode::kEnforce);
  route.key = "{header:X-Tenant}:{path}";
  UseRoutes({route});
  WriteIntent i = Classify("PUT", "/objects/a", "1");
  ASSERT_EQ(i.kind, WriteIntent::Kind::kReject);
  EXPECT_EQ(nlohmann::json::parse(i.reply->body())["error"], "bad_key");
}

// Collects verdicts and runs an io_context until it has n of them (the
// store answers from its own threads).
class Verdicts {
 public:
  explicit Verdicts(boost::asio::io_context& ioc) : ioc_(ioc) {}
  FenceFilter::Handler Into() {
    return [this](FenceVerdict v) { got.push_back(std::move(v)); };
  }
  bool RunUntil(size_t n) {
    for (int i = 0; i < 1000 && got.size() < n; ++i) {
      ioc_.run_one_for(std::chrono::milliseconds(10));
    }
    return got.size() == n;
  }
  // Runs what is ready and returns how many verdicts came: once the store's
  // answers ran (MemoryStore::Drain), a verdict that is not ready
  // now waits for a turn.
  size_t Poll() {
    ioc_.restart();
    ioc_.poll();
    return got.size();
  }
  std::vector<FenceVerdict> got;

 private:
  boost::asio::io_context& ioc_;
};

std::optional<uint64_t> Stored(storage::TokenStore& store, const std::string& key) {
  std::promise<std::optional<uint64_t>> stored;
  store.Get(key, [&](const storage::Status&, std::optional<uint64_t> v) { stored.set_value(v); });
  return stored.get_future().get();
}

// A write of two keys (COPY or MOVE: the extra key is the Destination's;
// set by hand here, the route's classification is tested elsewhere) is
// refused whole when either key is stale, storing nothing, and accepted it
// advances both and holds both.
TEST_F(FenceFilterTest, AWriteOfTwoKeysIsRefusedWholeWhenEitherIsStale) {
  UseRoutes({RouteAt("/objects/", config::RouteMode::kEnforce)});
  ASSERT_TRUE(Write("/objects/a", 5).forward);
  auto two = [&](const char* key, const char* extra, uint64_t token) {
    WriteIntent intent = Classify("PUT", key, std::to_string(token));
    EXPECT_EQ(intent.kind, WriteIntent::Kind::kFence);
    intent.extra_keys = {extra};
    return Check(intent);
  };
  for (auto [key, extra] : {std::pair{"/objects/a", "/objects/b"}, {"/objects/b", "/objects/a"}}) {
    FenceVerdict stale = two(key, extra, 4);
    ASSERT_FALSE(stale.forward) << key;
    EXPECT_FALSE(stale.lease.held());
    EXPECT_EQ(stale.outcome, "stale");
    EXPECT_EQ(stale.reply->result(), http::status::conflict);
    auto body = nlohmann::json::parse(stale.reply->body());
    EXPECT_EQ(body["key"], "/objects/a") << "the stale key is named";
    EXPECT_EQ(body["current"], 5);
    EXPECT_EQ(body["token"], 4);
    EXPECT_EQ(stale.reply->at("Fencing-Token-Current"), "5");
    EXPECT_EQ(Stored(store_, "/objects/b"), std::nullopt) << "a refused write stored a key";
    EXPECT_EQ(Stored(store_, "/objects/a"), 5u);
  }
  EXPECT_EQ(queue_.active_keys(), 0u);

  FenceVerdict ok = two("/objects/a", "/objects/b", 6);
  ASSERT_TRUE(ok.forward) << ok.outcome;
  EXPECT_EQ(ok.current, 6u);
  ASSERT_TRUE(ok.lease.held());
  ASSERT_EQ(ok.lease.more().size(), 1u);
  EXPECT_TRUE(ok.lease.more()[0].held());
  EXPECT_EQ(queue_.active_keys(), 2u);  // both held until the exchange ends
  EXPECT_EQ(Stored(store_, "/objects/a"), 6u);
  EXPECT_EQ(Stored(store_, "/objects/b"), 6u);
  ok.lease.Release();
  EXPECT_EQ(queue_.active_keys(), 0u);

  store_.SetFaults({.fail_writes = true});
  FenceVerdict failed = two("/objects/a", "/objects/b", 7);
  EXPECT_FALSE(failed.forward);
  EXPECT_EQ(failed.outcome, "store_unavailable");
  EXPECT_EQ(failed.reply->result(), http::status::service_unavailable);
}

TEST_F(FenceFilterTest, ShadowModeForwardsAStaleWriteOfTwoKeys) {
  UseRoutes({RouteAt("/objects/", config::RouteMode::kShadow)});
  ASSERT_TRUE(Write("/objects/b", 9).forward);
  WriteIntent intent = Classify("PUT", "/objects/a", "3");
  intent.extra_keys = {"/objects/b"};
  FenceVerdict v = Check(intent);
  EXPECT_TRUE(v.forward);
  EXPECT_EQ(v.shadow_violation, "stale");
  EXPECT_EQ(filter_.shadow_violations(), 1u);
  EXPECT_EQ(Stored(store_, "/objects/a"), std::nullopt);
}

// A write of two keys goes only with the turn on both: it waits behind the
// write in flight on either, and the writes queued behind it on either key
// wait for it.
TEST_F(FenceFilterTest, AWriteOfTwoKeysGoesWithTheTurnOnBoth) {
  UseRoutes({RouteAt("/objects/", config::RouteMode::kEnforce)});
  boost::asio::io_context ioc;  // before the store: see FullKeyQueueIs503...
  storage::MemoryStore store;
  KeyQueue queue;
  FenceFilter filter(store, queue);
  auto guard = boost::asio::make_work_guard(ioc);
  Verdicts v(ioc);
  filter.Check(Classify("PUT", "/objects/b", "5"), ioc.get_executor(), v.Into());
  ASSERT_TRUE(v.RunUntil(1));
  ASSERT_TRUE(v.got[0].forward);
  WriteIntent two = Classify("PUT", "/objects/a", "6");
  two.extra_keys = {"/objects/b"};
  filter.Check(two, ioc.get_executor(), v.Into());
  filter.Check(Classify("PUT", "/objects/a", "6"), ioc.get_executor(), v.Into());
  store.Drain();
  EXPECT_EQ(v.Poll(), 1u) << "went while /objects/b was in flight";
  EXPECT_EQ(Stored(store, "/objects/a"), 6u);  // both decided already
  v.got[0].lease.Release();
  ASSERT_TRUE(v.RunUntil(2));
  ASSERT_TRUE(v.got[1].forward);
  EXPECT_EQ(v.Poll(), 2u) << "a write of /objects/a went beside the write of both";
  v.got[1].lease.Release();
  ASSERT_TRUE(v.RunUntil(3));
  EXPECT_TRUE(v.got[2].forward);
  v.got[2].lease.Release();
  EXPECT_EQ(queue.active_keys(), 0u);
}

// The admin fence is a barrier (docs/contract.md, "Admin API"): a write whose
// Advance the store accepted while it waited behind a write in flight, and
// that an admin fence decided after it then outranks, is refused at its turn
// and never forwarded; one whose token is at least the fence still goes. The
// write that held the key when the fence was decided is not stopped.
TEST_F(FenceFilterTest, AnAdminFenceRefusesTheLowerWritesAlreadyQueued) {
  UseRoutes({RouteAt("/objects/", config::RouteMode::kEnforce)});
  boost::asio::io_context ioc;
  storage::MemoryStore store;
  KeyQueue queue;
  FenceFilter filter(store, queue);
  auto guard = boost::asio::make_work_guard(ioc);
  Verdicts v(ioc);
  auto check = [&](const char* token) {
    filter.Check(Classify("PUT", "/objects/x", token), ioc.get_executor(), v.Into());
  };
  check("5");
  ASSERT_TRUE(v.RunUntil(1));
  ASSERT_TRUE(v.got[0].forward);  // in flight
  check("6");
  check("10");
  check("12");
  store.Drain();  // all three accepted by the store, in this order
  EXPECT_EQ(Stored(store, "/objects/x"), 12u);
  EXPECT_EQ(v.Poll(), 1u);

  std::promise<storage::Fence> raised;
  queue.Fence("/objects/x", 11, [&] {
    store.Raise("/objects/x", 11,
                [&](const storage::Status&, storage::Fence f) { raised.set_value(f); });
  });
  EXPECT_EQ(raised.get_future().get().current, 12u);
  EXPECT_TRUE(v.got[0].lease.held());  // the write in flight goes on

  v.got[0].lease.Release();
  ASSERT_TRUE(v.RunUntil(2));
  EXPECT_FALSE(v.got[1].forward) << "token 6 was forwarded after the fence to 11 answered";
  EXPECT_EQ(v.got[1].outcome, "stale");
  EXPECT_FALSE(v.got[1].lease.held());
  EXPECT_EQ(v.got[1].current, 11u);  // the fence, above what the store had after 6
  auto body = nlohmann::json::parse(v.got[1].reply->body());
  EXPECT_EQ(body["error"], "stale_token");
  EXPECT_EQ(body["key"], "/objects/x");
  EXPECT_EQ(body["token"], 6);
  // The refusal handed the key on: 10, below the fence, is refused too, and
  // 12 (above it) goes.
  ASSERT_TRUE(v.RunUntil(4));
  EXPECT_FALSE(v.got[2].forward);
  EXPECT_EQ(v.got[2].outcome, "stale");
  EXPECT_TRUE(v.got[3].forward) << v.got[3].outcome;
  v.got[3].lease.Release();
  for (int i = 0; i < 1000 && queue.active_keys() > 0; ++i) {
    ioc.run_one_for(std::chrono::milliseconds(10));
  }
  EXPECT_EQ(queue.active_keys(), 0u);
}

// The fence on either key of a write of two keys refuses it at its turn,
// naming that key.
TEST_F(FenceFilterTest, AnAdminFenceOnEitherKeyRefusesAQueuedWriteOfTwoKeys) {
  UseRoutes({RouteAt("/objects/", config::RouteMode::kEnforce)});
  boost::asio::io_context ioc;
  storage::MemoryStore store;
  KeyQueue queue;
  FenceFilter filter(store, queue);
  auto guard = boost::asio::make_work_guard(ioc);
  Verdicts v(ioc);
  filter.Check(Classify("PUT", "/objects/a", "5"), ioc.get_executor(), v.Into());
  ASSERT_TRUE(v.RunUntil(1));
  WriteIntent two = Classify("PUT", "/objects/a", "6");
  two.extra_keys = {"/objects/b"};
  filter.Check(two, ioc.get_executor(), v.Into());
  store.Drain();
  // b is held by the waiting write itself: its floor is learnt all the same.
  queue.Fence("/objects/b", 8, [&] { store.Raise("/objects/b", 8, [](auto&&...) {}); });
  v.got[0].lease.Release();
  ASSERT_TRUE(v.RunUntil(2));
  EXPECT_FALSE(v.got[1].forward);
  EXPECT_EQ(v.got[1].outcome, "stale") << v.got[1].reply->body();
  EXPECT_EQ(v.got[1].current, 8u);
  EXPECT_EQ(nlohmann::json::parse(v.got[1].reply->body())["key"], "/objects/b");
  EXPECT_EQ(queue.active_keys(), 0u);  // both keys let go
}


// A key named twice (a COPY onto itself) is fenced once: were it queued
// twice, the write would wait behind itself and hold its key for ever.
TEST_F(FenceFilterTest, AKeyNamedTwiceIsFencedOnce) {
  UseRoutes({RouteAt("/objects/", config::RouteMode::kEnforce)});
  boost::asio::io_context ioc;
  storage::MemoryStore store;
  KeyQueue queue;
  FenceFilter filter(store, queue);
  auto guard = boost::asio::make_work_guard(ioc);
  Verdicts v(ioc);
  WriteIntent intent = Classify("PUT", "/objects/a", "4");
  intent.extra_keys = {"/objects/a", "/objects/b", "/objects/b"};
  filter.Check(intent, ioc.get_executor(), v.Into());
  ASSERT_TRUE(v.RunUntil(1));
  ASSERT_TRUE(v.got[0].forward) << v.got[0].outcome;
  EXPECT_EQ(v.got[0].lease.more().size(), 1u);
  EXPECT_EQ(Stored(store, "/objects/b"), 4u);
  v.got[0].lease.Release();
  EXPECT_EQ(queue.active_keys(), 0u);
}

// The tree of paths (docs/contract.md, "Nested resources"): writes that may
// change a common resource go one at a time, in acceptance order; others
// go side by side.
class TreeOrderTest : public FenceFilterTest {
 protected:
  void SetUp() override {
    UseRoutes({RouteAt("/objects/", config::RouteMode::kEnforce, config::RouteNesting::kShared)});
  }
  void Send(std::string_view method, std::string_view path, const char* token) {
    WriteIntent intent = Classify(method, path, token);
    ASSERT_EQ(intent.kind, WriteIntent::Kind::kFence);
    ASSERT_FALSE(intent.targets.empty());
    filter.Check(intent, ioc.get_executor(), v.Into());
  }

  boost::asio::io_context ioc;  // before the store: see FullKeyQueueIs503...
  storage::MemoryStore store;
  KeyQueue queue;
  FenceFilter filter{store, queue};
  boost::asio::executor_work_guard<boost::asio::io_context::executor_type> guard =
      boost::asio::make_work_guard(ioc);
  Verdicts v{ioc};
};

TEST_F(TreeOrderTest, ASubtreeWriteWaitsForTheWritesBelowItAndTheyForIt) {
  Send("PUT", "/objects/d/x", "1");
  ASSERT_TRUE(v.RunUntil(1));
  ASSERT_TRUE(v.got[0].forward);
  Send("DELETE", "/objects/d", "2");  // the collection: waits for x
  Send("PUT", "/objects/d/y", "3");   // below it: waits for the DELETE
  store.Drain();
  EXPECT_EQ(v.Poll(), 1u) << "a write went beside a subtree write over it";
  EXPECT_EQ(queue.waiting(), 2u) << "two writes wait, each on several nodes";
  v.got[0].lease.Release();
  ASSERT_TRUE(v.RunUntil(2));
  ASSERT_TRUE(v.got[1].forward) << v.got[1].outcome;
  EXPECT_EQ(v.Poll(), 2u) << "a write below went beside the DELETE of its collection";
  v.got[1].lease.Release();
  ASSERT_TRUE(v.RunUntil(3));
  EXPECT_TRUE(v.got[2].forward);
  v.got[2].lease.Release();
  EXPECT_EQ(queue.active_keys(), 0u);
}

TEST_F(TreeOrderTest, WritesThatShareNoResourceGoSideBySide) {
  Send("PUT", "/objects/d/x", "1");
  Send("PUT", "/objects/d/y", "1");       // a sibling
  Send("PROPPATCH", "/objects/d", "1");   // the collection's own properties only
  ASSERT_TRUE(v.RunUntil(3));
  for (const FenceVerdict& got : v.got) EXPECT_TRUE(got.forward) << got.outcome;
  Send("MKCOL", "/objects/d", "1");  // the collection itself again: after PROPPATCH
  store.Drain();
  EXPECT_EQ(v.Poll(), 3u);
  v.got[2].lease.Release();
  ASSERT_TRUE(v.RunUntil(4));
  EXPECT_TRUE(v.got[3].forward);
  for (FenceVerdict& got : v.got) got.lease.Release();
  EXPECT_EQ(queue.active_keys(), 0u);
}

TEST_F(TreeOrderTest, ARefusedSubtreeWriteNamesThePathThatRefusedIt) {
  Send("PUT", "/objects/d/x", "5");
  ASSERT_TRUE(v.RunUntil(1));
  v.got[0].lease.Release();
  Send("DELETE", "/objects/d", "4");
  ASSERT_TRUE(v.RunUntil(2));
  ASSERT_FALSE(v.got[1].forward);
  EXPECT_EQ(v.got[1].outcome, "stale");
  ASSERT_TRUE(v.got[1].reply.has_value());
  auto body = nlohmann::json::parse(v.got[1].reply->body());
  EXPECT_EQ(body["path"], "/objects/d/x");
  EXPECT_EQ(body["current"], 5);
  EXPECT_EQ(v.got[1].reply->at("Fencing-Token-Current"), "5");
  // Refused before its turn: the turn, when it comes, is handed on.
  for (int i = 0; i < 1000 && queue.active_keys() > 0; ++i) {
    ioc.run_one_for(std::chrono::milliseconds(10));
  }
  EXPECT_EQ(queue.active_keys(), 0u);
}

TEST_F(FenceFilterTest, APerKeyRouteRefusesASubtreeWriteOverAnotherKey) {
  UseRoutes({RouteAt("/objects/", config::RouteMode::kEnforce, config::RouteNesting::kPerKey)});
  EXPECT_TRUE(Write("/objects/d/x", 5).forward);
  const FenceVerdict refused = Check(Classify("DELETE", "/objects/d", "99"));
  ASSERT_FALSE(refused.forward);
  EXPECT_EQ(refused.outcome, "nested_keys");
  auto body = nlohmann::json::parse(refused.reply->body());
  EXPECT_EQ(body["error"], "nested_keys");
  EXPECT_EQ(body["path"], "/objects/d/x");
  EXPECT_EQ(body["key"], "/objects/d/x");
  // Outside every route, over a fenced path: refused with no token at all.
  const WriteIntent outside = Classify("DELETE", "/", std::nullopt);
  ASSERT_EQ(outside.kind, WriteIntent::Kind::kFence);
  EXPECT_EQ(Check(outside).outcome, "nested_keys");
  // ... and over nothing fenced, outside the tree's reach: not asked.
  EXPECT_EQ(Classify("DELETE", "/elsewhere", std::nullopt).kind,
            WriteIntent::Kind::kPassThrough);
}

}  // namespace
}  // namespace fencegate::proxy
