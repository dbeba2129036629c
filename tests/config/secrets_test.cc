// The admin bearer token from a file or an environment variable, and the
// secret files that storage.etcd.password_file shares the reading of:
// Load() refuses more than one source and a malformed field, and
// ResolveSecrets() reads the file or the variable with file, line and field
// in every refusal.

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <string>
#include <string_view>

#include "config/secrets.h"
#include "test_util.h"

namespace fencegate::config {
namespace {

namespace fs = std::filesystem;
using testing::FailsAt;
using testing::kUpstream;
using testing::MustLoad;

std::string WithAdmin(std::string_view admin) {
  return std::string(kUpstream) + "admin:\n" + std::string(admin);
}

class SecretsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string pattern = (fs::temp_directory_path() / "fencegate-secrets-XXXXXX").string();
    ASSERT_NE(::mkdtemp(pattern.data()), nullptr);
    dir_ = pattern;
  }
  void TearDown() override {
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }

  std::string Write(const std::string& name, std::string_view content) {
    const std::string path = (dir_ / name).string();
    std::ofstream(path, std::ios::binary) << content;
    return path;
  }

  // Loads `yaml` and resolves its secrets against `env`: the error, or ""
  // with *token set.
  std::string Resolve(std::string_view yaml, std::string* token,
                      const std::map<std::string, std::string>& env = {}) {
    Config c = MustLoad(yaml);
    std::string error;
    const bool ok = ResolveSecrets(
        &c,
        [&](const std::string& name) -> std::optional<std::string> {
          auto it = env.find(name);
          if (it == env.end()) return std::nullopt;
          return it->second;
        },
        &error);
    if (ok) *token = c.admin.token;
    return ok ? "" : error;
  }

  fs::path dir_;
};

TEST_F(SecretsTest, TokenFromAFileLosesOneTrailingNewline) {
  std::string token;
  for (std::string_view content : {"s3cret\n", "s3cret", "s3cret\r\n"}) {
    const std::string path = Write("token", content);
    ASSERT_EQ(Resolve(WithAdmin("  token_file: \"" + path + "\"\n"), &token), "") << content;
    EXPECT_EQ(token, "s3cret") << content;
  }
  // Only one: a token that ends in a space keeps it.
  const std::string path = Write("token", "s3cret \n");
  ASSERT_EQ(Resolve(WithAdmin("  token_file: \"" + path + "\"\n"), &token), "");
  EXPECT_EQ(token, "s3cret ");
}

TEST_F(SecretsTest, TokenFileIsKeptWithItsLine) {
  Config c = MustLoad(WithAdmin("  listen: \"127.0.0.1:0\"\n  token_file: /run/secrets/admin\n"));
  EXPECT_EQ(c.admin.token_file.path, "/run/secrets/admin");
  EXPECT_EQ(c.admin.token_file.line, 4);
  EXPECT_EQ(c.admin.token, "");  // until ResolveSecrets()
}

TEST_F(SecretsTest, UnusableTokenFilesAreRefused) {
  std::string token;
  const std::string missing = (dir_ / "missing").string();
  EXPECT_EQ(Resolve(WithAdmin("  token_file: \"" + missing + "\"\n"), &token),
            "test.yaml:3: field 'admin.token_file': cannot read '" + missing +
                "': No such file or directory");
  EXPECT_EQ(Resolve(WithAdmin("  token_file: \"" + dir_.string() + "\"\n"), &token),
            "test.yaml:3: field 'admin.token_file': cannot read '" + dir_.string() +
                "': is a directory");
  for (std::string_view content : {"", "\n", "\r\n"}) {
    const std::string path = Write("empty", content);
    EXPECT_EQ(Resolve(WithAdmin("  token_file: \"" + path + "\"\n"), &token),
              "test.yaml:3: field 'admin.token_file': '" + path +
                  "' is empty (expected a file holding the secret)");
  }
  for (std::string_view content : {"one\ntwo\n", "one\n\n", "one\rtwo"}) {
    const std::string path = Write("lines", content);
    EXPECT_EQ(Resolve(WithAdmin("  token_file: \"" + path + "\"\n"), &token),
              "test.yaml:3: field 'admin.token_file': '" + path +
                  "' holds more than one line (expected the secret on one line)");
  }
  const std::string big = Write("big", std::string(kMaxSecretBytes + 1, 'a'));
  EXPECT_NE(Resolve(WithAdmin("  token_file: \"" + big + "\"\n"), &token)
                .find("field 'admin.token_file': '" + big + "' holds more than 65536 bytes"),
            std::string::npos);
  const std::string limit = Write("limit", std::string(kMaxSecretBytes, 'a'));
  ASSERT_EQ(Resolve(WithAdmin("  token_file: \"" + limit + "\"\n"), &token), "");
  EXPECT_EQ(token.size(), kMaxSecretBytes);
}

