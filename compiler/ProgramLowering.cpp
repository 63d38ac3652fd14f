#include "compiler/ProgramLowering.h"

#include "compiler/CostModel.h"
#include "compiler/ModelIO.h"
#include "compiler/TlDialect.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/AsmState.h"
#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/raw_ostream.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

namespace tlc {
namespace {

DType toDType(mlir::Type type) {
  if (type.isF32()) return DType::F32;
  if (type.isBF16()) return DType::BF16;
  return DType::I32;
}

std::vector<int64_t> shapeOf(mlir::Value value) {
  auto shape = llvm::cast<mlir::RankedTensorType>(value.getType()).getShape();
  return {shape.begin(), shape.end()};
}

// "model.layers.3.mlp.up_proj.weight" -> 3; -1 for weights outside the blocks.
int layerOfKey(llvm::StringRef key) {
  if (!key.consume_front("model.layers.")) return -1;
  int layer = -1;
  return key.split('.').first.getAsInteger(10, layer) ? -1 : layer;
}

AttrValue toAttrValue(mlir::Attribute attr) {
  if (auto b = llvm::dyn_cast<mlir::BoolAttr>(attr)) return int64_t(b.getValue());
  if (auto i = llvm::dyn_cast<mlir::IntegerAttr>(attr)) return i.getInt();
  if (auto f = llvm::dyn_cast<mlir::FloatAttr>(attr)) return f.getValueAsDouble();
  if (auto s = llvm::dyn_cast<mlir::StringAttr>(attr)) return s.str();
  if (auto a = llvm::dyn_cast<mlir::DenseI64ArrayAttr>(attr)) return std::vector<int64_t>(a.asArrayRef());
  std::string text;
  llvm::raw_string_ostream(text) << attr;
  return text;
}

// Names a kernel by what it computes, so profilers show meaningful rows:
// tl_linear_bf16_1024x1536x512 is a [1024, 512] x [512, 1536] projection.
std::string kernelName(mlir::Operation *op, DType dtype) {
  auto shape = [](mlir::Value v) { return shapeOf(v); };
  std::vector<int64_t> dims;
  if (auto linear = llvm::dyn_cast<tl::LinearOp>(op)) {
    auto in = shape(linear.getInput());
    int64_t rows = 1;
    for (size_t i = 0; i + 1 < in.size(); ++i) rows *= in[i];
    dims = {rows, shape(linear.getWeight())[0], in.back()};
  } else if (auto matmul = llvm::dyn_cast<tl::BatchMatmulOp>(op)) {
    auto out = shape(matmul.getResult());
    int64_t batch = 1;
    for (size_t i = 0; i + 2 < out.size(); ++i) batch *= out[i];
    dims = {batch, out[out.size() - 2], out.back(), shape(matmul.getLhs()).back()};
  } else if (op->getNumResults() > 0) {
    dims = shape(op->getResult(0));
  }
  std::string name = fmt::format("tl_{}_{}", op->getName().stripDialect().str(), dtypeName(dtype));
  if (!dims.empty()) name += fmt::format("_{}", fmt::join(dims, "x"));
  return name;
}

class Lowering {
public:
  Lowering(mlir::func::FuncOp forward, Program &program) : forward(forward), program(program), asmState(forward) {}

  mlir::LogicalResult run() {
    for (mlir::BlockArgument arg : forward.getArguments()) {
      int id = addValue(arg, Storage::Input);
      program.inputs.push_back(id);
    }
    for (mlir::Operation &op : forward.getBody().front()) {
      if (auto ret = llvm::dyn_cast<mlir::func::ReturnOp>(op)) {
        for (mlir::Value out : ret.getOperands()) {
          Value &value = program.values[ids.lookup(out)];
          if (value.storage != Storage::Activation)
            return op.emitError("a returned value must be computed by a kernel");
          value.storage = Storage::Output;
          program.outputs.push_back(value.id);
        }
        continue;
      }
      if (mlir::failed(lowerOp(&op))) return mlir::failure();
    }
    return mlir::success();
  }

private:
  mlir::LogicalResult lowerOp(mlir::Operation *op) {
    if (auto weight = llvm::dyn_cast<tl::WeightOp>(op)) {
      int id = addValue(weight.getResult(), Storage::Weight);
      program.values[id].weightKeys = {weight.getKey().str()};
      addParameter(weight);
      layers[weight.getResult()] = layerOfKey(weight.getKey());
      return mlir::success();
    }
    if (llvm::isa<tl::SplitHeadsOp, tl::MergeHeadsOp>(op)) {
      int id = addValue(op->getResult(0), Storage::View);
      program.values[id].viewOf = program.storageOf(ids.lookup(op->getOperand(0))).id;
      layers[op->getResult(0)] = layers.lookup(op->getOperand(0));
      return mlir::success();
    }
    if (op->getNumRegions() != 0 || op->getDialect() == nullptr ||
        op->getDialect()->getNamespace() != "tl")
      return op->emitError("cannot lower '") << op->getName() << "' to a kernel";
    return lowerKernel(op);
  }

