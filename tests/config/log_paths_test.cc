// The log section's files: Load() reads log.file and log.access_log_file
// with their lines and refuses one file named for both; CheckLogFiles() (a
// start and --check) refuses a file fencegate could not create or append
// to, with file, line and field.

#include "config/log_paths.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <string_view>

#include "test_util.h"

namespace fencegate::config {
namespace {

namespace fs = std::filesystem;
using testing::FailsAt;
using testing::kUpstream;
using testing::MustLoad;

std::string WithLog(std::string_view log) {
  return std::string(kUpstream) + "log:\n" + std::string(log);
}

TEST(LogConfigTest, FilesAreStandardErrorUnlessNamed) {
  Config c = MustLoad(kUpstream);
  EXPECT_TRUE(c.log.file.empty());
  EXPECT_TRUE(c.log.access_log);
  EXPECT_TRUE(c.log.access_log_file.empty());

  c = MustLoad(WithLog("  level: warn\n  file: /var/log/fencegate/fencegate.log\n"
                       "  access_log_file: access.log\n"));
  EXPECT_EQ(c.log.file, (FileRef{"/var/log/fencegate/fencegate.log", 4}));
  EXPECT_EQ(c.log.access_log_file, (FileRef{"access.log", 5}));
  // Still a plain boolean: "yes" is not a file name here.
  EXPECT_TRUE(FailsAt(WithLog("  access_log: yes\n"), 3, "log.access_log", "not a boolean"));
}

TEST(LogConfigTest, BadFieldsAreRefusedWithLineAndField) {
  EXPECT_TRUE(FailsAt(WithLog("  file: [a]\n"), 3, "log.file", "expected a string"));
  EXPECT_TRUE(FailsAt(WithLog("  access_log_file: {a: b}\n"), 3, "log.access_log_file",
                      "expected a string"));
  EXPECT_TRUE(FailsAt(WithLog("  access_log_file: \"a\\0b\"\n"), 3, "log.access_log_file",
                      "NUL"));
  EXPECT_TRUE(FailsAt(WithLog("  access_log_fle: a.log\n"), 3, "log.access_log_fle",
                      "did you mean 'access_log_file'?"));
  EXPECT_TRUE(FailsAt(WithLog("  file: /l/a.log\n  access_log_file: /l/a.log\n"), 4,
                      "log.access_log_file", "the same file as log.file"));
}

class LogPathsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string pattern = (fs::temp_directory_path() / "fencegate-logs-XXXXXX").string();
    ASSERT_NE(::mkdtemp(pattern.data()), nullptr);
    dir_ = pattern;
  }
  void TearDown() override {
    std::error_code ec;
    fs::permissions(dir_ / "ro", fs::perms::owner_all, ec);
    fs::remove_all(dir_, ec);
  }

  // CheckLogFiles on a config whose log.file (line 4) and
  // log.access_log_file (line 5) are `file` and `access`.
  std::string Check(const std::string& file, const std::string& access) {
    Config c = MustLoad(WithLog("  level: info\n  file: \"" + file + "\"\n  access_log_file: \"" +
                                access + "\"\n"));
    std::string error;
    if (CheckLogFiles(c, &error)) return "";
    EXPECT_FALSE(error.empty());
    return error;
  }

  fs::path dir_;
};

TEST_F(LogPathsTest, FilesInWritableDirectoriesPass) {
  EXPECT_EQ(Check("", ""), "");
  EXPECT_EQ(Check((dir_ / "app.log").string(), (dir_ / "access.log").string()), "");
  std::ofstream(dir_ / "there.log") << "an earlier line\n";
  EXPECT_EQ(Check((dir_ / "there.log").string(), ""), "");
}

TEST_F(LogPathsTest, AMissingDirectoryIsRefusedWithFileLineAndField) {
  const std::string missing = (dir_ / "nowhere" / "access.log").string();
  EXPECT_EQ(Check("", missing), "test.yaml:5: field 'log.access_log_file': the directory '" +
                                    (dir_ / "nowhere").string() + "' of '" + missing +
                                    "' does not exist (expected a file in an existing directory)");
  std::string error = Check((dir_ / "none" / "app.log").string(), "");
  EXPECT_EQ(error.rfind("test.yaml:4: field 'log.file': the directory", 0), 0U) << error;
}

TEST_F(LogPathsTest, ADirectoryIsNotALogFile) {
  std::string error = Check(dir_.string(), "");
  EXPECT_EQ(error, "test.yaml:4: field 'log.file': '" + dir_.string() + "' is a directory");
}

TEST_F(LogPathsTest, AReadOnlyDirectoryOrFileIsRefused) {
  if (::geteuid() == 0) GTEST_SKIP() << "root writes whatever the permissions say";
  fs::create_directory(dir_ / "ro");
  std::ofstream(dir_ / "ro" / "kept.log") << "x\n";
  fs::permissions(dir_ / "ro" / "kept.log", fs::perms::owner_read);
  fs::permissions(dir_ / "ro", fs::perms::owner_read | fs::perms::owner_exec);
  std::string error = Check("", (dir_ / "ro" / "new.log").string());
  EXPECT_NE(error.find("is not writable"), std::string::npos) << error;
  error = Check((dir_ / "ro" / "kept.log").string(), "");
  EXPECT_NE(error.find("exists and is not writable"), std::string::npos) << error;
}

}  // namespace
}  // namespace fencegate::config
