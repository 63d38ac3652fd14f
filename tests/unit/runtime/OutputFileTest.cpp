// The one writer every output goes through: whole or nothing, the old file kept on any
// failure, no temporary left behind, and output paths checked before any work.
#include "runtime/OutputFile.h"
#include "runtime/Error.h"

#include "TestUtil.h"

#include <cerrno>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <sys/stat.h>
#include <unistd.h>

namespace tlc {
namespace {

namespace fs = std::filesystem;

struct OutputFileTest : ::testing::Test {
  void SetUp() override {
    directory = fs::temp_directory_path() / fs::path("tlc-output-" + std::to_string(::getpid()) + "-" +
                                                     ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(directory);
    fs::create_directories(directory);
  }
  void TearDown() override {
    testing::failWriterCall(0, 0);
    fs::remove_all(directory);
  }
  std::string read(const fs::path &path) {
    std::ifstream file(path, std::ios::binary);
    std::stringstream text;
    text << file.rdbuf();
    return text.str();
  }
  // Everything in the directory but `keep`.
  std::vector<std::string> strays(const std::string &keep) {
    std::vector<std::string> names;
    for (const auto &entry : fs::directory_iterator(directory))
      if (entry.path().filename() != keep) names.push_back(entry.path().filename().string());
    return names;
  }
  fs::path directory;
};

TEST_F(OutputFileTest, ReplacesTheFileWholeAndKeepsItsPermissions) {
  fs::path path = directory / "out.bin";
  writeFileAtomically(path.string(), "old contents", "test file");
  ::chmod(path.c_str(), 0640);
  OutputFile file(path.string(), "test file");
  file.write("new ");
  EXPECT_EQ(read(path), "old contents");  // nothing in its place before commit
  file.write("contents");
  file.commit();
  EXPECT_EQ(read(path), "new contents");
  struct stat status;
  ASSERT_EQ(::stat(path.c_str(), &status), 0);
  EXPECT_EQ(status.st_mode & 0777, 0640u);
  EXPECT_TRUE(strays("out.bin").empty());
}

// Each system call of a write in turn fails: the old file stays as it was, no temporary
// is left, and the message names the path and the reason.
TEST_F(OutputFileTest, EveryFailingCallLeavesTheOldFile) {
  fs::path path = directory / "weights.safetensors";
  testing::failWriterCall(0, 0);
  writeFileAtomically(path.string(), "the user's file", "test file");
  testing::failWriterCall(0, 0);
  writeFileAtomically(path.string(), "the user's file", "test file");
  int calls = testing::writerCalls();  // open, write, fsync, close, rename
  ASSERT_GE(calls, 5);
  for (int call = 1; call <= calls; ++call) {
    testing::failWriterCall(call, ENOSPC);
    std::string message;
    try {
      writeFileAtomically(path.string(), std::string(1000, 'x'), "test file");
    } catch (const Error &error) {
      message = error.what();
    }
    testing::failWriterCall(0, 0);
    EXPECT_PRED_FORMAT2(test::assertContains, message, "cannot write test file '" + path.string() + "'");
    EXPECT_PRED_FORMAT2(test::assertContains, message, "No space left on device");
    EXPECT_EQ(read(path), "the user's file") << "failing call " << call;
    EXPECT_TRUE(strays("weights.safetensors").empty()) << "failing call " << call;
  }
}

TEST_F(OutputFileTest, ADestroyedUncommittedFileLeavesNothing) {
  fs::path path = directory / "new.json";
  {
    OutputFile file(path.string(), "test file");
    file.write("half");
  }
  EXPECT_FALSE(fs::exists(path));
  EXPECT_TRUE(strays("").empty());
}

TEST_F(OutputFileTest, WritesDevicesInPlaceAndRefusesDirectories) {
  writeFileAtomically("/dev/null", "discarded", "test file");  // never renamed over
  EXPECT_TRUE(fs::exists("/dev/null") && !fs::is_regular_file("/dev/null"));
  EXPECT_THROW(writeFileAtomically("/dev/full", "x", "test file"), Error);
  try {
    writeFileAtomically(directory.string(), "x", "test file");
    FAIL() << "a directory was written";
  } catch (const Error &error) {
    EXPECT_PRED_FORMAT2(test::assertContains, error.what(), "it is a directory");
  }
}

TEST_F(OutputFileTest, ChecksOutputPathsBeforeWork) {
  std::string input = (directory / "model.tl").string();
  writeFileAtomically(input, "module {}", "test file");
  fs::create_directories(directory / "sub");
  fs::create_symlink(directory, directory / "link");
  std::string same = (directory / "link" / "a.st").string(), a = (directory / "a.st").string();
  EXPECT_EQ(checkOutputPaths({{"--a", a}, {"--b", (directory / "b.st").string()}}, {{"--in", input}}), "");
  EXPECT_PRED_FORMAT2(test::assertContains, checkOutputPaths({{"--a", a}, {"--b", same}}, {}),
                      "--a and --b name the same file");
  EXPECT_PRED_FORMAT2(test::assertContains, checkOutputPaths({{"-o", (directory / "sub/../model.tl").string()}},
                                                             {{"(the model)", input}}),
                      "is also the input (the model)");
  EXPECT_PRED_FORMAT2(test::assertContains, checkOutputPaths({{"--a", (directory / "no/such/a.st").string()}}, {}),
                      "does not exist");
  EXPECT_PRED_FORMAT2(test::assertContains, checkOutputPaths({{"--dir", input, true}}, {}),
                      "exists and is not a directory");
  EXPECT_EQ(checkOutputPaths({{"--dir", (directory / "new/deeper").string(), true}}, {}), "");
  EXPECT_EQ(checkOutputPaths({{"-o", "-"}, {"--b", "-"}, {"--c", ""}}, {}), "");  // stdout, nothing
}

} // namespace
} // namespace tlc
