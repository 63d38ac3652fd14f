// The memory budget: needs are summed without overflow and refused with a message
// before anything is allocated.
#include <gtest/gtest.h>

#include <cstdlib>

#include "TestUtil.h"
#include "runtime/Backend.h"
#include "runtime/MemoryBudget.h"

namespace tlc {
namespace {

using test::errorMessage;

// Sets TLC_MEMORY_LIMIT for one test.
class MemoryLimit {
public:
  explicit MemoryLimit(const char *limit) { setenv("TLC_MEMORY_LIMIT", limit, 1); }
  ~MemoryLimit() { unsetenv("TLC_MEMORY_LIMIT"); }
};

TEST(MemoryBudget, FormatsBytesReadably) {
  EXPECT_EQ(formatBytes(512), "512 bytes");
  EXPECT_EQ(formatBytes(3 << 20), "3.0 MiB");
  EXPECT_EQ(formatBytes(int64_t(412) << 30), "412.0 GiB");
}

TEST(MemoryBudget, NamesEveryNeedAndWhatIsAvailable) {
  MemoryBudget budget("cpu backend");
  budget.need("arena", int64_t(400) << 30).need("weights", int64_t(3) << 30, 4);
  budget.check(int64_t(1) << 50);  // fits: no throw
  EXPECT_EQ(errorMessage([&] { budget.check(int64_t(23) << 30); }),
            "cpu backend: needs 412.0 GiB (arena 400.0 GiB, weights 12.0 GiB), 23.0 GiB available");
}

TEST(MemoryBudget, AnOverflowingNeedIsRefusedNotWrapped) {
  MemoryBudget budget("test");
  budget.need("logits", int64_t(1) << 40, int64_t(1) << 30).need("more", 1);
  EXPECT_CONTAINS(errorMessage([&] { budget.check(int64_t(1) << 62); }),
                  "test: needs more than 2^63 bytes (logits beyond 2^63 bytes, more 1 bytes)");
}

TEST(MemoryBudget, EnvironmentLimitCapsWhatIsAvailable) {
  int64_t machine = availableHostBytes();
  EXPECT_GT(machine, 0);
  {
    MemoryLimit limit("512M");
    EXPECT_EQ(availableHostBytes(), std::min<int64_t>(machine, int64_t(512) << 20));
  }
  MemoryLimit limit("lots");
  EXPECT_CONTAINS(errorMessage([] { availableHostBytes(); }),
                  "TLC_MEMORY_LIMIT='lots' is not a byte count");
}

TEST(MemoryBudget, RandomWeightsAreCheckedBeforeTheyAreDrawn) {
  MemoryLimit limit("1M");
  std::vector<Parameter> parameters = {{"model.embed_tokens.weight", {32000, 2048}, "normal"}};
  Weights weights = Weights::random(parameters, 0);  // drawn when read: nothing allocated yet
  EXPECT_CONTAINS(errorMessage([&] { weights.all(); }),
                  "random weights: needs 250.0 MiB (1 tensors drawn as f32 250.0 MiB), 1.0 MiB available");
}

TEST(MemoryBudget, TheCpuBackendRefusesAProgramTooLargeForMemory) {
  // Logits of batch 64 x seq 4096 x vocab 32000: 31 GiB before anything else.
  test::ProgramBuilder builder(64, 4096, 32000);
  int ids = builder.value("ids", DType::I32, {64, 4096}, Storage::Input);
  int table = builder.weight("embed", {32000, 8}, {{"model.embed_tokens.weight", {32000, 8}}});
  int x = builder.value("x", DType::F32, {64, 4096, 8}, Storage::Activation);
  int logits = builder.value("logits", DType::F32, {64, 4096, 32000}, Storage::Output);
  builder.kernel("tl_embedding", {test::makeOp("embedding", {table, ids}, {x})});
  builder.kernel("tl_logits", {test::makeOp("linear", {x, table}, {logits})});
  Program &program = builder.program();
  Weights weights;
  weights.set("model.embed_tokens.weight", Tensor({32000, 8}));
  MemoryLimit limit("8G");
  std::string message = errorMessage([&] { createCpuBackend(1)->load(program, weights); });
  EXPECT_CONTAINS(message, "cpu backend: needs ");
  EXPECT_CONTAINS(message, "logits 62.5 GiB");
  EXPECT_CONTAINS(message, "available");
}

} // namespace
} // namespace tlc
