// UTF-8 validity, as JSON requires it.
#include <gtest/gtest.h>

#include "runtime/Utf8.h"

namespace tlc {
namespace {

TEST(Utf8, AcceptsWellFormedText) {
  EXPECT_TRUE(isValidUtf8(""));
  EXPECT_TRUE(isValidUtf8("model.layers.0.self_attn.q_proj.weight"));
  EXPECT_TRUE(isValidUtf8("x · Wᵀ, 中文, \xf0\x9f\x98\x80"));  // 2-, 3- and 4-byte forms
}

TEST(Utf8, RefusesMalformedText) {
  EXPECT_FALSE(isValidUtf8("\xff"));              // no such lead byte
  EXPECT_FALSE(isValidUtf8("a\x8f"));             // a lone continuation byte
  EXPECT_FALSE(isValidUtf8("\xe4\xb8"));          // truncated
  EXPECT_FALSE(isValidUtf8("\xc0\x80"));          // overlong NUL
  EXPECT_FALSE(isValidUtf8("\xed\xa0\x80"));      // a surrogate
  EXPECT_FALSE(isValidUtf8("\xf4\x90\x80\x80"));  // beyond U+10FFFF
}

} // namespace
} // namespace tlc
