// Weights: seeded random init, lookup, and the check against a model's parameters.
#include "runtime/Weights.h"

#include <fmt/format.h>

#include <cmath>
#include <limits>
#include <random>

#include "runtime/Checked.h"
#include "runtime/Error.h"
#include "runtime/MemoryBudget.h"

namespace tlc {
namespace {

uint64_t fnv1a64(const std::string &text) {
  uint64_t hash = 0xcbf29ce484222325ull;
  for (unsigned char byte : text) {
    hash ^= byte;
    hash *= 0x100000001b3ull;
  }
  return hash;
}

// splitmix64's finalizer: nearby (seed, key) pairs get unrelated stream seeds.
uint64_t mix64(uint64_t x) {
  x ^= x >> 30;
  x *= 0xbf58476d1ce4e5b9ull;
  x ^= x >> 27;
  x *= 0x94d049bb133111ebull;
  x ^= x >> 31;
  return x;
}

// Uniform in (0, 1]: never 0, so log() below is finite.
double unitInterval(std::mt19937_64 &generator) {
  return (double(generator() >> 11) + 1.0) * 0x1.0p-53;
}

// Box–Muller by hand: std::normal_distribution differs between standard libraries.
void fillNormal(std::vector<float> &data, double stddev, std::mt19937_64 &generator) {
  const double twoPi = 6.283185307179586476925286766559;
  for (size_t i = 0; i < data.size(); i += 2) {
    double radius = std::sqrt(-2.0 * std::log(unitInterval(generator)));
    double angle = twoPi * unitInterval(generator);
    data[i] = float(stddev * radius * std::cos(angle));
    if (i + 1 < data.size()) data[i + 1] = float(stddev * radius * std::sin(angle));
  }
}

} // namespace

Weights Weights::random(const std::vector<Parameter> &parameters, uint64_t seed) {
  int64_t elements = 0;
  for (const Parameter &parameter : parameters)
    elements = checkedAdd(elements, elementCount(parameter.shape))
                   .value_or(std::numeric_limits<int64_t>::max());
  MemoryBudget("random weights").need("parameters as f32", elements, 4).check();
  Weights weights;
  for (const Parameter &parameter : parameters) {
    Tensor tensor(parameter.shape);
    if (parameter.init == "normal") {
      std::mt19937_64 generator(mix64(fnv1a64(parameter.key) ^ mix64(seed)));
      fillNormal(tensor.data, 0.02, generator);
    } else if (parameter.init == "ones") {
      std::fill(tensor.data.begin(), tensor.data.end(), 1.0f);
    } else if (parameter.init == "zeros") {
      // Tensor starts zeroed.
    } else {
      throw Error(
          fmt::format("parameter '{}' has unknown init '{}' (expected normal, ones or zeros)",
                      parameter.key, parameter.init));
    }
    weights.set(parameter.key, std::move(tensor));
  }
  return weights;
}

const Tensor &Weights::at(const std::string &key) const {
  auto found = tensors_.find(key);
  if (found == tensors_.end()) throw Error(fmt::format("missing weight '{}'", key));
  return found->second;
}

void Weights::checkAgainst(const std::vector<Parameter> &parameters,
                           const std::string &origin) const {
  checkShapes(parameters, origin, [&](const std::string &key) -> const std::vector<int64_t> * {
    auto found = tensors_.find(key);
    return found == tensors_.end() ? nullptr : &found->second.shape;
  });
}

void Weights::checkShapes(
    const std::vector<Parameter> &parameters, const std::string &origin,
    const std::function<const std::vector<int64_t> *(const std::string &key)> &shapeOf) {
  std::vector<std::string> problems;
  for (const Parameter &parameter : parameters) {
    const std::vector<int64_t> *shape = shapeOf(parameter.key);
    if (!shape)
      problems.push_back(fmt::format("missing '{}' (expected shape {})", parameter.key,
                                     shapeString(parameter.shape)));
    else if (*shape != parameter.shape)
      problems.push_back(fmt::format("'{}' has shape {}, expected {}", parameter.key,
                                     shapeString(*shape), shapeString(parameter.shape)));
  }
  if (problems.empty()) return;
  std::string message =
      fmt::format("{}: weights do not match the model's parameters ({} problem{}):", origin,
                  problems.size(), problems.size() == 1 ? "" : "s");
  for (const std::string &problem : problems) message += "\n  " + problem;
  throw Error(message);
}

std::vector<float> Weights::concatenated(const Value &value, const std::string &backend) const {
  std::vector<float> data;
  data.reserve(size_t(value.numElements()));
  for (const std::string &key : value.weightKeys) {
    const Tensor &tensor = at(key);
    data.insert(data.end(), tensor.data.begin(), tensor.data.end());
  }
  if (int64_t(data.size()) != value.numElements())
    throw Error(fmt::format("{} backend: weight '{}' needs {} elements ({}) but its keys hold {}", backend,
                            value.name, value.numElements(), shapeString(value.shape), data.size()));
  return data;
}

} // namespace tlc
