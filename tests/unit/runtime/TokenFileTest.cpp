// Token files: exactly batch x seq ids in range, or a message naming the file.
#include <gtest/gtest.h>

#include <fstream>

#include "TestUtil.h"
#include "runtime/TokenFile.h"

namespace tlc {
namespace {

using test::errorMessage;

TEST(TokenFile, ReadsWhitespaceSeparatedIds) {
  EXPECT_EQ(parseTokenIds(" 1\t2\r\n3\n\n+4 ", "t.txt", 4, 10), (std::vector<int32_t>{1, 2, 3, 4}));
}

TEST(TokenFile, RefusesWhatIsNoTokenId) {
  EXPECT_EQ(errorMessage([] { parseTokenIds("1 2 x", "t.txt", 3, 10); }),
            "token file 't.txt': 'x' is not a token id");
  EXPECT_CONTAINS(errorMessage([] { parseTokenIds("1 99999999999999999999", "t.txt", 2, 10); }),
                  "'99999999999999999999' is not a token id");
  EXPECT_CONTAINS(errorMessage([] { parseTokenIds("1 - 2", "t.txt", 3, 10); }), "'-' is not a token id");
  EXPECT_CONTAINS(errorMessage([] { parseTokenIds(std::string(100, '7'), "t.txt", 1, 10); }),
                  "'77777777777777777777777777777777...' is not a token id");
}

TEST(TokenFile, RangeAndCountAreChecked) {
  EXPECT_EQ(errorMessage([] { parseTokenIds("1 2 3 50", "t.txt", 4, 50); }),
            "token file 't.txt': token id 50 at position 3 is out of range for vocab 50 (valid ids are 0..49)");
  EXPECT_CONTAINS(errorMessage([] { parseTokenIds("-1", "t.txt", 1, 50); }), "token id -1 at position 0");
  EXPECT_EQ(errorMessage([] { parseTokenIds("1 2 3", "t.txt", 4, 50); }),
            "token file 't.txt': holds 3 ids, but a forward takes 4");
  // Stops at the first id too many: an endless file costs nothing.
  EXPECT_EQ(errorMessage([] { parseTokenIds("1 2 3 4 5 6", "t.txt", 4, 50); }),
            "token file 't.txt': holds more than the 4 ids a forward takes");
}

TEST(TokenFile, ReadsAFileForAProgram) {
  test::TempDir directory;
  std::ofstream(directory.file("ids.txt")) << "3 1\n4 1\n";
  Program program;
  program.batch = 2;
  program.seqLen = 2;
  program.vocab = 5;
  EXPECT_EQ(readTokenFile(directory.file("ids.txt"), program), (std::vector<int32_t>{3, 1, 4, 1}));
  EXPECT_CONTAINS(errorMessage([&] { readTokenFile(directory.file("none.txt"), program); }),
                  "cannot open token file '");
}

} // namespace
} // namespace tlc
