// Helpers shared by the runtime tests: random data, hand-built Programs, temp files.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "runtime/Error.h"
#include "runtime/OpKind.h"
#include "runtime/Program.h"

namespace tlc::test {

// Uniform values in [low, high), seeded, never all zeros.
inline std::vector<float> randomFloats(size_t count, uint64_t seed, float low = -1.0f,
                                       float high = 1.0f) {
  std::mt19937_64 generator(seed);
  std::uniform_real_distribution<float> distribution(low, high);
  std::vector<float> values(count);
  for (float &value : values) value = distribution(generator);
  return values;
}

inline int64_t product(const std::vector<int64_t> &shape) {
  int64_t count = 1;
  for (int64_t dim : shape) count *= dim;
  return count;
}

// EXPECT_CONTAINS(text, part): text holds part as a substring (no gmock needed).
inline ::testing::AssertionResult assertContains(const char *textExpression, const char *,
                                                 const std::string &text, const std::string &part) {
  if (text.find(part) != std::string::npos) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure()
         << textExpression << " is\n  " << text << "\nwhich does not contain\n  " << part;
}
#define EXPECT_CONTAINS(text, part) EXPECT_PRED_FORMAT2(::tlc::test::assertContains, text, part)

// Runs `body` and returns the tlc::Error message it throws; fails the test otherwise.
template <typename F> std::string errorMessage(F body) {
  try {
    body();
  } catch (const Error &error) {
    return error.what();
  } catch (const std::exception &other) {
    ADD_FAILURE() << "expected tlc::Error, got another exception: " << other.what();
    return {};
  }
  ADD_FAILURE() << "expected tlc::Error, nothing was thrown";
  return {};
}

// Builds Programs value by value; kernels' input/output lists are derived from their ops.
class ProgramBuilder {
public:
  ProgramBuilder(int64_t batch, int64_t seqLen, int64_t vocab, DType dtype = DType::F32) {
    program_.model = "test";
    program_.pipeline = "none";
    program_.batch = batch;
    program_.seqLen = seqLen;
    program_.vocab = vocab;
    program_.dtype = dtype;
  }

  int value(const std::string &name, DType dtype, std::vector<int64_t> shape, Storage storage) {
    Value value;
    value.id = int(program_.values.size());
    value.name = name;
    value.dtype = dtype;
    value.shape = std::move(shape);
    value.storage = storage;
    program_.values.push_back(value);
    if (storage == Storage::Input) program_.inputs.push_back(value.id);
    if (storage == Storage::Output) program_.outputs.push_back(value.id);
    return value.id;
  }

  int view(const std::string &name, int of, std::vector<int64_t> shape) {
    int id = value(name, program_.values[size_t(of)].dtype, std::move(shape), Storage::View);
    program_.values[size_t(id)].viewOf = of;
    return id;
  }

  // A weight made of `keys` concatenated along dim 0; declares their parameters too.
  int weight(const std::string &name, std::vector<int64_t> shape,
             const std::vector<std::pair<std::string, std::vector<int64_t>>> &keys,
             const std::string &init = "normal") {
    int id = value(name, program_.dtype, std::move(shape), Storage::Weight);
    for (const auto &[key, keyShape] : keys) {
      program_.values[size_t(id)].weightKeys.push_back(key);
      program_.parameters.push_back({key, keyShape, init});
    }
    return id;
  }

  void kernel(const std::string &name, std::vector<OpRecord> ops) {
    Kernel kernel;
    kernel.name = name;
    kernel.ops = std::move(ops);
    for (const OpRecord &op : kernel.ops) {
      for (int id : op.operands) addIfMemory(kernel.inputs, id);
      for (int id : op.results) addIfMemory(kernel.outputs, id);
    }
    program_.kernels.push_back(std::move(kernel));
  }

  Program &program() { return program_; }

private:
  void addIfMemory(std::vector<int> &list, int id) {
    if (program_.storageOf(id).storage == Storage::Local) return;
    if (std::find(list.begin(), list.end(), id) == list.end()) list.push_back(id);
  }

  Program program_;
};

inline OpRecord makeOp(std::string name, std::vector<int> operands, std::vector<int> results,
                       std::map<std::string, AttrValue> attrs = {}) {
  OpRecord op;
  op.kind = parseOpKind(name);
  op.operands = std::move(operands);
  op.results = std::move(results);
  op.attrs = std::move(attrs);
  return op;
}

// The smallest training step: logits = embed(ids) · embedᵀ (a tied table), its
// cross-entropy, the table's gradient through the output projection only, one AdamW
// update. Unplanned; backends plan it.
inline Program trainingStep(int64_t batch = 2, int64_t seq = 4, int64_t vocab = 6, int64_t hidden = 3) {
  ProgramBuilder builder(batch, seq, vocab);
  int ids = builder.value("ids", DType::I32, {batch, seq}, Storage::Input);
  int table = builder.weight("embed", {vocab, hidden}, {{"model.embed_tokens.weight", {vocab, hidden}}});
  int x = builder.value("x", DType::F32, {batch, seq, hidden}, Storage::Activation);
  int logits = builder.value("logits", DType::F32, {batch, seq, vocab}, Storage::Output);
  int loss = builder.value("loss", DType::F32, {}, Storage::Output);
  int logitsGrad = builder.value("logits_grad", DType::F32, {batch, seq, vocab}, Storage::Activation);
  int tableGrad = builder.value("table_grad", DType::F32, {vocab, hidden}, Storage::Activation);
  builder.kernel("tl_embedding", {makeOp("embedding", {table, ids}, {x})});
  builder.kernel("tl_linear", {makeOp("linear", {x, table}, {logits})});
  builder.kernel("tl_loss", {makeOp("cross_entropy", {logits, ids}, {loss})});
  builder.kernel("tl_loss_grad", {makeOp("cross_entropy_grad", {logits, ids}, {logitsGrad})});
  builder.kernel("tl_weight_grad", {makeOp("linear_grad_weight", {logitsGrad, x}, {tableGrad})});
  builder.kernel("tl_adamw", {makeOp("adamw", {tableGrad}, {},
                                     {{"key", std::string("model.embed_tokens.weight")}, {"lr", 0.1},
                                      {"beta1", 0.9}, {"beta2", 0.999}, {"eps", 1e-8}, {"weight_decay", 0.0}})});
  builder.program().kind = ProgramKind::TrainStep;
  return builder.program();
}

// A fresh directory under the system temp dir, removed with the object.
class TempDir {
public:
  TempDir() {
    std::random_device entropy;
    path_ = std::filesystem::temp_directory_path() /
            ("tlc_runtime_test_" + std::to_string(entropy()) + std::to_string(entropy()));
    std::filesystem::create_directories(path_);
  }
  ~TempDir() {
    std::error_code ignored;
    std::filesystem::remove_all(path_, ignored);
  }
  std::string file(const std::string &name) const { return (path_ / name).string(); }

private:
  std::filesystem::path path_;
};

} // namespace tlc::test