  // One op, one kernel (O0): its operands are read from memory, its results written.
  mlir::LogicalResult lowerKernel(mlir::Operation *op) {
    Kernel kernel;
    kernel.name = kernelName(op, program.dtype);
    OpRecord record;
    record.op = op->getName().stripDialect().str();
    for (mlir::NamedAttribute attr : op->getAttrDictionary()) record.attrs[attr.getName().str()] = toAttrValue(attr.getValue());
    kernel.layer = layerOf(op);
    for (mlir::Value operand : op->getOperands()) {
      int id = ids.lookup(operand);
      record.operands.push_back(id);
      if (std::find(kernel.inputs.begin(), kernel.inputs.end(), id) == kernel.inputs.end()) kernel.inputs.push_back(id);
    }
    for (mlir::Value result : op->getResults()) {
      int id = addValue(result, Storage::Activation);
      record.results.push_back(id);
      kernel.outputs.push_back(id);
      layers[result] = kernel.layer;
    }
    kernel.ops.push_back(std::move(record));
    kernel.flops = countFlops(op);
    for (int id : kernel.inputs) kernel.minBytes += program.value(id).bytes();
    for (int id : kernel.outputs) kernel.minBytes += program.value(id).bytes();
    program.kernels.push_back(std::move(kernel));
    return mlir::success();
  }

  // The block an op belongs to: its weight's layer if it reads one (so a block's
  // first norm is not counted in the block before), else its operands' latest layer.
  int layerOf(mlir::Operation *op) {
    int layer = -1;
    for (mlir::Value operand : op->getOperands())
      if (auto weight = operand.getDefiningOp<tl::WeightOp>()) return layerOfKey(weight.getKey());
    for (mlir::Value operand : op->getOperands()) layer = std::max(layer, layers.lookup(operand));
    return layer;
  }

  void addParameter(tl::WeightOp weight) {
    std::string key = weight.getKey().str();
    for (const Parameter &p : program.parameters)
      if (p.key == key) return;
    bool isGain = llvm::any_of(weight->getUses(), [](mlir::OpOperand &use) {
      auto norm = llvm::dyn_cast<tl::RMSNormOp>(use.getOwner());
      return norm && use.get() == norm.getGain();
    });
    program.parameters.push_back({key, shapeOf(weight.getResult()), isGain ? "ones" : "normal"});
  }

  int addValue(mlir::Value value, Storage storage) {
    Value v;
    v.id = int(program.values.size());
    llvm::raw_string_ostream os(v.name);
    value.printAsOperand(os, asmState);
    os.flush();
    v.dtype = toDType(llvm::cast<mlir::RankedTensorType>(value.getType()).getElementType());
    v.shape = shapeOf(value);
    v.storage = storage;
    program.values.push_back(std::move(v));
    ids[value] = program.values.back().id;
    return program.values.back().id;
  }

  mlir::func::FuncOp forward;
  Program &program;
  mlir::AsmState asmState;
  llvm::DenseMap<mlir::Value, int> ids;
  llvm::DenseMap<mlir::Value, int> layers;
};

} // namespace

mlir::FailureOr<Program> lowerToProgram(mlir::ModuleOp module, const LoweringOptions &options) {
  mlir::func::FuncOp forward = getForwardFunction(module);
  if (!forward) return mlir::failure();

  bool dynamic = false;
  forward.walk([&](mlir::Operation *op) {
    for (mlir::Type type : op->getResultTypes())
      if (auto tensor = llvm::dyn_cast<mlir::RankedTensorType>(type); tensor && !tensor.hasStaticShape()) {
        op->emitError("cannot lower a dynamic shape ") << type << "; specialize batch and sequence first";
        dynamic = true;
        return mlir::WalkResult::interrupt();
      }
    return mlir::WalkResult::advance();
  });
  if (dynamic) return mlir::failure();

  Program program;
  if (auto name = module->getAttrOfType<mlir::StringAttr>("tl.model")) program.model = name.str();
  program.optLevel = options.optLevel;
  program.pipeline = options.pipeline;
  auto ids = llvm::dyn_cast<mlir::RankedTensorType>(forward.getArgumentTypes().empty() ? mlir::Type()
                                                                                      : forward.getArgumentTypes()[0]);
  tl::EmbeddingOp embedding;
  forward.walk([&](tl::EmbeddingOp op) { embedding = op; });
  if (!ids || ids.getRank() != 2 || !embedding || forward.getNumResults() != 2)
    return forward.emitError("@forward must take token ids [B, S], embed them, and return (logits, loss)");
  program.batch = ids.getDimSize(0);
  program.seqLen = ids.getDimSize(1);
  auto table = llvm::cast<mlir::RankedTensorType>(embedding.getTable().getType());
  program.vocab = table.getDimSize(0);
  program.dtype = toDType(table.getElementType());

  if (mlir::failed(Lowering(forward, program).run())) return mlir::failure();
  return program;
}

} // namespace tlc
