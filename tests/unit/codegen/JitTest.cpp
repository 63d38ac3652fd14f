// The JIT: failures name the kernel and keep its source; the disk cache hits.
#include "runtime/Error.h"
#include "runtime/Jit.h"

#include <gtest/gtest.h>

#include <cstdlib>

namespace tlc {
namespace {

// sm_90, no progress line, a fresh cache in `directory` (a mkdtemp template).
JitOptions freshCache(char *directory) {
  EXPECT_NE(mkdtemp(directory), nullptr);
  JitOptions options;
  options.arch = "sm_90";
  options.cacheDir = directory;
  options.progress = false;
  return options;
}

TEST(Jit, FailureNamesTheKernelAndShowsTheLogAndTheSource) {
  auto nvrtc = createNvrtcCompiler();
  char directory[] = "/tmp/tlc-jit-test-XXXXXX";
  JitOptions options = freshCache(directory);
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
  JitOptions options = freshCache(directory);
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
