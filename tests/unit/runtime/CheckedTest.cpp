// Checked arithmetic and element counts: sizes from input never wrap.
#include <gtest/gtest.h>

#include <limits>

#include "TestUtil.h"
#include "runtime/Checked.h"
#include "runtime/Tensor.h"

namespace tlc {
namespace {

constexpr int64_t kMax = std::numeric_limits<int64_t>::max();

TEST(Checked, MultiplyAndAddReportOverflow) {
  EXPECT_EQ(checkedMul(1 << 20, 1 << 20), int64_t(1) << 40);
  EXPECT_EQ(checkedMul(-3, 4), -12);
  EXPECT_FALSE(checkedMul(int64_t(1) << 32, int64_t(1) << 31));
  EXPECT_FALSE(checkedMul(kMax, -2));
  EXPECT_EQ(checkedAdd(kMax - 1, 1), kMax);
  EXPECT_FALSE(checkedAdd(kMax, 1));
  EXPECT_FALSE(checkedAdd(std::numeric_limits<int64_t>::min(), -1));
}

TEST(Checked, ElementCountRefusesNegativeOverflowingAndHugeShapes) {
  EXPECT_EQ(checkedElementCount(std::vector<int64_t>{}), 1);
  EXPECT_EQ(checkedElementCount(std::vector<int64_t>{8, 0, 3}), 0);
  EXPECT_EQ(checkedElementCount(std::vector<int64_t>{1 << 20, 1 << 20}), kMaxTensorElements);
  EXPECT_FALSE(checkedElementCount(std::vector<int64_t>{1 << 20, (1 << 20) + 1}));
  EXPECT_FALSE(checkedElementCount(std::vector<int64_t>{4, -1}));
  // A product that wraps to a small positive number in int64 arithmetic.
  EXPECT_FALSE(checkedElementCount(std::vector<int64_t>{int64_t(1) << 33, int64_t(1) << 33, 4}));
}

TEST(Checked, TensorsAndValuesThrowInsteadOfWrapping) {
  EXPECT_CONTAINS(test::errorMessage([] { Tensor::elementsOf({int64_t(1) << 62, 4}); }),
                  "tensor shape 4611686018427387904x4 has a negative dimension or more than 2^40");
  Value value;
  value.shape = {int64_t(1) << 31, int64_t(1) << 31, 8};
  EXPECT_CONTAINS(test::errorMessage([&] { value.bytes(); }), "more than 2^40 elements");
  EXPECT_THROW(Tensor({3, -2}), Error);
}

} // namespace
} // namespace tlc
