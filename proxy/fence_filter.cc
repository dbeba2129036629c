#include "proxy/fence_filter.h"

#include <boost/asio/execution/outstanding_work.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/prefer.hpp>
#include <vector>

#include "proxy/token.h"

namespace fencegate::proxy {

namespace {

const char* KeyErrorMessage(KeyTemplate::ExpandError e) {
  switch (e) {
    case KeyTemplate::ExpandError::kMissingHeader:
      return "the route's key template names a header that the request does not carry "
             "exactly once";
    case KeyTemplate::ExpandError::kEmpty:
      return "the key expands to an empty string";
    case KeyTemplate::ExpandError::kTooLong:
      return "the key is longer than 1024 bytes";
    case KeyTemplate::ExpandError::kBadByte:
      return "the key contains a control character";
    case KeyTemplate::ExpandError::kNone:
      break;
  }
  return "bad key";
}

}  // namespace

WriteIntent Classify(const FenceSettings& settings, const Router& router,
                     std::string_view method, std::string_view canonical_path,
                     const boost::beast::http::fields& headers) {
  WriteIntent intent;
  RouteMatch match = router.Match(method, canonical_path);
  intent.route = match.route;
  if (!match.route || !match.fenced) {
    intent.outcome = "forwarded";
    return intent;
  }
  intent.shadow = match.route->mode == config::RouteMode::kShadow;

  // Step 2 first, so that even a 428 can name the key.
  // A header sent twice cannot name one key: treat it as absent (400 bad_key).
  auto lookup = [&headers](std::string_view name) -> std::optional<std::string_view> {
    auto range = headers.equal_range(name);
    if (range.first == range.second || std::next(range.first) != range.second) {
      return std::nullopt;
    }
    return range.first->value();
  };
  auto key_error = match.route->key.Expand(canonical_path, match.captures, lookup, &intent.key);
  if (key_error != KeyTemplate::ExpandError::kNone) {
    intent.kind = WriteIntent::Kind::kReject;
    intent.outcome = "bad_request";
    intent.reply = MakeError(http::status::bad_request, "bad_key", KeyErrorMessage(key_error),
                             {{"route", match.route->name}});
    intent.key.clear();
    return intent;
  }

  // Step 1: the token.
  std::vector<std::string_view> values;
  auto range = headers.equal_range(settings.token_header);
  for (auto it = range.first; it != range.second; ++it) values.push_back(it->value());
  TokenParse token = ParseTokenHeaders(values);
  if (token.status == TokenStatus::kMissing) {
    intent.outcome = "token_required";
    intent.reply = MakeError(http::status::precondition_required, "token_required",
                             "this route is fenced: send the lock's fencing token in the " +
                                 settings.token_header + " header",
                             {{"key", intent.key}});
  } else if (token.status == TokenStatus::kMalformed) {
    intent.outcome = "bad_request";
    intent.reply = MakeError(http::status::bad_request, "bad_token",
                             settings.token_header + ": " + token.reason);
  } else {
    intent.kind = WriteIntent::Kind::kFence;
    intent.token = token.value;
    intent.outcome = "forwarded";
    return intent;
  }
  if (intent.shadow) {
    // Shadow mode never refuses: forward unfenced, remember what would have happened.
    intent.shadow_violation = intent.outcome;
    intent.kind = WriteIntent::Kind::kPassThrough;
    intent.outcome = "forwarded";
    intent.reply.reset();
    return intent;
  }
  intent.kind = WriteIntent::Kind::kReject;
  return intent;
}

void FenceFilter::Check(const WriteIntent& intent, boost::asio::any_io_executor executor,
                        Handler handler) {
  // While the store works, the caller's io_context must keep running so the
  // verdict can be delivered (shutdown waits for it).
  executor = boost::asio::prefer(executor, boost::asio::execution::outstanding_work.tracked);
  queue_.Acquire(
      intent.key, executor,
      [this, key = intent.key, token = intent.token, shadow = intent.shadow, executor,
       handler = std::move(handler)](KeyLease lease) mutable {
        if (!lease.held()) {
          // Too many writes already wait for this key (enforce mode only:
          // shadow mode never refuses, SPEC 5, so its writes always queue).
          FenceVerdict v;
          v.outcome = "overloaded";
          Reply r = MakeError(http::status::service_unavailable, "too_many_waiting",
                              "too many writes are waiting for this key (limits."
                              "max_waiting_per_key = " +
                                  std::to_string(queue_.max_waiting_per_key()) +
                                  "); retry later",
                              {{"key", key}});
          r.set(http::field::retry_after, "1");
          v.reply = std::move(r);
          return handler(std::move(v));  // already on `executor`
        }
        // The lease travels through the store's thread and back; it is
        // released only when the verdict (and so the exchange) is done.
        auto shared_lease = std::make_shared<KeyLease>(std::move(lease));
        store_.Advance(
            key, token,
            [this, key, token, shadow, executor, shared_lease,
             handler = std::move(handler)](const storage::Status& status,
                                           storage::Fence fence) mutable {
              FenceVerdict v;
              v.lease = std::move(*shared_lease);
              v.current = fence.current;
              if (!status.ok()) {
                v.outcome = "store_unavailable";
                v.reply = MakeStoreError(status);
              } else if (!fence.accepted) {
                v.outcome = "stale";
                v.reply = MakeStale(key, token, fence.current);
              } else {
                v.outcome = "forwarded";
                v.forward = true;
              }
              if (shadow && !v.forward) {
                v.shadow_violation = v.outcome;
                CountShadowViolation();
                v.forward = true;
                v.reply.reset();
                v.outcome = "forwarded";
              }
              if (!v.forward) v.lease.Release();  // nothing will be forwarded
              boost::asio::post(executor, [handler = std::move(handler),
                                           v = std::move(v)]() mutable { handler(std::move(v)); });
            });
      },
      /*bounded=*/!intent.shadow);
}

}  // namespace fencegate::proxy
