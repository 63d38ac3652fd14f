// Host tensors: construction, shape printing, error metric.
#include "runtime/Tensor.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <cmath>
#include <limits>

#include "runtime/Checked.h"
#include "runtime/Error.h"
#include "runtime/LargeBuffer.h"

namespace tlc {

int64_t Tensor::elementsOf(const std::vector<int64_t> &shape) {
  std::optional<int64_t> count = checkedElementCount(shape);
  if (!count)
    throw Error(fmt::format("tensor shape {} has a negative dimension or more than 2^40 elements",
                            shapeString(shape)));
  return *count;
}

Tensor::Tensor(std::vector<int64_t> shape_) : shape(std::move(shape_)) {
  resizeLarge(data, size_t(elementsOf(shape)));
}

int64_t Tensor::numElements() const { return elementsOf(shape); }

std::string shapeString(const std::vector<int64_t> &shape) {
  if (shape.empty()) return "scalar";
  return fmt::format("{}", fmt::join(shape, "x"));
}

double relativeError(const std::vector<float> &a, const std::vector<float> &b) {
  if (a.size() != b.size())
    throw Error(fmt::format("relativeError: sizes differ ({} vs {})", a.size(), b.size()));
  double difference = 0, reference = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    double delta = double(a[i]) - double(b[i]);
    difference += delta * delta;
    reference += double(b[i]) * double(b[i]);
  }
  if (std::isnan(difference)) return std::numeric_limits<double>::quiet_NaN();
  if (reference == 0) return difference == 0 ? 0.0 : std::numeric_limits<double>::infinity();
  return std::sqrt(difference / reference);
}

} // namespace tlc
