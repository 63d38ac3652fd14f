// Program: names of enums, attribute access, validation.
// JSON serialization lives in ProgramJson.cpp.
#include "runtime/Program.h"

#include <fmt/format.h>

#include <set>

#include "runtime/Error.h"
#include "runtime/Tensor.h"

namespace tlc {

const char *dtypeName(DType dtype) {
  switch (dtype) {
  case DType::F32: return "f32";
  case DType::BF16: return "bf16";
  case DType::I32: return "i32";
  }
  return "?";
}

DType parseDType(const std::string &name) {
  if (name == "f32") return DType::F32;
  if (name == "bf16") return DType::BF16;
  if (name == "i32") return DType::I32;
  throw Error(fmt::format("unknown dtype '{}' (expected f32, bf16 or i32)", name));
}

int64_t dtypeBytes(DType dtype) {
  switch (dtype) {
  case DType::F32: return 4;
  case DType::BF16: return 2;
  case DType::I32: return 4;
  }
  return 0;
}

const char *storageName(Storage storage) {
  switch (storage) {
  case Storage::Input: return "input";
  case Storage::Output: return "output";
  case Storage::Weight: return "weight";
  case Storage::Activation: return "activation";
  case Storage::View: return "view";
  case Storage::Local: return "local";
  }
  return "?";
}

Storage parseStorage(const std::string &name) {
  for (Storage storage : {Storage::Input, Storage::Output, Storage::Weight, Storage::Activation,
                          Storage::View, Storage::Local})
    if (name == storageName(storage)) return storage;
  throw Error(fmt::format(
      "unknown storage class '{}' (expected input, output, weight, activation, view or local)",
      name));
}

int64_t Value::numElements() const {
  int64_t count = 1;
  for (int64_t dim : shape) count *= dim;
  return count;
}

namespace {

// Looks up `key` holding alternative T; the message names the op, the key and the kind.
template <typename T>
const T &typedAttr(const OpRecord &record, const std::string &key, const char *kind) {
  auto found = record.attrs.find(key);
  if (found == record.attrs.end())
    throw Error(fmt::format("op '{}' has no {} attribute '{}'", record.op, kind, key));
  if (const T *typed = std::get_if<T>(&found->second)) return *typed;
  throw Error(fmt::format("op '{}' attribute '{}' is not {} {}", record.op, key,
                          kind[0] == 'i' ? "an" : "a", kind));
}

} // namespace

int64_t OpRecord::intAttr(const std::string &key) const {
  return typedAttr<int64_t>(*this, key, "int");
}

double OpRecord::floatAttr(const std::string &key) const {
  // An integer literal is accepted where a float is expected (theta = 10000).
  auto found = attrs.find(key);
  if (found != attrs.end())
    if (const int64_t *integer = std::get_if<int64_t>(&found->second)) return double(*integer);
  return typedAttr<double>(*this, key, "float");
}

const std::string &OpRecord::stringAttr(const std::string &key) const {
  return typedAttr<std::string>(*this, key, "string");
}

const std::vector<int64_t> &OpRecord::intsAttr(const std::string &key) const {
  return typedAttr<std::vector<int64_t>>(*this, key, "int array");
}

const Value &Program::storageOf(int id) const {
  // Bounded walk: a cycle of views is reported instead of looping forever.
  auto lookup = [&](int index) -> const Value & {
    if (index < 0 || size_t(index) >= values.size())
      throw Error(fmt::format("value id {} is out of range (the program has {} values)", index,
                              values.size()));
    return values[size_t(index)];
  };
  const Value *current = &lookup(id);
  for (size_t steps = 0; current->storage == Storage::View; ++steps) {
    if (steps > values.size())
      throw Error(fmt::format("value '{}' is part of a cycle of views", values[size_t(id)].name));
    current = &lookup(current->viewOf);
  }
  return *current;
}

namespace {

bool isPlanned(Storage storage) {
  return storage == Storage::Input || storage == Storage::Output || storage == Storage::Activation;
}

class ProgramValidator {
public:
  explicit ProgramValidator(const Program &program) : program_(program) {}

  void run() {
    if (program_.batch < 1 || program_.seqLen < 1 || program_.vocab < 1)
      fail(fmt::format("batch ({}), seq_len ({}) and vocab ({}) must be positive", program_.batch,
                       program_.seqLen, program_.vocab));
    checkParameters();
    // View targets first, so following views below never leaves the value list.
    for (size_t index = 0; index < program_.values.size(); ++index)
      if (program_.values[index].storage == Storage::View)
        checkId(program_.values[index].viewOf, describe(int(index)));
    for (const Value &value : program_.values) checkValue(value);
    checkKernels();
    checkInterface();
  }

private:
  [[noreturn]] void fail(const std::string &message) const {
    throw Error(fmt::format("invalid program: {}", message));
  }

  std::string describe(int id) const {
    return fmt::format("value {} ('{}')", id, program_.values[size_t(id)].name);
  }

  void checkId(int id, const std::string &where) const {
    if (id < 0 || size_t(id) >= program_.values.size())
      fail(fmt::format("{} refers to value {}, but the program has {} values", where, id,
                       program_.values.size()));
  }

  void checkParameters() {
    std::set<std::string> seen;
    for (const Parameter &parameter : program_.parameters) {
      if (!seen.insert(parameter.key).second)
        fail(fmt::format("parameter '{}' is declared twice", parameter.key));
      for (int64_t dim : parameter.shape)
        if (dim < 1)
          fail(fmt::format("parameter '{}' has shape {} with a non-positive dimension",
                           parameter.key, shapeString(parameter.shape)));
    }
  }

