// An unknown key names the accepted key it most likely misspells, when one
// is close; EditDistance, which decides what is close.

#include <gtest/gtest.h>

#include <string>
#include <string_view>

#include "config/internal.h"
#include "test_util.h"

namespace fencegate::config {
namespace {

using internal::EditDistance;
using testing::ErrorOf;
using testing::FailsAt;
using testing::kUpstream;

using testing::WithUpstream;

TEST(EditDistanceTest, CountsEachKindOfEdit) {
  EXPECT_EQ(EditDistance("timeout", "timeout"), 0u);
  EXPECT_EQ(EditDistance("", ""), 0u);
  EXPECT_EQ(EditDistance("", "key"), 3u);
  EXPECT_EQ(EditDistance("key", ""), 3u);
  EXPECT_EQ(EditDistance("timout", "timeout"), 1u);   // insertion
  EXPECT_EQ(EditDistance("timeoutt", "timeout"), 1u); // deletion
  EXPECT_EQ(EditDistance("tineout", "timeout"), 1u);  // substitution
  EXPECT_EQ(EditDistance("tiemout", "timeout"), 1u);  // swap of neighbours
  EXPECT_EQ(EditDistance("PUTT", "PUT"), 1u);
  EXPECT_EQ(EditDistance("tmieuot", "timeout"), 2u);  // two swaps
  EXPECT_EQ(EditDistance("Listen", "listen"), 1u);    // case-sensitive
  EXPECT_EQ(EditDistance("kitten", "sitting"), 3u);
  EXPECT_EQ(EditDistance("ca", "abc"), 3u);           // no edit of a swapped pair
}

TEST(SuggestionTest, AMisspeltKeyNamesTheClosestOne) {
  EXPECT_EQ(ErrorOf("upstream:\n  url: http://h\n  timout: 5s\n"),
            "test.yaml:3: field 'upstream.timout': unknown key; did you mean 'timeout'? "
            "(expected one of url, connect_timeout, timeout, max_idle_connections, tls)");
  EXPECT_TRUE(FailsAt(WithUpstream("thread: 4\n"), 2, "thread",
                      "unknown key; did you mean 'threads'?"));
  EXPECT_TRUE(FailsAt(WithUpstream("limits:\n  max_body_byte: 5\n"), 3, "limits.max_body_byte",
                      "did you mean 'max_body_bytes'?"));
  EXPECT_TRUE(FailsAt(WithUpstream("routes:\n  - path_prefix: /a\n    kye: \"{path}\"\n"), 4,
                      "routes[0].kye", "did you mean 'key'?"));
  EXPECT_TRUE(FailsAt(WithUpstream("storage:\n  etcd:\n    endpoint: [a]\n"), 4,
                      "storage.etcd.endpoint", "did you mean 'endpoints'?"));
}

TEST(SuggestionTest, ALetterCaseDifferenceIsNamed) {
  EXPECT_TRUE(FailsAt(WithUpstream("Listen: \"127.0.0.1:1\"\n"), 2, "Listen",
                      "unknown key; did you mean 'listen'?"));
  EXPECT_TRUE(FailsAt(WithUpstream("admin:\n  TOKEN: x\n"), 3, "admin.TOKEN",
                      "did you mean 'token'?"));
}

TEST(SuggestionTest, TwoEditsAreCloseOnlyForNamesLongerThanThree) {
  EXPECT_TRUE(FailsAt(WithUpstream("log:\n  lvl: info\n"), 3, "log.lvl",
                      "unknown key (expected one of level, file, access_log, access_log_file)"));
  EXPECT_TRUE(FailsAt(WithUpstream("log:\n  lelev: info\n"), 3, "log.lelev",
                      "did you mean 'level'?"));
}

TEST(SuggestionTest, NoSuggestionWhenNothingIsClose) {
  for (std::string_view yaml : {"log: {level: info, format: json}\n",
                                "backend:\n  url: http://h\n",
                                "limits:\n  max: 5\n",
                                "metrics:\n  listen: \"127.0.0.1:9100\"\n"}) {
    const std::string message = ErrorOf(WithUpstream(yaml));
    EXPECT_NE(message.find("unknown key (expected one of"), std::string::npos) << message;
    EXPECT_EQ(message.find("did you mean"), std::string::npos) << message;
  }
}

TEST(SuggestionTest, OnATieTheFirstAcceptedKeyIsNamed) {
  // "lots" is two edits from locks and from log: locks comes first at the
  // root.
  EXPECT_EQ(EditDistance("lots", "locks"), 2u);
  EXPECT_EQ(EditDistance("lots", "log"), 2u);
  EXPECT_TRUE(FailsAt(WithUpstream("lots: 1\n"), 2, "lots", "did you mean 'locks'?"));
  // A closer key wins over one met before it: "logs" is two edits from
  // locks, one from log.
  EXPECT_TRUE(FailsAt(WithUpstream("logs: {}\n"), 2, "logs", "did you mean 'log'?"));
  // "locsk" is one swap from locks and two edits from log.
  EXPECT_TRUE(FailsAt(WithUpstream("locsk: {}\n"), 2, "locsk", "did you mean 'locks'?"));
}

}  // namespace
}  // namespace fencegate::config
