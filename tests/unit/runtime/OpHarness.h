// Running one CPU op on test data: random operands, token ids, results of given shapes
// (shared by the tests of the forward ops and of the backward ops).
#pragma once

#include <gtest/gtest.h>

#include <limits>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "TestUtil.h"
#include "runtime/CpuOps.h"

namespace tlc::test {

using Shape = std::vector<int64_t>;

inline ThreadPool &sharedPool() {
  static ThreadPool pool(3); // more threads than cores: chunking and joins get exercised
  return pool;
}

struct Operand {
  Shape shape;
  std::vector<float> data;
  std::vector<int32_t> ids; // token ids, for embedding and cross_entropy
};

inline Operand randomOperand(Shape shape, uint64_t seed, float low = -1, float high = 1) {
  return {shape, randomFloats(size_t(product(shape)), seed, low, high), {}};
}

inline Operand idsOperand(Shape shape, int32_t vocab, uint64_t seed) {
  Operand operand{shape, {}, {}};
  std::mt19937_64 generator(seed);
  for (int64_t i = 0; i < product(shape); ++i) {
    operand.ids.push_back(int32_t(generator() % uint64_t(vocab)));
    operand.data.push_back(float(operand.ids.back()));
  }
  return operand;
}

// Runs `op` and returns its results, each sized from `resultShapes`.
inline std::vector<std::vector<float>> runMany(const std::string &name,
                                        const std::vector<Operand> &operands,
                                        const std::vector<Shape> &resultShapes,
                                        std::map<std::string, AttrValue> attrs = {},
                                        ThreadPool &pool = sharedPool()) {
  std::vector<int> operandIds(operands.size()), resultIds(resultShapes.size());
  OpRecord op = makeOp(name, operandIds, resultIds, std::move(attrs));
  std::vector<cpu::OpInput> inputs;
  for (const Operand &operand : operands)
    inputs.push_back(
        {operand.shape, operand.data.data(), operand.ids.empty() ? nullptr : operand.ids.data()});
  std::vector<std::vector<float>> results;
  for (const Shape &shape : resultShapes)
    results.emplace_back(size_t(product(shape)), std::numeric_limits<float>::quiet_NaN());
  std::vector<cpu::OpOutput> outputs;
  for (size_t i = 0; i < resultShapes.size(); ++i)
    outputs.push_back({resultShapes[i], results[i].data()});
  cpu::runOp(op, inputs, outputs, pool, "test_kernel");
  return results;
}

inline std::vector<float> run(const std::string &name, const std::vector<Operand> &operands,
                       const Shape &resultShape, std::map<std::string, AttrValue> attrs = {}) {
  return runMany(name, operands, {resultShape}, std::move(attrs))[0];
}

inline std::vector<float> toFloats(const std::vector<double> &values) {
  return std::vector<float>(values.begin(), values.end());
}

} // namespace tlc::test
