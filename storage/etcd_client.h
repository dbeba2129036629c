#pragma once
// EtcdClient: a blocking client of etcd's v3 JSON gateway (etcd 3.4: POST
// of JSON to /v3/kv/range, /v3/kv/txn, /v3/kv/put, /v3/kv/deleterange,
// /v3/lease/grant, /v3/lease/revoke, /v3/auth/authenticate,
// /v3/maintenance/status, ...), for the etcd engine's own thread.
//
// Written on Boost.Beast because Debian bookworm packages no C++ etcd v3
// client (`apt-cache search etcd` lists etcd-server, etcd-client, Go
// sources, Python clients and no C++ library; `apt-cache policy
// libetcd-cpp-api-dev` finds no such package), and the gateway needs only
// HTTP/1.1 and JSON.
//
// One kept-alive connection, to the current endpoint. A call that the
// current endpoint cannot serve (no connection, a timeout, HTTP 5xx, or an
// etcd error meaning the member cannot serve: "etcdserver: no leader",
// "etcdserver: request timed out", gRPC code 14 Unavailable) closes that
// connection and goes to the next endpoint, round after round, all within
// one deadline per call; the endpoint that answers stays current.
//
// Not thread-safe: one thread at a time calls it (it runs a private
// io_context on the calling thread). No call blocks past its deadline,
// except for a host name's lookup (etcd_connection.h): prefer IP addresses.

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "storage/status.h"

namespace boost::asio::ssl {
class context;
}  // namespace boost::asio::ssl

namespace fencegate::storage {

class EtcdConnection;
struct EtcdEndpoint;

struct EtcdClientOptions {
  // "http://host:port" or "https://host:port" (port 2379 when absent), tried
  // in this order. At least one.
  std::vector<std::string> endpoints;
  // The context of https endpoints (trust store, client certificate, whether
  // to verify): required when one is https. Not owned; outlives the client.
  boost::asio::ssl::context* tls = nullptr;
  // The name sent in SNI and verified in the server's certificate; "" = each
  // endpoint's host (an IP address is checked against the IP entries).
  std::string tls_server_name;
  // One attempt on one endpoint: connect, TLS handshake, write and read.
  std::chrono::milliseconds request_timeout{2000};
  // One call, failover included; 0 = request_timeout times the number of
  // endpoints, at most max(request_timeout, 30 s).
  std::chrono::milliseconds total_timeout{0};
  // After a round in which every endpoint failed, the pause before the next
  // round, doubled each round up to 1 s and never past the deadline;
  // 0 = one round only.
  std::chrono::milliseconds retry_backoff{50};
  // With a username, the client authenticates (/v3/auth/authenticate) before
  // its first call and sends the token as the Authorization header; when
  // etcd says the token is invalid or expired, it authenticates once more
  // and repeats the call once (etcd refuses a token before it applies
  // anything). When etcd says authentication is not enabled, calls go
  // without a token. "" = no authentication.
  std::string username;
  std::string password;
  size_t max_response_bytes = size_t{64} << 20;  // a larger answer is an error
};

class EtcdClient {
 public:
  // Checks the options; connects on the first call, not here. InvalidArgument
  // for a malformed or missing endpoint, or an https endpoint without `tls`.
  static Status Open(const EtcdClientOptions& options, std::unique_ptr<EtcdClient>* out);
  ~EtcdClient();
  EtcdClient(const EtcdClient&) = delete;
  EtcdClient& operator=(const EtcdClient&) = delete;

  // POSTs `request` to the gateway's `path` ("/v3/kv/range") and, on Ok,
  // stores etcd's answer in *response (int64 fields as JSON strings, zero
  // values and false omitted: see Int64Field).
  //
  // Errors: an etcd error answer becomes a Status by its gRPC code, with
  // etcd's message: InvalidArgument for 3, 9 and 11 (a malformed request, a
  // wrong password, no user name where authentication is on); NotFound for
  // 5 (an unknown lease); Busy for 8; Corruption for 15; IoError for the
  // rest (permission denied, a token refused twice). An HTTP error without
  // an etcd body below 500 (404 for an unknown path): InvalidArgument.
  // Unavailable when no endpoint served the call before the deadline,
  // naming the last endpoint and its error.
  //
  // An attempt whose outcome is unknown -- the request may have reached etcd
  // but no answer came (a timeout or a connection lost after writing), or
  // etcd gave up waiting for it ("request timed out") -- ends the call with
  // Unavailable("outcome unknown ...") unless `retry_if_unknown` (say so
  // for a call that is safe to apply twice: reads, a put of the same value,
  // a txn whose compare makes a repeat harmless); then the next endpoint
  // gets it. *maybe_applied (when given) is set to whether an attempt's
  // outcome was unknown: on an error, whether the call may have been
  // applied after all; on Ok, whether it may have been applied twice.
  // `deadline`, when earlier than the call's own total_timeout, ends it
  // sooner.
  Status Call(std::string_view path, const nlohmann::json& request, nlohmann::json* response,
              bool retry_if_unknown, bool* maybe_applied = nullptr,
              std::chrono::steady_clock::time_point deadline =
                  std::chrono::steady_clock::time_point::max());

  // The URL of the endpoint the next call goes to first.
  const std::string& current_endpoint() const;

  // Base64 (RFC 4648, with padding) as the gateway spells keys and values.
  static std::string Base64(std::string_view bytes);
  // false for anything but canonical padded Base64 (no whitespace).
  static bool FromBase64(std::string_view text, std::string* bytes);
  // The int64 field `name` of a gateway object: the gateway writes int64 as
  // a JSON string of decimal digits and omits it when it is 0 (a JSON
  // number is taken too). false when it is there but no int64.
  static bool Int64Field(const nlohmann::json& object, std::string_view name, int64_t* value);
  // Whether a /v3/kv/txn answer took its success branch (the gateway
  // leaves out booleans that are false).
  static bool Succeeded(const nlohmann::json& txn) { return txn.value("succeeded", false); }

 private:
  enum class Verdict;
  struct Judged;

  EtcdClient(const EtcdClientOptions& options, std::vector<EtcdEndpoint> endpoints);
  // Sends one request to the current endpoint and judges what came back;
  // etcd's answer goes to *answer when the verdict is kOk.
  Judged Attempt(std::string_view path, const std::string& body, bool with_token,
                 std::chrono::steady_clock::time_point deadline, nlohmann::json* answer);
  Judged Authenticate(std::chrono::steady_clock::time_point deadline);

  const EtcdClientOptions options_;
  const std::vector<EtcdEndpoint> endpoints_;
  const std::chrono::milliseconds total_timeout_;
  std::unique_ptr<EtcdConnection> connection_;
  size_t current_ = 0;  // index into endpoints_
  std::string token_;   // the auth token; "" = none yet
  bool auth_enabled_ = true;  // false: etcd said authentication is not enabled
};

}  // namespace fencegate::storage
