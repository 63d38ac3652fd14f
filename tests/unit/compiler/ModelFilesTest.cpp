// The committed model files are the builder's output, and the IR round-trips.
#include "TestSupport.h"

#include "mlir/IR/Verifier.h"
#include "mlir/Parser/Parser.h"
#include "llvm/Support/MemoryBuffer.h"

using namespace tlc;

namespace {

std::string readFile(const std::string &path) {
  auto buffer = llvm::MemoryBuffer::getFile(path);
  EXPECT_TRUE(bool(buffer)) << "cannot read " << path;
  return buffer ? (*buffer)->getBuffer().str() : "";
}

struct ModelFile {
  const char *preset;
  const char *path;
};

std::ostream &operator<<(std::ostream &os, const ModelFile &file) { return os << file.path; }

class CommittedModelTest : public ::testing::TestWithParam<ModelFile> {};

TEST_P(CommittedModelTest, EqualsBuilderOutput) {
  auto context = support::makeContext();
  auto module = buildLlamaModule(*context, *presetConfig(GetParam().preset));
  ASSERT_TRUE(mlir::succeeded(mlir::verify(*module)));
  std::string committed = readFile(std::string(TLC_SOURCE_DIR) + "/" + GetParam().path);
  EXPECT_EQ(committed, printModule(*module))
      << GetParam().path << " is stale: regenerate it with tl-modelgen --preset=" << GetParam().preset;
}

TEST_P(CommittedModelTest, RoundTripsThroughPrintAndParse) {
  auto context = support::makeContext();
  std::string text = readFile(std::string(TLC_SOURCE_DIR) + "/" + GetParam().path);
  auto parsed = mlir::parseSourceString<mlir::ModuleOp>(text, context.get());
  ASSERT_TRUE(parsed);
  EXPECT_EQ(printModule(*parsed), text);
}

INSTANTIATE_TEST_SUITE_P(Models, CommittedModelTest,
                         ::testing::Values(ModelFile{"workshop", "models/tinyllama.tl"},
                                           ModelFile{"tinyllama-1.1b", "models/tinyllama-1.1b.tl"}),
                         [](const auto &info) { return std::string(info.param.preset == std::string("workshop") ? "workshop" : "tinyllama_1_1b"); });

TEST(ModelBuilder, SpecializedIRRoundTrips) {
  auto context = support::makeContext();
  auto module = buildLlamaModule(*context, support::smallConfig("workshop"));
  ASSERT_TRUE(mlir::succeeded(optimizeModule(*module, {0, 2, 16, "bf16"})));
  std::string printed = printModule(*module);
  EXPECT_NE(printed.find("tensor<2x16x128xbf16>"), std::string::npos);
  auto parsed = mlir::parseSourceString<mlir::ModuleOp>(printed, context.get());
  ASSERT_TRUE(parsed);
  EXPECT_EQ(printModule(*parsed), printed);
}

TEST(ModelBuilder, RejectsInconsistentConfigs) {
  LlamaConfig config = *presetConfig("workshop");
  EXPECT_EQ(config.problem(), "");
  config.kvHeads = 3;
  EXPECT_NE(config.problem().find("multiple of kv heads"), std::string::npos);
  config = *presetConfig("workshop");
  config.headDim = 48;
  EXPECT_NE(config.problem().find("must equal hidden"), std::string::npos);
}

} // namespace
