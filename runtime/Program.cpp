// Program: names of enums, attribute access, validation.
// JSON serialization lives in ProgramJson.cpp.
#include "runtime/Program.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <initializer_list>
#include <limits>
#include <optional>
#include <set>

#include "runtime/Bf16Parts.h"
#include "runtime/Checked.h"
#include "runtime/Error.h"
#include "runtime/MemoryPlanner.h"
#include "runtime/OpKind.h"
#include "runtime/OpRules.h"
#include "runtime/PersistentRun.h"
#include "runtime/Tensor.h"
#include "runtime/Utf8.h"

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

const char *programKindName(ProgramKind kind) {
  switch (kind) {
  case ProgramKind::Forward: return "forward";
  case ProgramKind::TrainStep: return "train_step";
  case ProgramKind::Prefill: return "prefill";
  case ProgramKind::Decode: return "decode";
  }
  return "?";
}

ProgramKind parseProgramKind(const std::string &name) {
  for (ProgramKind kind : {ProgramKind::Forward, ProgramKind::TrainStep, ProgramKind::Prefill, ProgramKind::Decode})
    if (name == programKindName(kind)) return kind;
  throw Error(fmt::format("unknown program kind '{}' (expected forward, train_step, prefill or decode)", name));
}

const char *originRoleName(OriginRole role) {
  switch (role) {
  case OriginRole::Computes: return "computes";
  case OriginRole::Gradient: return "gradient";
  case OriginRole::Recomputes: return "recomputes";
  case OriginRole::Updates: return "updates";
  }
  return "?";
}

const char *matmulPrecisionName(MatmulPrecision precision) {
  switch (precision) {
  case MatmulPrecision::Highest: return "highest";
  case MatmulPrecision::High: return "high";
  case MatmulPrecision::Medium: return "medium";
  }
  return "?";
}

OriginRole parseOriginRole(const std::string &name) {
  for (OriginRole role : {OriginRole::Computes, OriginRole::Gradient, OriginRole::Recomputes, OriginRole::Updates})
    if (name == originRoleName(role)) return role;
  throw Error(fmt::format("unknown origin role '{}' (expected computes, gradient, recomputes or updates)", name));
}

MatmulPrecision parseMatmulPrecision(const std::string &name) {
  for (MatmulPrecision precision : {MatmulPrecision::Highest, MatmulPrecision::High, MatmulPrecision::Medium})
    if (name == matmulPrecisionName(precision)) return precision;
  throw Error(fmt::format("unknown matmul precision '{}' (expected highest, high or medium)", name));
}

const char *storageName(Storage storage) {
  switch (storage) {
  case Storage::Input: return "input";
  case Storage::Output: return "output";
  case Storage::Weight: return "weight";
  case Storage::Activation: return "activation";
  case Storage::View: return "view";
  case Storage::Local: return "local";
  case Storage::State: return "state";
  }
  return "?";
}

Storage parseStorage(const std::string &name) {
  for (Storage storage : {Storage::Input, Storage::Output, Storage::Weight, Storage::Activation,
                          Storage::View, Storage::Local, Storage::State})
    if (name == storageName(storage)) return storage;
  throw Error(fmt::format(
      "unknown storage class '{}' (expected input, output, weight, activation, view, local or state)",
      name));
}

int64_t Value::numElements() const { return Tensor::elementsOf(shape); }

