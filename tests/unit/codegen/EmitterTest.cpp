// The emitter's contract: names, dedupe, launch data, errors, JIT failure messages.
#include "compiler/HipEmitter.h"
#include "compiler/Targets.h"
#include "runtime/Error.h"
#include "runtime/Jit.h"
#include "tools/Compile.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <map>

namespace tlc {
namespace {

Program workshop(int level, const char *dtype = "f32") {
  Program program = compileModelFile(std::string(TLC_SOURCE_DIR) + "/models/tinyllama.tl", {level, 2, 16, dtype});
  return program;
}

TEST(HipEmitter, SameNameMeansSameSourceAndEveryKernelHasLaunchData) {
  for (int level = 0; level <= 3; ++level) {
    Program program = workshop(level);
    std::map<std::string, std::string> sourceOf;
    for (const Kernel &kernel : program.kernels) {
      EXPECT_FALSE(kernel.source.empty());
      EXPECT_NE(kernel.source.find("__global__ void __launch_bounds__(TL_THREADS)\n" + kernel.entry + "("), std::string::npos);
      EXPECT_GT(kernel.gridBlocks, 0);
      EXPECT_EQ(kernel.blockThreads, 256);
      EXPECT_GE(kernel.phases, 1);
      EXPECT_LE(kernel.workspaceBytes, program.workspaceBytes);
      auto [it, inserted] = sourceOf.emplace(kernel.entry, kernel.source);
      EXPECT_TRUE(inserted || it->second == kernel.source) << kernel.entry;
    }
  }
}

TEST(HipEmitter, FusedLevelsFoldEpiloguesAndUseBarriers) {
  Program o2 = workshop(2);
  bool folded = false;
  for (const Kernel &kernel : o2.kernels) folded |= kernel.source.find("+ epilogue: add") != std::string::npos;
  EXPECT_TRUE(folded) << "the residual add of O2 should be in the GEMM's store";
  Program o3 = workshop(3);
  for (const Kernel &kernel : o3.kernels)
    if (kernel.name.rfind("tl_block_", 0) == 0) EXPECT_GT(kernel.phases, 3) << kernel.name;
}

TEST(HipEmitter, ProgramJsonKeepsTheSources) {
  Program program = workshop(1, "bf16");
  Program back = programFromJson(programToJson(program));
  ASSERT_EQ(back.kernels.size(), program.kernels.size());
  for (size_t k = 0; k < program.kernels.size(); ++k) {
    EXPECT_EQ(back.kernels[k].entry, program.kernels[k].entry);
    EXPECT_EQ(back.kernels[k].source, program.kernels[k].source);
    EXPECT_EQ(back.kernels[k].gridBlocks, program.kernels[k].gridBlocks);
    EXPECT_EQ(back.kernels[k].phases, program.kernels[k].phases);
  }
  EXPECT_EQ(back.workspaceBytes, program.workspaceBytes);
}

TEST(HipEmitter, UnknownOpIsAClearError) {
  Program program = workshop(0);
  program.kernels[1].ops[0].op = "frobnicate";
  try {
    emitHipKernels(program);
    FAIL() << "expected an error";
  } catch (const Error &error) {
    EXPECT_NE(std::string(error.what()).find("no GPU code for op 'frobnicate'"), std::string::npos) << error.what();
  }
}

TEST(Targets, DescribeTheFourChips) {
  EXPECT_EQ(findTarget("gfx90a").warpSize, 64);
  EXPECT_EQ(findTarget("gfx942").warpSize, 64);
  EXPECT_EQ(findTarget("sm_80").warpSize, 32);
  EXPECT_EQ(findTarget("sm_90").warpSize, 32);
  EXPECT_THROW(findTarget("gfx1100"), Error);
}

TEST(Jit, FailureNamesTheKernelAndShowsTheLogAndTheSource) {
  auto nvrtc = createNvrtcCompiler();
  char directory[] = "/tmp/tlc-jit-test-XXXXXX";
  ASSERT_NE(mkdtemp(directory), nullptr);
  JitOptions options;
  options.arch = "sm_90";
  options.cacheDir = directory;
  options.progress = false;
  try {
    jitCompileAll(*nvrtc, {{"tl_broken", "extern \"C\" __global__ void tl_broken() { undeclared(); }"}}, options);
    FAIL() << "expected a JIT error";
  } catch (const Error &error) {
    std::string message = error.what();
    EXPECT_NE(message.find("tl_broken"), std::string::npos) << message;
    EXPECT_NE(message.find("undeclared"), std::string::npos) << message;
    EXPECT_NE(message.find(std::string(directory) + "/failed/tl_broken.hip"), std::string::npos) << message;
  }
}

TEST(Jit, CacheHitsTheSecondTime) {
  auto nvrtc = createNvrtcCompiler();
  char directory[] = "/tmp/tlc-jit-cache-XXXXXX";
  ASSERT_NE(mkdtemp(directory), nullptr);
  JitOptions options;
  options.arch = "sm_90";
  options.cacheDir = directory;
  options.progress = false;
  std::vector<JitSource> sources = {{"tl_a", "extern \"C\" __global__ void tl_a(float *x) { x[0] = 1; }"},
                                    {"tl_a_again", "extern \"C\" __global__ void tl_a(float *x) { x[0] = 1; }"}};
  JitStats first, second;
  auto a = jitCompileAll(*nvrtc, sources, options, &first);
  auto b = jitCompileAll(*nvrtc, sources, options, &second);
  EXPECT_EQ(first.compiled, 1);  // identical sources compile once
  EXPECT_EQ(second.cached, 1);
  EXPECT_EQ(second.compiled, 0);
  EXPECT_EQ(a, b);
}

} // namespace
} // namespace tlc
