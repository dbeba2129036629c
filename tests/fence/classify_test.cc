// Classify's refusals of what could write one resource under another key or
// slip past the fence: method overrides, path parameters, headers the fence
// depends on, and the second resource of a COPY or MOVE.

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "fence/classify.h"

namespace fencegate::proxy {
namespace {

namespace http = boost::beast::http;
using Headers = std::vector<std::pair<std::string, std::string>>;

config::RouteConfig Route(std::string name, std::string prefix) {
  config::RouteConfig r;
  r.name = std::move(name);
  r.path_prefix = std::move(prefix);
  return r;
}

class ClassifyTest : public ::testing::Test {
 protected:
  void UseRoutes(std::vector<config::RouteConfig> routes) {
    std::string error;
    router_ = Router::Build(routes, &error);
    ASSERT_TRUE(router_) << error;
  }
  WriteIntent Classify(std::string_view method, std::string_view path, const Headers& extra,
                       std::optional<std::string> token = "5") {
    http::fields headers;
    if (token) headers.insert("Fencing-Token", *token);
    for (const auto& [name, value] : extra) headers.insert(name, value);
    return proxy::Classify(settings_, *router_, method, path, headers);
  }
  // The error code of a refusal, "" when the request is not refused.
  static std::string Refusal(const WriteIntent& i) {
    if (i.kind != WriteIntent::Kind::kReject) return "";
    EXPECT_EQ(i.reply->result(), http::status::bad_request);
    return nlohmann::json::parse(i.reply->body())["error"];
  }

