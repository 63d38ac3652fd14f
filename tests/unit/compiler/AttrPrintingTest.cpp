// Float attributes print in the shortest form that reads back exactly, as MLIR lexes floats.
#include "compiler/AttrPrinting.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <limits>

namespace {

TEST(ShortestFloat, ReadsBackExactlyAndStaysShort) {
  EXPECT_EQ(tl::shortestFloat(1e-6), "1.0e-06");
  EXPECT_EQ(tl::shortestFloat(1e-5), "1.0e-05");
  EXPECT_EQ(tl::shortestFloat(10000.0), "10000.0");
  EXPECT_EQ(tl::shortestFloat(0.125), "0.125");
  EXPECT_EQ(tl::shortestFloat(-2.5), "-2.5");
  EXPECT_EQ(tl::shortestFloat(0.0), "0.0");
  EXPECT_EQ(tl::shortestFloat(0.35355339059327373), "0.35355339059327373");
  for (double value : {1e-6, 1.0 / 3.0, 1e300, 5e-324, std::numeric_limits<double>::max(), 0.1 + 0.2, 500000.0}) {
    std::string text = tl::shortestFloat(value);
    EXPECT_EQ(std::strtod(text.c_str(), nullptr), value) << text;
    // MLIR's lexer needs a '.' before any exponent to read a float.
    size_t dot = text.find('.'), exponent = text.find('e');
    EXPECT_NE(dot, std::string::npos) << text;
    EXPECT_TRUE(exponent == std::string::npos || dot < exponent) << text;
  }
}

} // namespace