namespace {

// Looks up `key` holding alternative T; the message names the op, the key and the kind.
template <typename T>
const T &typedAttr(const OpRecord &record, const std::string &key, const char *kind) {
  auto found = record.attrs.find(key);
  if (found == record.attrs.end())
    throw Error(fmt::format("op '{}' has no {} attribute '{}'", opKindName(record.kind), kind, key));
  if (const T *typed = std::get_if<T>(&found->second)) return *typed;
  throw Error(fmt::format("op '{}' attribute '{}' is not {} {}", opKindName(record.kind), key,
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

bool isFloat(DType dtype) { return dtype == DType::F32 || dtype == DType::BF16; }

// Checks a Program before any backend touches it. Every message starts with the JSON
// path of the fault in program.json (`kernels[3].ops[1].attrs.eps`), so a hand-edited
// file points at its own line.
class ProgramValidator {
public:
  explicit ProgramValidator(const Program &program) : program_(program) {}

  void run() {
    checkHeader();
    checkParameters();
    for (size_t index = 0; index < program_.values.size(); ++index) checkValueShape(index);
    // View targets before anything follows views, so storageOf never leaves the list.
    for (size_t index = 0; index < program_.values.size(); ++index)
      if (program_.values[index].storage == Storage::View)
        checkId(program_.values[index].viewOf, fmt::format("values[{}].view_of", index));
    for (const Value &value : program_.values) checkValue(value);
    checkSources();
    checkKernels();
    checkUpdates();
    checkDataflow();
    checkInterface();
    checkArena();
  }

private:
  [[noreturn]] void fail(const std::string &path, const std::string &message) const {
    throw Error(fmt::format("invalid program: {}: {}", path, message));
  }

  std::string describe(int id) const {
    return fmt::format("value {} ('{}')", id, program_.values[size_t(id)].name);
  }

  void checkId(int id, const std::string &path) const {
    if (id < 0 || size_t(id) >= program_.values.size())
      fail(path, fmt::format("refers to value {}, but the program has {} values", id,
                             program_.values.size()));
  }

  const Value &base(int id) const { return program_.storageOf(id); }

  // Strings go into program.json, which holds only UTF-8.
  void checkText(const std::string &text, const std::string &path) const {
    if (!isValidUtf8(text)) fail(path, "is not valid UTF-8");
  }

  void checkHeader() const {
    checkText(program_.model, "model");
    checkText(program_.pipeline, "pipeline");
    for (auto [field, value] : {std::pair<const char *, int64_t>{"batch", program_.batch},
                                {"seq_len", program_.seqLen},
                                {"vocab", program_.vocab}})
      if (value < 1) fail(field, fmt::format("{} must be positive", value));
    std::optional<int64_t> tokens = checkedMul(program_.batch, program_.seqLen);
    if (!tokens || *tokens > kMaxTokens)
      fail("batch", fmt::format("batch {} x seq_len {} exceeds the limit of {} tokens",
                                program_.batch, program_.seqLen, kMaxTokens));
    if (program_.vocab > std::numeric_limits<int32_t>::max())
      fail("vocab", fmt::format("{} does not fit the i32 token ids", program_.vocab));
    if (program_.arenaBytes < 0) fail("arena_bytes", "must not be negative");
    if (program_.workspaceBytes < 0) fail("workspace_bytes", "must not be negative");
  }

  // A shape every dimension of which is positive and whose size fits the limits.
  void checkShape(const std::vector<int64_t> &shape, const std::string &path) const {
    std::optional<int64_t> count = checkedElementCount(shape);
    if (!count || *count == 0)
      fail(path, fmt::format("shape {} must have positive dimensions and at most 2^40 elements",
                             shapeString(shape)));
  }

  void checkParameters() {
    std::set<std::string> seen;
    for (size_t i = 0; i < program_.parameters.size(); ++i) {
      const Parameter &parameter = program_.parameters[i];
      std::string path = fmt::format("parameters[{}]", i);
      checkText(parameter.key, path + ".key");
      if (!seen.insert(parameter.key).second)
        fail(path, fmt::format("parameter '{}' is declared twice", parameter.key));
      checkShape(parameter.shape, path + ".shape");
      if (parameter.init != "normal" && parameter.init != "ones" && parameter.init != "zeros")
        fail(path + ".init",
             fmt::format("unknown init '{}' (expected normal, ones or zeros)", parameter.init));
    }
  }

  const Parameter *findParameter(const std::string &key) const {
    for (const Parameter &parameter : program_.parameters)
      if (parameter.key == key) return &parameter;
    return nullptr;
  }

  void checkValueShape(size_t index) const {
    const Value &value = program_.values[index];
    std::string path = fmt::format("values[{}]", index);
    if (value.id != int(index)) fail(path + ".id", fmt::format("is {}, expected {}", value.id, index));
    checkText(value.name, path + ".name");
    checkShape(value.shape, path + ".shape");
  }

  void checkValue(const Value &value) const {
    std::string path = fmt::format("values[{}]", value.id);
    if (value.storage == Storage::Weight)
      checkWeight(value, path);
    else if (!value.weightKeys.empty() || !value.columnScaleKey.empty())
      fail(path + (value.weightKeys.empty() ? ".column_scale_key" : ".weight_keys"),
           fmt::format("{} is not a weight but has weight keys", describe(value.id)));
    if (value.storage == Storage::View) {
      program_.storageOf(value.id); // throws on a cycle
      const Value &target = program_.values[size_t(value.viewOf)];
      if (value.dtype != target.dtype || value.numElements() != target.numElements())
        fail(path, fmt::format("view {} ({} {}) does not match the value it views, {} ({} {})",
                               describe(value.id), dtypeName(value.dtype),
                               shapeString(value.shape), describe(target.id),
                               dtypeName(target.dtype), shapeString(target.shape)));
    }
    bool generation = program_.kind == ProgramKind::Prefill || program_.kind == ProgramKind::Decode;
    if (value.storage == Storage::State && !generation)
      fail(path + ".storage", fmt::format("{} is state, which only a prefill or decode program keeps",
                                          describe(value.id)));
    // A backend keeps state by name: one name, one buffer.
    if (value.storage == Storage::State)
      for (const Value &other : program_.values)
        if (other.storage == Storage::State && other.id < value.id && other.name == value.name)
          fail(path + ".name", fmt::format("state {} has the name of state {}", describe(value.id),
                                           describe(other.id)));
    bool tokenIds = program_.storageOf(value.id).storage == Storage::Input;
    if (tokenIds != (value.dtype == DType::I32))
      fail(path + ".dtype", fmt::format("{} is {}: token ids (storage input) are i32, every "
                                        "other value is f32 or bf16",
                                        describe(value.id), dtypeName(value.dtype)));
  }

  void checkWeight(const Value &value, const std::string &path) const {
    if (value.weightKeys.empty())
      fail(path, fmt::format("weight {} has no weight keys", describe(value.id)));
    // The keys are concatenated along dim 0: their rows add up, the other dims agree.
    int64_t rows = 0;
    for (const std::string &key : value.weightKeys) {
      const Parameter *parameter = findParameter(key);
      if (!parameter)
        fail(path + ".weight_keys", fmt::format("weight {} uses key '{}', which is not a parameter",
                                                describe(value.id), key));
      bool trailingMatch =
          parameter->shape.size() == value.shape.size() &&
          std::equal(value.shape.begin() + 1, value.shape.end(), parameter->shape.begin() + 1);
      if (!trailingMatch)
        fail(path, fmt::format("weight {} has shape {}, which parameter '{}' of shape {} cannot "
                               "be concatenated into",
                               describe(value.id), shapeString(value.shape), key,
                               shapeString(parameter->shape)));
      rows += parameter->shape[0]; // each at most 2^40: no overflow for any sane key count
      if (rows > kMaxTensorElements) break;
    }
    if (rows != value.shape[0])
      fail(path, fmt::format("weight {} has {} rows, but its keys hold {} rows",
                             describe(value.id), value.shape[0], rows));
    if (value.columnScaleKey.empty()) return;
    if (program_.kind == ProgramKind::TrainStep)
      fail(path + ".column_scale_key", fmt::format("weight {} is scaled when loaded, which a training step cannot "
                                                   "keep up to date as its parameters change",
                                                   describe(value.id)));
    const Parameter *scale = findParameter(value.columnScaleKey);
    if (!scale)
      fail(path + ".column_scale_key", fmt::format("weight {} is scaled by '{}', which is not a parameter",
                                                   describe(value.id), value.columnScaleKey));
    if (scale->shape.size() != 1 || scale->shape[0] != value.shape.back())
      fail(path + ".column_scale_key",
           fmt::format("weight {} of shape {} cannot have its columns scaled by '{}' of shape {}", describe(value.id),
                       shapeString(value.shape), value.columnScaleKey, shapeString(scale->shape)));
  }

  // A numeric field of program.json and the range a backend can take it in.
  struct Field {
    const char *name;
    int64_t value, min, max;
  };

  void checkFields(std::initializer_list<Field> fields, const std::string &path) const {
    for (const Field &field : fields)
      if (field.value < field.min || field.value > field.max)
        fail(path + "." + field.name, fmt::format("{} is outside {}..{}", field.value, field.min, field.max));
  }

  // Costs and launch data: one row per numeric field, so a new Kernel field is one line.
  void checkKernelFields(const Kernel &kernel, const std::string &path) const {
    const int64_t any = std::numeric_limits<int64_t>::max(), int32 = std::numeric_limits<int32_t>::max();
    checkFields({{"flops", kernel.flops, 0, any},
                 {"min_bytes", kernel.minBytes, 0, any},
                 {"layer", kernel.layer, -1, int32},
                 // The program's workspace is what a launch gets.
                 {"workspace_bytes", kernel.workspaceBytes, 0, program_.workspaceBytes},
                 // Counters, at most one per block of a grid.
                 {"sync_words", kernel.syncWords, 0, int32}},
                path);
    for (const auto &[backend, shape] : kernel.launch) {
      std::string where = path + ".launch." + backend;
      checkText(backend, where);
      // A grid dimension and a block are at most what CUDA and HIP launch.
      checkFields({{"grid_blocks", shape.gridBlocks, 1, int32},
                   {"block_threads", shape.blockThreads, 1, 1024},
                   {"shared_bytes", shape.sharedBytes, 0, int32}},
                  where);
    }
  }

  // A weight read as bf16 parts (KernelLaunch::bf16PartsInputs): an f32 weight among the
  // kernel's inputs, whole blocks of 32 elements, never one a training step updates (the
  // optimizer writes the weights where the forward reads them, in their own layout).
  void checkBf16Parts(const Kernel &kernel, const std::string &path) const {
    for (const auto &[backend, shape] : kernel.launch)
      for (size_t i = 0; i < shape.bf16PartsInputs.size(); ++i) {
        const int id = shape.bf16PartsInputs[i];
        const std::string where = fmt::format("{}.launch.{}.bf16_parts_inputs[{}]", path, backend, i);
        if (std::find(kernel.inputs.begin(), kernel.inputs.end(), id) == kernel.inputs.end())
          fail(where, fmt::format("value {} is not among the kernel's inputs", id));
        const Value &weight = base(id);
        if (weight.storage != Storage::Weight || weight.dtype != DType::F32 ||
            weight.numElements() % int64_t(kBf16PartsBlock) != 0)
          fail(where, fmt::format("{} is not an f32 weight of whole blocks of {} elements", describe(id), kBf16PartsBlock));
        if (program_.kind == ProgramKind::TrainStep)
          fail(where, fmt::format("{} is updated by the training step, so it cannot be kept as bf16 parts", describe(id)));
      }
  }

  // Provenance is text for readers: valid UTF-8 and origins that name a source op.
  void checkSources() const {
    checkText(program_.sourceFile, "source_file");
    for (size_t i = 0; i < program_.sourceOps.size(); ++i)
      checkText(program_.sourceOps[i].text, fmt::format("source_ops[{}].text", i));
  }

  void checkOrigins(const Kernel &kernel, const std::string &path) const {
    for (size_t i = 0; i < kernel.origins.size(); ++i)
      if (kernel.origins[i].op < 0 || size_t(kernel.origins[i].op) >= program_.sourceOps.size())
        fail(fmt::format("{}.origins[{}]", path, i),
             fmt::format("refers to source op {}, but the program has {}", kernel.origins[i].op,
                         program_.sourceOps.size()));
  }

  void checkKernels() {
    // A Local belongs to exactly one kernel.
    std::vector<int> localOwner(program_.values.size(), -1);
    int64_t totalFlops = 0, totalBytes = 0;
    for (size_t k = 0; k < program_.kernels.size(); ++k) {
      const Kernel &kernel = program_.kernels[k];
      std::string path = fmt::format("kernels[{}]", k);
      checkText(kernel.name, path + ".name");
      checkText(kernel.entry, path + ".entry");
      checkText(kernel.source, path + ".source");
      checkKernelFields(kernel, path);
      checkOrigins(kernel, path);
      std::optional<int64_t> flops = checkedAdd(totalFlops, kernel.flops);
      std::optional<int64_t> bytes = checkedAdd(totalBytes, kernel.minBytes);
      if (!flops || !bytes) fail(path, "the program's total flops or min_bytes overflow");
      totalFlops = *flops;
      totalBytes = *bytes;
      if (kernel.ops.empty()) fail(path + ".ops", "a kernel needs at least one op");
      for (const char *listName : {"inputs", "outputs"}) {
        const std::vector<int> &list = listName[0] == 'i' ? kernel.inputs : kernel.outputs;
        for (size_t i = 0; i < list.size(); ++i) {
          std::string where = fmt::format("{}.{}[{}]", path, listName, i);
          checkId(list[i], where);
          Storage storage = base(list[i]).storage;
          if (storage == Storage::Local)
            fail(where, fmt::format("lists local {}: locals never reach memory", describe(list[i])));
          if (listName[0] == 'o' && (storage == Storage::Weight || storage == Storage::Input))
            fail(where, fmt::format("lists {} {} as an output", storageName(storage),
                                    describe(list[i])));
        }
      }
      checkBf16Parts(kernel, path);
      for (size_t o = 0; o < kernel.ops.size(); ++o)
        checkOp(kernel, fmt::format("{}.ops[{}]", path, o), kernel.ops[o], int(k), localOwner);
      if (!kernel.parts.empty() || !kernel.tasks.empty()) checkPersistent(kernel, path + ".persistent");
      for (size_t i = 0; i < kernel.outputs.size(); ++i) {
        int outputBase = base(kernel.outputs[i]).id;
        bool written = std::any_of(kernel.ops.begin(), kernel.ops.end(), [&](const OpRecord &op) {
          return std::any_of(op.results.begin(), op.results.end(),
                             [&](int id) { return base(id).id == outputBase; });
        });
        if (!written)
          fail(fmt::format("{}.outputs[{}]", path, i),
               fmt::format("no op of the kernel writes {}", describe(kernel.outputs[i])));
      }
      if (!kernel.source.empty()) checkSignature(kernel, path);
    }
  }

  // A persistent kernel: its parts' buffers are its own, each task is a block of a part
  // that waits only for earlier tasks and writes inside the arena, and the workers run
  // every task once, in order.
  void checkPersistent(const Kernel &kernel, const std::string &path) const {
    if (kernel.parts.empty()) fail(path + ".parts", "a persistent kernel needs at least one part");
    if (kernel.partWorkspaceOffsets.size() != kernel.parts.size() || kernel.partSyncOffsets.size() != kernel.parts.size())
      fail(path, "one workspace and one counter offset per part");
    for (size_t p = 0; p < kernel.parts.size(); ++p) {
      const Kernel &part = kernel.parts[p];
      std::string where = fmt::format("{}.parts[{}]", path, p);
      checkText(part.name, where + ".name");
      checkKernelFields(part, where);
      checkOrigins(part, where);
      if (!part.parts.empty()) fail(where, "a part of a persistent kernel is not persistent itself");
      if (!part.source.empty()) checkSignature(part, where);
      for (const std::vector<int> *list : {&part.inputs, &part.outputs})
        for (int id : *list) {
          checkId(id, where);
          if (!isKernelBuffer(kernel, id)) fail(where, fmt::format("{} is not among the kernel's buffers", describe(id)));
        }
      checkBf16Parts(part, where);
      checkFields({{"workspace_offset", kernel.partWorkspaceOffsets[p], 0, kernel.workspaceBytes - part.workspaceBytes},
                   {"sync_offset", kernel.partSyncOffsets[p], 0, kernel.syncWords - part.syncWords}},
                  where);
    }
    if (int64_t needed = persistentSyncLayout(kernel).words; kernel.syncWords < needed)
      fail(path + ".sync_words", fmt::format("{} words leave no room for the parts' counters, a done word a task, "
                                             "three control words and a counter a part ({})",
                                             kernel.syncWords, needed));
    std::vector<int> runs(kernel.tasks.size(), 0);
    for (size_t w = 0; w < kernel.workers.size(); ++w)
      for (size_t i = 0; i < kernel.workers[w].size(); ++i) {
        int task = kernel.workers[w][i];
        std::string where = fmt::format("{}.workers[{}][{}]", path, w, i);
        if (task < 0 || size_t(task) >= kernel.tasks.size()) fail(where, fmt::format("no task {}", task));
        if (i > 0 && task <= kernel.workers[w][i - 1]) fail(where, "a worker runs its tasks in their order");
        ++runs[size_t(task)];
      }
    for (size_t t = 0; t < kernel.tasks.size(); ++t) {
      const Task &task = kernel.tasks[t];
      std::string where = fmt::format("{}.tasks[{}]", path, t);
      if (runs[t] != 1) fail(where, fmt::format("runs on {} workers, not one", runs[t]));
      if (task.part < 0 || size_t(task.part) >= kernel.parts.size()) fail(where + ".part", fmt::format("no part {}", task.part));
      size_t colon = kernel.taskPath.find(':');
      const KernelLaunch *launch = findLaunch(kernel.parts[size_t(task.part)], kernel.taskPath.substr(0, colon),
                                              colon == std::string::npos ? "" : kernel.taskPath.substr(colon + 1));
      if (!launch) fail(where, fmt::format("its part has no launch on '{}'", kernel.taskPath));
      checkFields({{"block", task.block, 0, launch->gridBlocks - 1}}, where);
      for (int wait : task.waits)
        if (wait < 0 || size_t(wait) >= t) fail(where + ".waits", fmt::format("waits for task {}, not an earlier one", wait));
      for (const auto &[begin, end] : task.writes)
        if (begin < 0 || begin >= end || end > program_.arenaBytes)
          fail(where + ".writes", fmt::format("bytes [{}, {}) are not inside the arena of {}", begin, end, program_.arenaBytes));
    }
  }

  // The source's first line says what it was generated for; the Program must agree,
  // or the kernel would read and write its buffers as other dtypes and sizes.
  void checkSignature(const Kernel &kernel, const std::string &path) const {
    std::string_view source = kernel.source, prefix = kKernelSignaturePrefix;
    std::string_view line = source.substr(0, source.find('\n'));
    if (line.substr(0, prefix.size()) != prefix)
      fail(path + ".source", "has no signature line: the source was not written by tlc's code generator");
    std::string recorded(line.substr(prefix.size())), expected = kernelSignature(program_, kernel);
    if (recorded != expected)
      fail(path + ".source", fmt::format("was generated for '{}', but the program gives the kernel '{}': its "
                                         "dtypes, sizes or launch were changed without its source",
                                         recorded, expected));
  }

  // True when `id`'s bytes are one of the buffers the kernel is given.
  bool isKernelBuffer(const Kernel &kernel, int id) const {
    int wanted = base(id).id;
    for (const std::vector<int> *list : {&kernel.inputs, &kernel.outputs})
      for (int listed : *list)
        if (base(listed).id == wanted) return true;
    return false;
  }

  // Result `result` of `op` is the cache it stores into, updated where it lies.
  bool updatesStateInPlace(const OpRecord &op, size_t result) const {
    return op.kind == OpKind::kv_cache_store && result == 0 && !op.operands.empty() &&
           base(op.results[0]).storage == Storage::State && base(op.operands[0]).id == base(op.results[0]).id;
  }

  // Result `result` of `op` is the mean over the ranks of its operand of the same
  // place, written where that operand lies (tl.all_reduce in place).
  bool reducesInPlace(const OpRecord &op, size_t result) const {
    return op.kind == OpKind::all_reduce && result < op.operands.size() && base(op.operands[result]).id == base(op.results[result]).id;
  }

  void checkOp(const Kernel &kernel, const std::string &path, const OpRecord &op, int k,
               std::vector<int> &localOwner) const {
    if (size_t(op.kind) >= allOpKinds().size()) fail(path + ".op", fmt::format("is no op kind ({})", int(op.kind)));
    std::string where = fmt::format("{} ('{}')", path, opKindName(op.kind));
    for (const auto &[key, attr] : op.attrs) {
      checkText(key, path + ".attrs");
      if (const std::string *text = std::get_if<std::string>(&attr)) checkText(*text, path + ".attrs." + key);
    }
    for (const char *listName : {"operands", "results"}) {
      bool operands = listName[0] == 'o';
      const std::vector<int> &list = operands ? op.operands : op.results;
      for (size_t i = 0; i < list.size(); ++i) {
        std::string itemPath = fmt::format("{}.{}[{}]", path, listName, i);
        checkId(list[i], itemPath);
        const Value &value = program_.values[size_t(list[i])];
        const Value &owner = base(list[i]);
        if (owner.storage == Storage::Local) {
          int &ownerKernel = localOwner[size_t(owner.id)];
          if (ownerKernel != -1 && ownerKernel != k)
            fail(itemPath, fmt::format("local {} is used by kernel {} and kernel {}",
                                       describe(owner.id), ownerKernel, k));
          ownerKernel = k;
        } else if (!isKernelBuffer(kernel, list[i])) {
          fail(itemPath, fmt::format("{} is in memory but not among the kernel's inputs or outputs",
                                     describe(list[i])));
        }
        if (!operands && (owner.storage == Storage::Weight || owner.storage == Storage::Input))
          fail(itemPath, fmt::format("writes {} {}", storageName(owner.storage), describe(list[i])));
        if (!operands && owner.storage == Storage::State && !updatesStateInPlace(op, i))
          fail(itemPath, fmt::format("writes state {}: only kv_cache_store updates it, in place of its first "
                                     "operand", describe(list[i])));
        bool tokenIds = operands && isTokenIdOperand(op.kind, i);
        if (tokenIds ? value.dtype != DType::I32 : !isFloat(value.dtype))
          fail(itemPath, fmt::format("{} is {}, but {} expects {}", describe(list[i]),
                                     dtypeName(value.dtype), where,
                                     tokenIds ? "i32 token ids" : "f32 or bf16"));
      }
    }
    std::vector<Shape> operandShapes;
    for (int id : op.operands) operandShapes.push_back(program_.values[size_t(id)].shape);
    std::vector<Shape> expected;
    try {
      expected = inferResultShapes(op, operandShapes);
    } catch (const Error &error) {
      fail(where, error.what());
    }
    if (expected.size() != op.results.size())
      fail(path + ".results", fmt::format("{} computes {} results, the op lists {}", where,
                                          expected.size(), op.results.size()));
    // Token ids go up to vocab - 1: the table they index must have that many rows.
    std::optional<int64_t> indexed = rowsIndexedByIds(op.kind, operandShapes, expected);
    if (indexed && *indexed < program_.vocab)
      fail(path + ".operands[0]", fmt::format("'{}' indexes {} rows with token ids up to vocab - 1 = {}",
                                              opKindName(op.kind), *indexed, program_.vocab - 1));
    for (size_t i = 0; i < expected.size(); ++i) {
      const Value &result = program_.values[size_t(op.results[i])];
      if (result.shape != expected[i])
        fail(fmt::format("{}.results[{}]", path, i),
             fmt::format("{} has shape {}, but {} computes {}", describe(result.id),
                         shapeString(result.shape), where, shapeString(expected[i])));
    }
    // A collective hands each rank's buffer to the library as it is: the mean keeps the dtype.
    if (op.kind == OpKind::all_reduce)
      for (size_t i = 0; i < op.results.size(); ++i)
        if (program_.value(op.results[i]).dtype != program_.value(op.operands[i]).dtype)
          fail(fmt::format("{}.results[{}]", path, i),
               fmt::format("{} is {}, but its operand {} is {}", describe(op.results[i]),
                           dtypeName(program_.value(op.results[i]).dtype), describe(op.operands[i]),
                           dtypeName(program_.value(op.operands[i]).dtype)));
  }

  // A training step updates each parameter at most once, from a gradient of its shape;
  // a forward updates none.
  void checkUpdates() const {
    std::set<std::string> updated;
    for (size_t k = 0; k < program_.kernels.size(); ++k)
      for (size_t o = 0; o < program_.kernels[k].ops.size(); ++o) {
        const OpRecord &op = program_.kernels[k].ops[o];
        if (op.kind != OpKind::adamw) continue;
        std::string path = fmt::format("kernels[{}].ops[{}]", k, o);
        if (program_.kind != ProgramKind::TrainStep)
          fail(path, "a forward program updates no parameter: 'adamw' belongs to a train_step program");
        const std::string &key = op.stringAttr("key");
        const Parameter *parameter = findParameter(key);
        if (!parameter) fail(path + ".attrs.key", fmt::format("'{}' is not a parameter", key));
        if (!updated.insert(key).second) fail(path + ".attrs.key", fmt::format("'{}' is updated twice", key));
        const Value &gradient = program_.value(op.operands[0]);
        if (gradient.shape != parameter->shape)
          fail(path + ".operands[0]", fmt::format("the gradient {} has shape {}, but parameter '{}' has shape {}",
                                                  describe(gradient.id), shapeString(gradient.shape), key,
                                                  shapeString(parameter->shape)));
      }
    if (program_.kind == ProgramKind::TrainStep && updated.empty())
      fail("kind", "a train_step program updates at least one parameter (op 'adamw')");
  }

  // Kernels run in order and ops in order: every value is written once, before any op
  // reads it; inputs come from the caller, weights from the checkpoint.
  void checkDataflow() const {
    std::vector<std::string> writer(program_.values.size());
    for (const Value &value : program_.values)
      if (value.storage == Storage::Input || value.storage == Storage::Weight || value.storage == Storage::State)
        writer[size_t(value.id)] = value.storage == Storage::Input    ? "the caller"
                                   : value.storage == Storage::Weight ? "the checkpoint"
                                                                      : "the run before";
    for (size_t k = 0; k < program_.kernels.size(); ++k)
      for (size_t o = 0; o < program_.kernels[k].ops.size(); ++o) {
        const OpRecord &op = program_.kernels[k].ops[o];
        std::string path = fmt::format("kernels[{}].ops[{}]", k, o);
        for (size_t i = 0; i < op.operands.size(); ++i)
          if (writer[size_t(base(op.operands[i]).id)].empty())
            fail(fmt::format("{}.operands[{}]", path, i),
                 fmt::format("'{}' reads {} before anything writes it", opKindName(op.kind),
                             describe(op.operands[i])));
        for (size_t i = 0; i < op.results.size(); ++i) {
          int written = base(op.results[i]).id;
          if (updatesStateInPlace(op, i)) continue;  // the cache, layer after layer
          if (reducesInPlace(op, i)) continue;        // a gradient, averaged where it lies
          for (int operand : op.operands)
            if (base(operand).id == written)
              fail(fmt::format("{}.results[{}]", path, i),
                   fmt::format("'{}' writes {} in place of its own operand", opKindName(op.kind),
                               describe(op.results[i])));
          if (!writer[size_t(written)].empty())
            fail(fmt::format("{}.results[{}]", path, i),
                 fmt::format("{} is written again (first by {})", describe(op.results[i]),
                             writer[size_t(written)]));
          writer[size_t(written)] = path;
        }
      }
    for (size_t i = 0; i < program_.outputs.size(); ++i)
      if (writer[size_t(base(program_.outputs[i]).id)].empty())
        fail(fmt::format("outputs[{}]", i),
             fmt::format("no kernel writes {}", describe(program_.outputs[i])));
  }

  // The calling convention of Backend::forward: token ids [batch x seq] in, logits
  // [batch x seq x vocab] (and optionally an f32 scalar loss) out.
  void checkInterface() const {
    size_t inputs = program_.kind == ProgramKind::Decode ? 2 : 1;
    if (program_.inputs.size() != inputs)
      fail("inputs", fmt::format("lists {} values; a {} takes {}", program_.inputs.size(),
                                 programKindName(program_.kind),
                                 inputs == 2 ? "two, the token ids and the positions" : "exactly one, the token ids"));
    for (const Value &value : program_.values)
      if (value.storage == Storage::Input && std::find(program_.inputs.begin(), program_.inputs.end(), value.id) ==
                                                 program_.inputs.end())
        fail("inputs", fmt::format("does not list input {}", describe(value.id)));
    if (inputs == 2) {
      checkId(program_.inputs[1], "inputs[1]");
      const Value &positions = program_.value(program_.inputs[1]);
      if (positions.storage != Storage::Input || positions.shape != std::vector<int64_t>{program_.batch})
        fail("inputs[1]", fmt::format("{} must be an input of {} i32 positions, one a sequence",
                                      describe(positions.id), program_.batch));
    }
    checkId(program_.inputs[0], "inputs[0]");
    const Value &ids = program_.value(program_.inputs[0]);
    if (ids.storage != Storage::Input || ids.numElements() != program_.batch * program_.seqLen)
      fail("inputs[0]", fmt::format("{} must be an input of {} i32 token ids (batch {} x seq {})",
                                    describe(ids.id), program_.batch * program_.seqLen,
                                    program_.batch, program_.seqLen));
    if (program_.outputs.empty() || program_.outputs.size() > 2)
      fail("outputs", "a forward returns the logits and optionally the loss");
    for (size_t i = 0; i < program_.outputs.size(); ++i) {
      std::string path = fmt::format("outputs[{}]", i);
      checkId(program_.outputs[i], path);
      if (base(program_.outputs[i]).storage != Storage::Output)
        fail(path, fmt::format("{} does not have storage 'output'", describe(program_.outputs[i])));
    }
    const Value &logits = program_.value(program_.outputs[0]);
    std::optional<int64_t> logitCount =
        checkedMul(program_.batch * program_.seqLen, program_.vocab);
    if (!logitCount || logits.numElements() != *logitCount)
      fail("outputs[0]", fmt::format("logits {} has shape {}, expected batch {} x seq {} x vocab {}",
                                     describe(logits.id), shapeString(logits.shape),
                                     program_.batch, program_.seqLen, program_.vocab));
    if (program_.outputs.size() == 2) {
      const Value &loss = program_.value(program_.outputs[1]);
      if (loss.dtype != DType::F32 || loss.numElements() != 1)
        fail("outputs[1]", fmt::format("loss {} is {} {}, expected an f32 scalar",
                                       describe(loss.id), dtypeName(loss.dtype),
                                       shapeString(loss.shape)));
    }
  }

  // A planned arena (every arena value has an offset; else backends plan it): aligned,
  // inside arena_bytes, and no two values alive at once share bytes.
  void checkArena() const {
    bool planned = std::all_of(program_.values.begin(), program_.values.end(), [](const Value &v) {
      return !livesInArena(v.storage) || v.offset >= 0;
    });
    if (!planned) return;
    for (const Value &value : program_.values) {
      if (!livesInArena(value.storage)) continue;
      std::string path = fmt::format("values[{}].offset", value.id);
      if (value.offset % kArenaAlignment != 0)
        fail(path, fmt::format("{} of {} is not a multiple of {}", value.offset, describe(value.id),
                               kArenaAlignment));
      std::optional<int64_t> end = checkedAdd(value.offset, value.bytes());
      if (!end || *end > program_.arenaBytes)
        fail(path, fmt::format("{} at offset {} ({} bytes) ends past the arena of {} bytes",
                               describe(value.id), value.offset, value.bytes(),
                               program_.arenaBytes));
    }
    checkPlacement(program_);
  }

  const Program &program_;
};

} // namespace

void validateProgram(const Program &program) { ProgramValidator(program).run(); }

std::vector<const Kernel *> computeKernels(const Program &program) {
  std::vector<const Kernel *> kernels;
  for (const Kernel &kernel : program.kernels) {
    if (kernel.parts.empty()) kernels.push_back(&kernel);
    for (const Kernel &part : kernel.parts) kernels.push_back(&part);
  }
  return kernels;
}

std::string kernelSignature(const Program &program, const Kernel &kernel) {
  auto buffers = [&](const std::vector<int> &ids) {
    std::string text;
    for (int id : ids) {
      if (id < 0 || size_t(id) >= program.values.size()) return std::string("?");
      const Value &value = program.values[size_t(id)];
      text += fmt::format(" {}[{}]", dtypeName(value.dtype), fmt::join(value.shape, ","));
    }
    return text;
  };
  std::string launches;
  for (const auto &[where, shape] : kernel.launch)  // a std::map: in key order
    launches += fmt::format(" {} {}x{}+{}", where, shape.gridBlocks, shape.blockThreads, shape.sharedBytes);
  return fmt::format("in{}; out{}; workspace {}; sync {}; launch{}", buffers(kernel.inputs), buffers(kernel.outputs),
                     kernel.workspaceBytes, kernel.syncWords, launches);
}

const KernelLaunch *findLaunch(const Kernel &kernel, const std::string &backend, const std::string &arch) {
  for (const std::string &key : {backend + ":" + arch, backend}) {
    auto found = kernel.launch.find(key);
    if (found != kernel.launch.end()) return &found->second;
  }
  return nullptr;
}

DeviceWaits deviceWaits(const Kernel &kernel, const PartCounterRule &rule) {
  std::vector<double> partCost(kernel.parts.size(), 0);
  std::vector<int> partSize(kernel.parts.size(), 0);
  for (const Task &task : kernel.tasks) {
    ++partSize[size_t(task.part)];
    partCost[size_t(task.part)] += task.cost;
  }
  const std::vector<TaskPlace> places = taskPlaces(kernel);
  DeviceWaits device{std::vector<std::vector<int>>(kernel.tasks.size()), std::vector<int>(kernel.parts.size(), 0)};
  for (size_t w = 0; w < kernel.workers.size(); ++w) {
    std::vector<int> ranBefore(kernel.parts.size(), 0);  // of each part, on this worker
    for (int self : kernel.workers[w]) {
      const Task &task = kernel.tasks[size_t(self)];
      // Of each part: the waits for tasks not already run before on this worker.
      std::vector<int> others(kernel.parts.size(), 0);
      auto ranHere = [&](int wait) {
        return places[size_t(wait)].worker == int(w) && places[size_t(wait)].index < places[size_t(self)].index;
      };
      for (int wait : task.waits)
        if (!ranHere(wait)) ++others[size_t(kernel.tasks[size_t(wait)].part)];
      std::vector<char> whole(kernel.parts.size(), 0);
      for (size_t p = 0; p < kernel.parts.size(); ++p)
        whole[p] = others[p] > rule.waitLanes && others[p] + ranBefore[p] == partSize[p] &&
                   partCost[p] >= rule.minTaskUs * partSize[p];
      std::vector<int> &waits = device.waits[size_t(self)];
      for (int wait : task.waits) {
        const int part = kernel.tasks[size_t(wait)].part;
        if (!whole[size_t(part)]) waits.push_back(wait);
        else if (whole[size_t(part)] == 1) {
          waits.push_back(-(part + 1));
          device.partTasks[size_t(part)] = partSize[size_t(part)];
          whole[size_t(part)] = 2;  // once
        }
      }
      ++ranBefore[size_t(task.part)];
    }
  }
  return device;
}

bool DeviceWaits::countsParts() const {
  return std::any_of(partTasks.begin(), partTasks.end(), [](int tasks) { return tasks > 0; });
}

PersistentSyncLayout persistentSyncLayout(const Kernel &kernel) {
  PersistentSyncLayout layout;
  for (size_t p = 0; p < kernel.parts.size() && p < kernel.partSyncOffsets.size(); ++p)
    layout.done = std::max(layout.done, kernel.partSyncOffsets[p] + kernel.parts[p].syncWords);
  layout.control = layout.done + int64_t(kernel.tasks.size());
  layout.partDone = layout.control + 3;  // control: the last epoch, the workers finished, a timeout's claim
  layout.words = layout.partDone + int64_t(kernel.parts.size());
  return layout;
}

} // namespace tlc
