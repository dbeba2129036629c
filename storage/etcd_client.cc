#include "storage/etcd_client.h"

#include <openssl/evp.h>

#include <algorithm>
#include <array>
#include <charconv>
#include <limits>
#include <thread>
#include <utility>

#include "storage/etcd_connection.h"

namespace fencegate::storage {

using Clock = std::chrono::steady_clock;
using nlohmann::json;

namespace {

constexpr std::chrono::milliseconds kMaxDefaultTotal{30000};
constexpr std::chrono::milliseconds kMaxBackoff{1000};
constexpr size_t kMaxQuotedBody = 200;  // of a non-JSON error answer, in messages

bool Has(std::string_view text, std::string_view part) {
  return text.find(part) != std::string_view::npos;
}

// Errors that mean etcd did not take the token: authenticate again.
bool TokenRefused(std::string_view message) {
  return Has(message, "invalid auth token") || Has(message, "token expired") ||
         Has(message, "revision of auth store is old") || Has(message, "user name is empty");
}

// Errors etcd gives before it proposes or serves anything: another member
// may serve the call, and this one certainly did not apply it.
bool RefusedBeforeApplying(std::string_view message) {
  return Has(message, "etcdserver: no leader") || Has(message, "etcdserver: not capable") ||
         Has(message, "etcdserver: unhealthy cluster") ||
         Has(message, "etcdserver: rpc not supported for learner");
}

// Errors that mean this member cannot serve the call now; unless refused
// before applying, the call may still be applied ("request timed out": the
// proposal is in raft; "server stopped"; a gateway that lost its member).
bool MemberCannotServe(int64_t code, std::string_view message) {
  constexpr int64_t kDeadlineExceeded = 4;
  constexpr int64_t kUnavailable = 14;
  return code == kUnavailable || code == kDeadlineExceeded || RefusedBeforeApplying(message) ||
         Has(message, "etcdserver: request timed out") ||
         Has(message, "etcdserver: server stopped") || Has(message, "etcdserver: leader changed");
}

Status FromGrpcCode(int64_t code, std::string message) {
  switch (code) {
    case 3:   // InvalidArgument
    case 9:   // FailedPrecondition
    case 11:  // OutOfRange
      return Status::InvalidArgument(std::move(message));
    case 5:  // NotFound
      return Status::NotFound(std::move(message));
    case 8:  // ResourceExhausted
      return Status::Busy(std::move(message));
    case 15:  // DataLoss
      return Status::Corruption(std::move(message));
    default:
      return Status::IoError(std::move(message));
  }
}

}  // namespace

enum class EtcdClient::Verdict {
  kOk,              // *answer: etcd's answer
  kError,           // status: etcd refused the call; another member would too
  kTokenRefused,    // status: etcd did not take the token
  kAuthNotEnabled,  // an authenticate call on a cluster without authentication
  kFailover,        // why: this endpoint cannot serve the call now
};

struct EtcdClient::Judged {
  Verdict verdict = Verdict::kError;
  bool unknown = false;  // kFailover: the request may have been applied
  Status status;
  std::string why;  // "<endpoint>: <what went wrong>"
};

EtcdClient::EtcdClient(const EtcdClientOptions& options, std::vector<EtcdEndpoint> endpoints)
    : options_(options),
      endpoints_(std::move(endpoints)),
      total_timeout_(options.total_timeout.count() > 0
                         ? options.total_timeout
                         : std::min(options.request_timeout *
                                        static_cast<int64_t>(options.endpoints.size()),
                                    std::max(options.request_timeout, kMaxDefaultTotal))),
      connection_(std::make_unique<EtcdConnection>(options.tls, options.tls_server_name,
                                                   options.max_response_bytes)) {}

EtcdClient::~EtcdClient() = default;

Status EtcdClient::Open(const EtcdClientOptions& options, std::unique_ptr<EtcdClient>* out) {
  if (options.endpoints.empty()) return Status::InvalidArgument("etcd: no endpoints");
  if (options.request_timeout.count() <= 0) {
    return Status::InvalidArgument("etcd: the request timeout must be positive");
  }
  std::vector<EtcdEndpoint> endpoints;
  for (const std::string& url : options.endpoints) {
    EtcdEndpoint endpoint;
    std::string error;
    if (!ParseEtcdEndpoint(url, &endpoint, &error)) return Status::InvalidArgument(error);
    if (endpoint.tls && options.tls == nullptr) {
      return Status::InvalidArgument("etcd endpoint '" + url + "' is https but no TLS context");
    }
    endpoints.push_back(std::move(endpoint));
  }
  out->reset(new EtcdClient(options, std::move(endpoints)));
  return Status::Ok();
}

const std::string& EtcdClient::current_endpoint() const { return endpoints_[current_].url; }

EtcdClient::Judged EtcdClient::Attempt(std::string_view path, const std::string& body,
                                       bool with_token, Clock::time_point deadline,
                                       json* answer_out) {
  const EtcdEndpoint& endpoint = endpoints_[current_];
  const HttpAnswer answer = connection_->Post(endpoint, path, body,
                                              with_token ? token_ : std::string(),
                                              std::min(deadline, Clock::now() + options_.request_timeout));
  Judged judged;
  const std::string where = endpoint.url + std::string(path);
  if (answer.error) {
    judged.verdict = Verdict::kFailover;
    judged.unknown = answer.sent;
    judged.why = endpoint.url + ": " + answer.stage + ": " + answer.error.message();
    return judged;
  }
  json parsed = json::parse(answer.body, nullptr, /*allow_exceptions=*/false);
  const bool is_object = parsed.is_object();
  if (answer.status >= 200 && answer.status < 300) {
    if (is_object) {
      judged.verdict = Verdict::kOk;
      *answer_out = std::move(parsed);
      return judged;
    }
    // Whatever it did, the answer says nothing usable.
    connection_->Close();
    judged.verdict = Verdict::kFailover;
    judged.unknown = true;
    judged.why = endpoint.url + ": HTTP " + std::to_string(answer.status) + " with no JSON object";
    return judged;
  }
  if (is_object && parsed.contains("code") && parsed["code"].is_number_integer()) {
    const int64_t code = parsed["code"].get<int64_t>();
    std::string message;
    for (const char* field : {"message", "error"}) {
      if (message.empty() && parsed.contains(field) && parsed[field].is_string()) {
        message = parsed[field].get<std::string>();
      }
    }
    const std::string text = message + " (code " + std::to_string(code) + ")";
    if (MemberCannotServe(code, message)) {
      connection_->Close();
      judged.verdict = Verdict::kFailover;
      judged.unknown = !RefusedBeforeApplying(message);
      judged.why = endpoint.url + ": " + text;
      return judged;
    }
    judged.status = FromGrpcCode(code, "etcd " + where + ": " + text);
    if (TokenRefused(message)) {
      judged.verdict = Verdict::kTokenRefused;
    } else if (Has(message, "authentication is not enabled")) {
      judged.verdict = Verdict::kAuthNotEnabled;
    }
    return judged;
  }
  std::string quoted = answer.body.substr(0, kMaxQuotedBody);
  while (!quoted.empty() && (quoted.back() == '\n' || quoted.back() == '\r')) quoted.pop_back();
  const std::string text = "HTTP " + std::to_string(answer.status) + ": " + quoted;
  if (answer.status >= 500) {
    connection_->Close();
    judged.verdict = Verdict::kFailover;
    judged.unknown = true;
    judged.why = endpoint.url + ": " + text;
    return judged;
  }
  judged.status = Status::InvalidArgument("etcd " + where + ": " + text);
  return judged;
}

EtcdClient::Judged EtcdClient::Authenticate(Clock::time_point deadline) {
  const json request = {{"name", options_.username}, {"password", options_.password}};
  json answer;
  Judged judged = Attempt("/v3/auth/authenticate", request.dump(), false, deadline, &answer);
  if (judged.verdict == Verdict::kOk) {
    const auto it = answer.find("token");
    if (it == answer.end() || !it->is_string() || it->get<std::string>().empty()) {
      judged.verdict = Verdict::kError;
      judged.status = Status::IoError("etcd " + endpoints_[current_].url +
                                      "/v3/auth/authenticate: the answer has no token");
      return judged;
    }
    token_ = it->get<std::string>();
  } else if (judged.verdict == Verdict::kAuthNotEnabled) {
    auth_enabled_ = false;
    judged.verdict = Verdict::kOk;
  }
  return judged;
}

Status EtcdClient::Call(std::string_view path, const json& request, json* response,
                        bool retry_if_unknown, bool* maybe_applied,
                        Clock::time_point call_deadline) {
  const Clock::time_point deadline = std::min(Clock::now() + total_timeout_, call_deadline);
  const std::string body = request.dump();
  const bool with_credentials = !options_.username.empty();
  bool unknown = false;
  bool authenticated_again = false;
  std::string last = "no attempt started";
  std::chrono::milliseconds backoff = options_.retry_backoff;
  size_t failed_in_round = 0;
  if (maybe_applied != nullptr) *maybe_applied = false;

  while (Clock::now() < deadline) {
    Judged judged;
    if (with_credentials && auth_enabled_ && token_.empty()) {
      judged = Authenticate(deadline);
      if (judged.verdict == Verdict::kOk) continue;
      judged.unknown = false;  // the call itself was not sent
    } else {
      judged = Attempt(path, body, with_credentials && auth_enabled_, deadline, response);
    }
    switch (judged.verdict) {
      case Verdict::kOk:
        return Status::Ok();
      case Verdict::kTokenRefused:
        // Refused before it was applied: repeating it is safe.
        if (with_credentials && !authenticated_again) {
          authenticated_again = true;
          token_.clear();
          auth_enabled_ = true;
          continue;
        }
        return judged.status;
      case Verdict::kError:
      case Verdict::kAuthNotEnabled:
        return judged.status;
      case Verdict::kFailover:
        break;
    }
    last = judged.why;
    if (judged.unknown) {
      unknown = true;
      if (maybe_applied != nullptr) *maybe_applied = true;
      if (!retry_if_unknown) {
        current_ = (current_ + 1) % endpoints_.size();
        return Status::Unavailable("etcd: outcome unknown (the request may have been applied): " +
                                   last);
      }
    }
    current_ = (current_ + 1) % endpoints_.size();
    if (++failed_in_round < endpoints_.size()) continue;
    failed_in_round = 0;
    if (backoff.count() <= 0) break;
    const auto left = deadline - Clock::now();
    if (left <= Clock::duration::zero()) break;
    std::this_thread::sleep_for(std::min<Clock::duration>(backoff, left));
    backoff = std::min(backoff * 2, kMaxBackoff);
  }
  std::string message = "etcd: no endpoint served " + std::string(path) + " (" +
                        std::to_string(endpoints_.size()) + " endpoints, deadline " +
                        std::to_string(total_timeout_.count()) + " ms" +
                        (call_deadline < Clock::time_point::max() ? ", or the decision's" : "") +
                        "); last: " + last;
  if (unknown) message += " (an earlier attempt's outcome is unknown)";
  return Status::Unavailable(std::move(message));
}

std::string EtcdClient::Base64(std::string_view bytes) {
  constexpr size_t kChunk = size_t{3} * 4096;  // whole groups of 3 bytes
  std::string out;
  out.reserve((bytes.size() + 2) / 3 * 4);
  std::array<unsigned char, kChunk / 3 * 4 + 1> buffer{};
  for (size_t at = 0; at < bytes.size(); at += kChunk) {
    const size_t n = std::min(kChunk, bytes.size() - at);
    const int written = EVP_EncodeBlock(
        buffer.data(), reinterpret_cast<const unsigned char*>(bytes.data() + at),
        static_cast<int>(n));
    out.append(reinterpret_cast<const char*>(buffer.data()), static_cast<size_t>(written));
  }
  return out;
}

bool EtcdClient::FromBase64(std::string_view text, std::string* bytes) {
  bytes->clear();
  if (text.size() % 4 != 0) return false;
  size_t padding = 0;
  while (padding < 2 && padding < text.size() && text[text.size() - 1 - padding] == '=') {
    ++padding;
  }
  for (size_t i = 0; i < text.size() - padding; ++i) {
    const char c = text[i];
    const bool alphabet = (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') ||
                          (c >= '0' && c <= '9') || c == '+' || c == '/';
    if (!alphabet) return false;
  }
  // EVP_DecodeBlock decodes padding as zero bytes: drop them at the end.
  constexpr size_t kChunk = size_t{4} * 4096;  // whole groups of 4 characters
  std::array<unsigned char, kChunk / 4 * 3> buffer{};
  bytes->reserve(text.size() / 4 * 3);
  for (size_t at = 0; at < text.size(); at += kChunk) {
    const size_t n = std::min(kChunk, text.size() - at);
    const int decoded = EVP_DecodeBlock(
        buffer.data(), reinterpret_cast<const unsigned char*>(text.data() + at),
        static_cast<int>(n));
    if (decoded < 0) return false;
    bytes->append(reinterpret_cast<const char*>(buffer.data()), static_cast<size_t>(decoded));
  }
  bytes->resize(bytes->size() - padding);
  return true;
}

bool EtcdClient::Int64Field(const json& object, std::string_view name, int64_t* value) {
  *value = 0;
  if (!object.is_object()) return false;
  const auto it = object.find(name);
  if (it == object.end()) return true;
  if (it->is_number_integer()) {
    if (it->is_number_unsigned() &&
        it->get<uint64_t>() > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
      return false;
    }
    *value = it->get<int64_t>();
    return true;
  }
  if (!it->is_string()) return false;
  const std::string& text = it->get_ref<const std::string&>();
  const char* end = text.data() + text.size();
  auto [ptr, ec] = std::from_chars(text.data(), end, *value);
  if (text.empty() || ec != std::errc() || ptr != end) {
    *value = 0;
    return false;
  }
  return true;
}

}  // namespace fencegate::storage