  const Parameter *findParameter(const std::string &key) const {
    for (const Parameter &parameter : program_.parameters)
      if (parameter.key == key) return &parameter;
    return nullptr;
  }

  void checkValue(const Value &value) const {
    size_t index = size_t(&value - program_.values.data());
    if (value.id != int(index))
      fail(fmt::format("value at index {} ('{}') has id {}", index, value.name, value.id));
    for (int64_t dim : value.shape)
      if (dim < 1)
        fail(fmt::format("{} has shape {} with a non-positive dimension", describe(value.id),
                         shapeString(value.shape)));
    if (value.storage == Storage::Weight)
      checkWeight(value);
    else if (!value.weightKeys.empty())
      fail(fmt::format("{} is not a weight but has weight keys", describe(value.id)));
    if (value.storage == Storage::View) checkView(value);
    if (value.offset >= 0 && isPlanned(value.storage) &&
        value.offset + value.bytes() > program_.arenaBytes)
      fail(fmt::format("{} at offset {} ({} bytes) ends past the arena of {} bytes",
                       describe(value.id), value.offset, value.bytes(), program_.arenaBytes));
  }

  void checkWeight(const Value &value) const {
    if (value.weightKeys.empty())
      fail(fmt::format("weight {} has no weight keys", describe(value.id)));
    if (value.shape.empty()) fail(fmt::format("weight {} has no shape", describe(value.id)));
    // The keys are concatenated along dim 0: their rows add up, the other dims agree.
    int64_t rows = 0;
    for (const std::string &key : value.weightKeys) {
      const Parameter *parameter = findParameter(key);
      if (!parameter)
        fail(fmt::format("weight {} uses key '{}', which is not a parameter", describe(value.id),
                         key));
      bool trailingMatch =
          parameter->shape.size() == value.shape.size() &&
          std::equal(value.shape.begin() + 1, value.shape.end(), parameter->shape.begin() + 1);
      if (!trailingMatch)
        fail(fmt::format("weight {} has shape {}, which parameter '{}' of shape {} cannot "
                         "be concatenated into",
                         describe(value.id), shapeString(value.shape), key,
                         shapeString(parameter->shape)));
      rows += parameter->shape[0];
    }
    if (rows != value.shape[0])
      fail(fmt::format("weight {} has {} rows, but its keys hold {} rows", describe(value.id),
                       value.shape[0], rows));
  }

  void checkView(const Value &value) const {
    program_.storageOf(value.id); // throws on a cycle
    checkViewSize(value, program_.values[size_t(value.viewOf)]);
  }

  void checkViewSize(const Value &view, const Value &target) const {
    if (view.dtype != target.dtype || view.numElements() != target.numElements())
      fail(fmt::format("view {} ({} {}) does not match the value it views, {} ({} {})",
                       describe(view.id), dtypeName(view.dtype), shapeString(view.shape),
                       describe(target.id), dtypeName(target.dtype), shapeString(target.shape)));
  }

  void checkKernels() const {
    // A Local belongs to exactly one kernel.
    std::vector<int> localOwner(program_.values.size(), -1);
    for (size_t k = 0; k < program_.kernels.size(); ++k) {
      const Kernel &kernel = program_.kernels[k];
      std::string where = fmt::format("kernel {} ('{}')", k, kernel.name);
      if (kernel.ops.empty()) fail(fmt::format("{} has no ops", where));
      for (const auto *list : {&kernel.inputs, &kernel.outputs})
        for (int id : *list) {
          checkId(id, where);
          if (program_.storageOf(id).storage == Storage::Local)
            fail(fmt::format("{} lists local {} as an input or output", where, describe(id)));
        }
      for (size_t o = 0; o < kernel.ops.size(); ++o) {
        const OpRecord &op = kernel.ops[o];
        std::string opWhere = fmt::format("{} op {} ('{}')", where, o, op.op);
        if (op.op.empty()) fail(fmt::format("{} has an empty op name", opWhere));
        if (op.results.empty()) fail(fmt::format("{} has no results", opWhere));
        for (const auto *list : {&op.operands, &op.results})
          for (int id : *list) {
            checkId(id, opWhere);
            int baseId = program_.storageOf(id).id;
            if (program_.values[size_t(baseId)].storage != Storage::Local) continue;
            if (localOwner[size_t(baseId)] != -1 && localOwner[size_t(baseId)] != int(k))
              fail(fmt::format("local {} is used by kernel {} and kernel {}", describe(baseId),
                               localOwner[size_t(baseId)], k));
            localOwner[size_t(baseId)] = int(k);
          }
        for (int id : op.results)
          if (program_.storageOf(id).storage == Storage::Weight)
            fail(fmt::format("{} writes weight {}", opWhere, describe(id)));
      }
    }
  }

  void checkInterface() const {
    for (int id : program_.inputs) {
      checkId(id, "the program's inputs");
      if (program_.storageOf(id).storage != Storage::Input)
        fail(fmt::format("program input {} does not have storage 'input'", describe(id)));
    }
    for (int id : program_.outputs) {
      checkId(id, "the program's outputs");
      if (program_.storageOf(id).storage != Storage::Output)
        fail(fmt::format("program output {} does not have storage 'output'", describe(id)));
    }
  }

  const Program &program_;
};

} // namespace

void validateProgram(const Program &program) { ProgramValidator(program).run(); }

const KernelLaunch *findLaunch(const Kernel &kernel, const std::string &backend, const std::string &arch) {
  for (const std::string &key : {backend + ":" + arch, backend}) {
    auto found = kernel.launch.find(key);
    if (found != kernel.launch.end()) return &found->second;
  }
  return nullptr;
}

} // namespace tlc
