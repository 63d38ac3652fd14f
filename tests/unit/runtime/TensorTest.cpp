// Tensor helpers: bf16 rounding, shape strings, relative error.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>

#include "TestUtil.h"
#include "runtime/Tensor.h"

namespace tlc {
namespace {

float fromBits(uint32_t bits) {
  float value;
  std::memcpy(&value, &bits, 4);
  return value;
}

TEST(Bf16, RoundsToNearestEven) {
  EXPECT_EQ(floatToBf16(1.0f), 0x3f80);
  EXPECT_EQ(floatToBf16(-2.0f), 0xc000);
  EXPECT_EQ(floatToBf16(fromBits(0x3f807fffu)), 0x3f80); // just below half: down
  EXPECT_EQ(floatToBf16(fromBits(0x3f808001u)), 0x3f81); // just above half: up
  EXPECT_EQ(floatToBf16(fromBits(0x3f808000u)), 0x3f80); // tie, even below: down
  EXPECT_EQ(floatToBf16(fromBits(0x3f818000u)), 0x3f82); // tie, odd below: up to even
  EXPECT_EQ(floatToBf16(fromBits(0x7f7fffffu)), 0x7f80); // largest float rounds to inf
}

TEST(Bf16, SpecialValues) {
  EXPECT_EQ(floatToBf16(std::numeric_limits<float>::infinity()), 0x7f80);
  EXPECT_EQ(floatToBf16(-std::numeric_limits<float>::infinity()), 0xff80);
  // A NaN whose payload lives only in the low bits must stay NaN, not become inf.
  uint16_t nan = floatToBf16(fromBits(0x7f800001u));
  EXPECT_TRUE(std::isnan(bf16ToFloat(nan)));
  EXPECT_EQ(floatToBf16(0.0f), 0x0000);
  EXPECT_EQ(floatToBf16(-0.0f), 0x8000);
}

TEST(Bf16, RoundTripErrorIsAtMostHalfAnUlp) {
  for (float value : test::randomFloats(10000, 7, -100.0f, 100.0f)) {
    float rounded = bf16ToFloat(floatToBf16(value));
    EXPECT_LE(std::fabs(rounded - value), std::ldexp(std::fabs(value), -8)) << value;
    EXPECT_EQ(bf16ToFloat(floatToBf16(rounded)), rounded); // idempotent
  }
}

TEST(Tensor, ShapeAndSize) {
  Tensor tensor({2, 3, 4});
  EXPECT_EQ(tensor.numElements(), 24);
  EXPECT_EQ(tensor.data.size(), 24u);
  EXPECT_EQ(shapeString({8, 128, 512}), "8x128x512");
  EXPECT_EQ(shapeString({}), "scalar");
  EXPECT_EQ(Tensor(std::vector<int64_t>{}).numElements(), 1);
}

TEST(Tensor, RelativeError) {
  std::vector<float> reference = test::randomFloats(100, 3);
  EXPECT_EQ(relativeError(reference, reference), 0.0);
  std::vector<float> scaled = reference;
  for (float &value : scaled) value *= 1.01f;
  EXPECT_NEAR(relativeError(scaled, reference), 0.01, 1e-6);
  EXPECT_TRUE(std::isinf(relativeError({1.0f}, {0.0f})));
  EXPECT_THROW(relativeError({1.0f}, {1.0f, 2.0f}), Error);
}

} // namespace
} // namespace tlc