  FenceSettings settings_;
  std::unique_ptr<Router> router_;
};

TEST_F(ClassifyTest, AnOverrideHeaderMakesTheRequestFencedIfEitherMethodIs) {
  config::RouteConfig deletes = Route("deletes", "/objects/");
  deletes.methods = {"DELETE"};
  UseRoutes({deletes, Route("all", "/all/")});
  for (const char* header : {"X-HTTP-Method-Override", "X-HTTP-Method", "X-Method-Override",
                             "x-http-method-override"}) {
    WriteIntent i = Classify("POST", "/objects/a", {{header, "DELETE"}});
    EXPECT_EQ(i.kind, WriteIntent::Kind::kFence) << header;
    EXPECT_EQ(i.key, "/objects/a");
  }
  EXPECT_EQ(Classify("POST", "/objects/a", {}).kind, WriteIntent::Kind::kPassThrough);
  EXPECT_EQ(Classify("GET", "/all/a", {{"X-HTTP-Method-Override", "PUT"}}).kind,
            WriteIntent::Kind::kFence);
  EXPECT_EQ(Classify("GET", "/all/a", {{"X-HTTP-Method-Override", "GET, PUT"}}).kind,
            WriteIntent::Kind::kFence);
  EXPECT_EQ(Classify("GET", "/all/a", {{"X-HTTP-Method-Override", "GET"}}).kind,
            WriteIntent::Kind::kPassThrough);
  // Without a token it is a 428, as any fenced write.
  WriteIntent missing = Classify("GET", "/all/a", {{"X-HTTP-Method", "delete"}}, std::nullopt);
  ASSERT_EQ(missing.kind, WriteIntent::Kind::kReject);
  EXPECT_EQ(missing.reply->result(), http::status::precondition_required);
}

TEST_F(ClassifyTest, AnOverrideThatIsNotAMethodIs400) {
  UseRoutes({Route("all", "/all/")});
  EXPECT_EQ(Refusal(Classify("GET", "/other", {{"X-HTTP-Method-Override", "P T"}})),
            "bad_request");
  EXPECT_EQ(Refusal(Classify("POST", "/all/a", {{"X-Method-Override", "PUT, (DELETE)"}})),
            "bad_request");
}

TEST_F(ClassifyTest, PathParametersInAWriteAre400WhereverThePathPoints) {
  config::RouteConfig matrix = Route("matrix", "/matrix/");
  matrix.keep_path_params = true;
  UseRoutes({Route("objects", "/objects/"), matrix});
  EXPECT_EQ(Refusal(Classify("PUT", "/objects/k;x=1", {})), "bad_path");
  EXPECT_EQ(Refusal(Classify("put", "/objects/k;", {})), "bad_path");
  EXPECT_EQ(Refusal(Classify("DELETE", "/unrouted/k;jsessionid=1", {})), "bad_path");
  EXPECT_EQ(Refusal(Classify("GET", "/objects/k;x", {{"X-HTTP-Method-Override", "PUT"}})),
            "bad_path");
  // Reads are not fenced and may carry them.
  EXPECT_EQ(Classify("GET", "/objects/k;x=1", {}).kind, WriteIntent::Kind::kPassThrough);
  // A route that keeps them keys them.
  WriteIntent kept = Classify("PUT", "/matrix/k;v=2", {});
  ASSERT_EQ(kept.kind, WriteIntent::Kind::kFence);
  EXPECT_EQ(kept.key, "/matrix/k;v=2");
}

TEST_F(ClassifyTest, AConnectionHeaderMayNotNominateAHeaderTheFenceReads) {
  config::RouteConfig tenants = Route("tenants", "/t/");
  tenants.key = "{header:X-Tenant}{path}";
  UseRoutes({Route("objects", "/objects/"), tenants});
  EXPECT_EQ(Refusal(Classify("PUT", "/objects/a", {{"Connection", "Fencing-Token"}})),
            "bad_token");
  EXPECT_EQ(Refusal(Classify("PUT", "/objects/a", {{"Connection", "close, fencing-token"}})),
            "bad_token");
  EXPECT_EQ(
      Refusal(Classify("PUT", "/t/a", {{"X-Tenant", "acme"}, {"Connection", "x-tenant"}})),
      "bad_key");
  EXPECT_EQ(Classify("PUT", "/objects/a", {{"Connection", "keep-alive"}}).kind,
            WriteIntent::Kind::kFence);
  // Unfenced requests are not concerned.
  EXPECT_EQ(Classify("PUT", "/other", {{"Connection", "Fencing-Token"}}).kind,
            WriteIntent::Kind::kPassThrough);
}

TEST_F(ClassifyTest, AKeyHeaderSentTwiceOrAsAListIs400) {
  config::RouteConfig tenants = Route("tenants", "/t/");
  tenants.key = "{header:X-Tenant}{path}";
  UseRoutes({tenants});
  EXPECT_EQ(Refusal(Classify("PUT", "/t/a", {{"X-Tenant", "acme"}, {"X-Tenant", "evil"}})),
            "bad_key");
  EXPECT_EQ(Refusal(Classify("PUT", "/t/a", {{"X-Tenant", "acme, evil"}})), "bad_key");
  EXPECT_EQ(Refusal(Classify("PUT", "/t/a", {})), "bad_key");
  WriteIntent ok = Classify("PUT", "/t/a", {{"X-Tenant", "acme"}});
  ASSERT_EQ(ok.kind, WriteIntent::Kind::kFence);
  EXPECT_EQ(ok.key, "acme/t/a");
}

TEST_F(ClassifyTest, CopyAndMoveFenceTheirDestinationToo) {
  UseRoutes({Route("objects", "/objects/")});
  for (const char* method : {"COPY", "MOVE", "move"}) {
    WriteIntent i = Classify(method, "/objects/a", {{"Destination", "/objects/b"}});
    ASSERT_EQ(i.kind, WriteIntent::Kind::kFence) << method;
    EXPECT_EQ(i.key, "/objects/a");
    EXPECT_EQ(i.extra_keys, std::vector<std::string>{"/objects/b"});
    ASSERT_TRUE(i.destination.has_value());
    EXPECT_EQ(i.destination->origin, "");
    EXPECT_EQ(i.destination->target.forward, "/objects/b");
  }
  // An absolute URI, spelt otherwise: one key, forwarded canonical.
  WriteIntent abs = Classify("MOVE", "/objects/a",
                             {{"Destination", "http://backend:8080/objects//x/../rep%3a1/"}});
  ASSERT_EQ(abs.kind, WriteIntent::Kind::kFence);
  EXPECT_EQ(abs.extra_keys, std::vector<std::string>{"/objects/rep:1"});
  EXPECT_EQ(abs.destination->origin, "http://backend:8080");
  EXPECT_EQ(abs.destination->target.forward, "/objects/rep:1/");
  // Onto itself: one key.
  EXPECT_TRUE(Classify("COPY", "/objects/a", {{"Destination", "/objects/a/"}}).extra_keys.empty());
}

TEST_F(ClassifyTest, ADestinationOutsideFencedRoutesFencesOnlyTheSource) {
  UseRoutes({Route("objects", "/objects/")});
  WriteIntent out = Classify("MOVE", "/objects/a", {{"Destination", "/archive/a"}});
  ASSERT_EQ(out.kind, WriteIntent::Kind::kFence);
  EXPECT_EQ(out.key, "/objects/a");
  EXPECT_TRUE(out.extra_keys.empty());
  // From outside into a fenced route: the destination is the key.
  WriteIntent in = Classify("COPY", "/archive/a", {{"Destination", "/objects/a"}});
  ASSERT_EQ(in.kind, WriteIntent::Kind::kFence);
  EXPECT_EQ(in.key, "/objects/a");
  EXPECT_TRUE(in.extra_keys.empty());
  EXPECT_EQ(Classify("COPY", "/archive/a", {{"Destination", "/objects/a"}}, std::nullopt)
                .reply->result(),
            http::status::precondition_required);
  // Neither fenced: passes through, still with the canonical Destination.
  WriteIntent neither = Classify("COPY", "/archive/a", {{"Destination", "/x/%62"}});
  EXPECT_EQ(neither.kind, WriteIntent::Kind::kPassThrough);
  ASSERT_TRUE(neither.destination.has_value());
  EXPECT_EQ(neither.destination->target.forward, "/x/b");
}

TEST_F(ClassifyTest, ABadDestinationIs400) {
  UseRoutes({Route("objects", "/objects/")});
  EXPECT_EQ(Refusal(Classify("COPY", "/objects/a", {{"Destination", "/objects/b%2Fc"}})),
            "bad_path");
  EXPECT_EQ(Refusal(Classify("COPY", "/objects/a", {{"Destination", "/objects/b?x=1"}})),
            "bad_path");
  EXPECT_EQ(Refusal(Classify("COPY", "/objects/a", {{"Destination", "ftp://h/objects/b"}})),
            "bad_path");
  EXPECT_EQ(Refusal(Classify("COPY", "/objects/a", {{"Destination", "objects/b"}})), "bad_path");
  EXPECT_EQ(Refusal(Classify("COPY", "/objects/a", {{"Destination", "/../b"}})), "bad_path");
  EXPECT_EQ(Refusal(Classify("MOVE", "/objects/a", {{"Destination", "/objects/b;x=1"}})),
            "bad_path");
  EXPECT_EQ(Refusal(Classify("MOVE", "/objects/a",
                             {{"Destination", "/objects/b"}, {"Destination", "/objects/c"}})),
            "bad_request");
}

TEST_F(ClassifyTest, ACaseInsensitiveRouteRefusesWritesItCannotFold) {
  config::RouteConfig ci = Route("ci", "/objects/");
  ci.case_insensitive = true;
  UseRoutes({ci});
  EXPECT_EQ(Refusal(Classify("PUT", "/objects/caf\xC3\xA9", {})), "bad_path");
  EXPECT_EQ(Classify("GET", "/objects/caf\xC3\xA9", {}).kind, WriteIntent::Kind::kPassThrough);
  WriteIntent folded = Classify("PUT", "/OBJECTS/ReadMe", {});
  ASSERT_EQ(folded.kind, WriteIntent::Kind::kFence);
  EXPECT_EQ(folded.key, "/objects/readme");
}

}  // namespace
}  // namespace fencegate::proxy