TEST_F(SecretsTest, UnreadableTokenFileIsRefused) {
  if (::geteuid() == 0) GTEST_SKIP() << "root reads a file whatever its mode";
  const std::string path = Write("private", "s3cret\n");
  ASSERT_EQ(::chmod(path.c_str(), 0), 0);
  std::string token;
  EXPECT_EQ(Resolve(WithAdmin("  token_file: \"" + path + "\"\n"), &token),
            "test.yaml:3: field 'admin.token_file': cannot read '" + path +
                "': Permission denied");
}

TEST_F(SecretsTest, TokenFromTheEnvironment) {
  std::string token;
  ASSERT_EQ(Resolve(WithAdmin("  token_env: FG_ADMIN_TOKEN\n"), &token,
                    {{"FG_ADMIN_TOKEN", "from-env"}}),
            "");
  EXPECT_EQ(token, "from-env");
  EXPECT_EQ(Resolve(WithAdmin("  listen: \"127.0.0.1:0\"\n  token_env: FG_ADMIN_TOKEN\n"), &token),
            "test.yaml:4: field 'admin.token_env': the environment variable FG_ADMIN_TOKEN is "
            "not set (expected it to hold the admin bearer token)");
  EXPECT_EQ(Resolve(WithAdmin("  token_env: FG_ADMIN_TOKEN\n"), &token, {{"FG_ADMIN_TOKEN", ""}}),
            "test.yaml:3: field 'admin.token_env': the environment variable FG_ADMIN_TOKEN is "
            "empty (expected it to hold the admin bearer token)");
}

TEST_F(SecretsTest, InlineTokenAndNoTokenNeedNothing) {
  std::string token = "unchanged";
  ASSERT_EQ(Resolve(WithAdmin("  token: inline\n"), &token), "");
  EXPECT_EQ(token, "inline");
  ASSERT_EQ(Resolve(WithAdmin("  listen: \"\"\n"), &token), "");
  EXPECT_EQ(token, "");
}

TEST_F(SecretsTest, MalformedFieldsAreRefusedByLoad) {
  EXPECT_TRUE(FailsAt(WithAdmin("  token_env: \"\"\n"), 3, "admin.token_env", "is empty"));
  for (std::string_view name : {"1TOKEN", "MY-TOKEN", "A B", "T=1", "\"$TOKEN\""}) {
    EXPECT_TRUE(FailsAt(WithAdmin("  token_env: " + std::string(name) + "\n"), 3,
                        "admin.token_env", "is not an environment variable name"))
        << name;
  }
  EXPECT_TRUE(FailsAt(WithAdmin("  token_env: [A]\n"), 3, "admin.token_env", "is a list"));
  EXPECT_TRUE(FailsAt(WithAdmin("  token_file: \"\"\n"), 3, "admin.token_file", "is empty"));
  EXPECT_TRUE(FailsAt(WithAdmin("  token_file: {a: b}\n"), 3, "admin.token_file", "mapping"));
  EXPECT_EQ(MustLoad(WithAdmin("  token_env: _Fg_token_2\n")).admin.token_env, "_Fg_token_2");
}

TEST_F(SecretsTest, AtMostOneSourceOfTheToken) {
  EXPECT_TRUE(FailsAt(WithAdmin("  token: a\n  token_file: /run/t\n"), 4, "admin.token_file",
                      "conflicts with token on line 3 (expected at most one of token, "
                      "token_file and token_env)"));
  EXPECT_TRUE(FailsAt(WithAdmin("  token_env: T\n  listen: \"127.0.0.1:0\"\n  token: \"\"\n"), 5,
                      "admin.token", "conflicts with token_env on line 3"));
  EXPECT_TRUE(FailsAt(WithAdmin("  token_file: /run/t\n  token_env: T\n  token: a\n"), 4,
                      "admin.token_env", "conflicts with token_file on line 3"));
}

TEST_F(SecretsTest, EtcdPasswordFileIsReadByTheSameRules) {
  const std::string path = Write("password", "pw\n");
  std::string error;
  EXPECT_EQ(ReadSecretFile("f.yaml", FileRef{path, 7}, "storage.etcd.password_file", &error),
            "pw");
  const std::string empty = Write("empty", "");
  EXPECT_EQ(ReadSecretFile("f.yaml", FileRef{empty, 7}, "storage.etcd.password_file", &error),
            std::nullopt);
  EXPECT_EQ(error, "f.yaml:7: field 'storage.etcd.password_file': '" + empty +
                       "' is empty (expected a file holding the secret)");
}

}  // namespace
}  // namespace fencegate::config
