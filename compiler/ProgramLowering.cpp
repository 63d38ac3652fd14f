#include "compiler/ProgramLowering.h"

#include "compiler/RuntimeRules.h"

#include "compiler/CostModel.h"
#include "compiler/Layers.h"
#include "compiler/ModelIO.h"
#include "compiler/Provenance.h"
#include "compiler/TlDialect.h"
#include "compiler/codegen/KernelBuilder.h"
#include "runtime/Error.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/AsmState.h"
#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/DenseSet.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/raw_ostream.h"

#include <algorithm>
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <map>
#include <optional>
#include <set>

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

// Names a kernel by what it computes, so profilers show meaningful rows:
// tl_linear_bf16_1024x1536x512 is a [1024, 512] x [512, 1536] projection.
std::string kernelName(mlir::Operation *op, DType dtype) {
  auto type = [](mlir::Value v) { return llvm::cast<mlir::RankedTensorType>(v.getType()); };
  std::vector<int64_t> dims;
  if (auto linear = llvm::dyn_cast<tl::LinearOp>(op)) {  // rows x N x K
    auto in = type(linear.getInput());
    dims = {in.getNumElements() / in.getShape().back(), type(linear.getWeight()).getDimSize(0), in.getShape().back()};
  } else if (auto matmul = llvm::dyn_cast<tl::BatchMatmulOp>(op)) {  // batch x M x N x K
    auto out = type(matmul.getResult());
    int64_t m = out.getShape().end()[-2], n = out.getShape().back();
    dims = {out.getNumElements() / (m * n), m, n, type(matmul.getLhs()).getShape().back()};
  } else if (op->getNumResults() > 0) {
    dims = shapeOf(op->getResult(0));
  }
  std::string name = fmt::format("tl_{}_{}", op->getName().stripDialect().str(), dtypeName(dtype));
  if (!dims.empty()) name += fmt::format("_{}", fmt::join(dims, "x"));
  return name;
}

// Ops that reshape without moving data: a View at top level, a copy inside a kernel.
bool isView(mlir::Operation *op) { return llvm::isa<tl::SplitHeadsOp, tl::MergeHeadsOp>(op); }

std::string opName(mlir::Operation *op) { return op->getName().stripDialect().str(); }

// The names of a fused region's ops in order, each once, views left out.
void appendOpNames(mlir::Block &body, std::vector<std::string> &parts) {
  for (mlir::Operation &op : body)
    if (!llvm::isa<tl::YieldOp>(op) && !isView(&op) &&
        std::find(parts.begin(), parts.end(), opName(&op)) == parts.end())
      parts.push_back(opName(&op));
}

// A fused linear's ops in order, each once; a GEMM in its prologue (tl-fuse-gemv-chains)
// names its own first, then its reader's follow.
void appendFusedLinearNames(tl::FusedLinearOp fused, std::vector<std::string> &parts) {
  std::vector<std::string> own;
  for (mlir::Operation &op : fused.getPrologue().front())
    if (auto producer = llvm::dyn_cast<tl::FusedLinearOp>(op)) appendFusedLinearNames(producer, parts);
    else if (!llvm::isa<tl::YieldOp>(op) && !isView(&op) && !llvm::is_contained(own, opName(&op))) own.push_back(opName(&op));
  own.push_back("linear");
  appendOpNames(fused.getEpilogue().front(), own);
  parts.insert(parts.end(), own.begin(), own.end());
}

// tl_rmsnorm_linear_split_rope_transpose_f32_1024x1024x512, and with a GEMM in the
// prologue tl_rmsnorm_linear_split_swiglu_linear_add_bf16_1x512x2048.
std::string fusedLinearName(tl::FusedLinearOp fused, DType dtype) {
  std::vector<std::string> parts;
  appendFusedLinearNames(fused, parts);
  auto a = llvm::cast<mlir::RankedTensorType>(fused.prologueYield().getValues()[0].getType());
  int64_t rows = a.getNumElements() / a.getShape().back();
  auto w = llvm::cast<mlir::RankedTensorType>(fused.getWeight().getType());
  return fmt::format("tl_{}_{}_{}x{}x{}", fmt::join(parts, "_"), dtypeName(dtype), rows, w.getDimSize(0),
                     w.getDimSize(1));
}

// tl_linear_grad_input_silu_mul_silu_grad_split_grad_bf16_1024x512x2048: dX's GEMM
// (rows x dY's columns x dX's columns), then its epilogue's ops.
std::string fusedLinearGradInputName(tl::FusedLinearGradInputOp fused, DType dtype) {
  std::vector<std::string> parts{"linear_grad_input"};
  appendOpNames(fused.getEpilogue().front(), parts);
  auto grad = llvm::cast<mlir::RankedTensorType>(fused.getGrad().getType());
  auto w = llvm::cast<mlir::RankedTensorType>(fused.getWeight().getType());
  return fmt::format("tl_{}_{}_{}x{}x{}", fmt::join(parts, "_"), dtypeName(dtype),
                     grad.getNumElements() / grad.getShape().back(), w.getDimSize(0), w.getDimSize(1));
}

// tl_flash_attention_grad_transpose_rope_grad_split_grad_bf16_8x8x128x64: the backward
// (named by the query's shape, as the unfused kernel), then its epilogue's ops.
std::string fusedAttentionGradName(tl::FusedFlashAttentionGradOp fused, DType dtype) {
  std::vector<std::string> parts{"flash_attention_grad"};
  appendOpNames(fused.getEpilogue().front(), parts);
  return fmt::format("tl_{}_{}_{}", fmt::join(parts, "_"), dtypeName(dtype), fmt::join(shapeOf(fused.getQuery()), "x"));
}

// tl_silu_mul_silu_grad_split_grad_bf16_8x128x4096: the chain's ops in order, then the
// shape of its first result.
std::string fusedElementwiseName(tl::FusedElementwiseOp fused, DType dtype) {
  std::vector<std::string> parts;
  appendOpNames(fused.getBody().front(), parts);
  return fmt::format("tl_{}_{}_{}", fmt::join(parts, "_"), dtypeName(dtype), fmt::join(shapeOf(fused.getResult(0)), "x"));
}

class Lowering {
public:
  Lowering(mlir::func::FuncOp forward, Program &program, const LoweringOptions &options)
      : forward(forward), program(program), options(options), asmState(forward), layers(assignLayers(forward)) {}

  // The kernel-level representation of every kernel, read off the IR it came from.
  mlir::LogicalResult buildSpecs(std::vector<codegen::KernelSpec> &specs) {
    auto idOf = [this](mlir::Value value) {
      auto found = ids.find(value);
      return found == ids.end() ? -1 : found->second;
    };
    for (size_t k = 0; k < program.kernels.size(); ++k) {
      try {
        specs.push_back(codegen::buildKernelSpec(program, program.kernels[k], roots[k], idOf));
      } catch (const Error &error) {
        return roots[k].op->emitError(error.what());
      }
    }
    return mlir::success();
  }

  mlir::LogicalResult run() {
    for (mlir::BlockArgument arg : forward.getArguments()) program.inputs.push_back(addValue(arg, Storage::Input));
    for (mlir::Operation &op : forward.getBody().front()) {
      if (auto ret = llvm::dyn_cast<mlir::func::ReturnOp>(op)) {
        for (mlir::Value out : ret.getOperands()) {
          if (program.storageOf(ids.lookup(out)).storage == Storage::State) continue;  // the caches stay
          int id = ids.lookup(out);
          if (reducedInPlace.count(id)) id = program.storageOf(id).id;  // the loss, averaged where it lies
          Value &value = program.values[id];
          if (value.storage != Storage::Activation)
            return op.emitError("a returned value must be computed by a kernel");
          value.storage = Storage::Output;
          program.outputs.push_back(value.id);
        }
        continue;
      }
      const size_t first = program.kernels.size();
      if (mlir::failed(lowerTopLevel(&op))) return mlir::failure();
      // The first kernel after the last block (the logits GEMM) chained to it, as the
      // block's own are.
      if (llvm::isa<tl::BlockOp>(op)) blockEnd = program.kernels.size();
      else if (first == blockEnd && first < program.kernels.size()) roots[first].chained = mayChain(first);
    }
    for (Kernel &kernel : program.kernels) {
      kernel.minBytes = 0;
      for (int id : kernel.inputs) kernel.minBytes += bytesRead(kernel, id);
      for (int id : kernel.outputs) kernel.minBytes += program.value(id).bytes();
    }
    sortOrigins();
    return mlir::success();
  }

private:
  // What a kernel reads of an input at least: an embedding table only its gathered rows
  // (at most one per token), anything else whole.
  int64_t bytesRead(const Kernel &kernel, int id) const {
    const Value &value = program.value(id);
    for (const OpRecord &op : kernel.ops)
      if (op.kind == OpKind::embedding && op.operands.size() == 2 && op.operands[0] == id && value.shape.size() == 2 &&
          value.shape[0] > 0) {
        int64_t tokens = 1;
        for (int64_t d : program.value(op.operands[1]).shape) tokens *= d;
        return std::min(tokens, value.shape[0]) * (value.bytes() / value.shape[0]);
      }
    return value.bytes();
  }

  // A weight read only by what is made of it at load time (concatenated, scaled) is no
  // buffer of its own.
  static bool readOnlyAtLoad(mlir::Operation *op) {
    return llvm::all_of(op->getUsers(), [](mlir::Operation *user) { return tl::isLoadTimeOp(user); });
  }

  // What lowers to no kernel: a weight (or what is made of weights at load time), the KV
  // cache, a view, a split its producer writes; std::nullopt for everything else.
  std::optional<mlir::LogicalResult> lowerStorage(mlir::Operation *op) {
    if (auto weight = llvm::dyn_cast<tl::WeightOp>(op)) {
      addParameter(weight);
      weightKeys[weight.getResult()] = {weight.getKey().str()};
      if (readOnlyAtLoad(weight)) return mlir::success();
      int id = addValue(weight.getResult(), Storage::Weight);
      program.values[id].weightKeys = weightKeys[weight.getResult()];
      return mlir::success();
    }
    if (auto concat = llvm::dyn_cast<tl::ConcatOp>(op)) {
      // Concatenated weights are one Weight made of several checkpoint tensors.
      std::vector<std::string> keys;
      for (mlir::Value input : concat.getInputs()) {
        auto part = weightKeys.find(input);
        if (part == weightKeys.end() || columnScaleKeys.count(input))
          return mlir::LogicalResult(op->emitError("only weights can be concatenated (scale their columns after)"));
        keys.insert(keys.end(), part->second.begin(), part->second.end());
      }
      weightKeys[concat.getResult()] = keys;
      if (readOnlyAtLoad(concat)) return mlir::success();
      int id = addValue(concat.getResult(), Storage::Weight);
      program.values[id].weightKeys = keys;
      return mlir::success();
    }
    if (auto scaled = llvm::dyn_cast<tl::ScaleColumnsOp>(op)) {
      // A weight scaled column by column by a 1-D parameter (a folded RMSNorm gain).
      auto keys = weightKeys.find(scaled.getInput());
      auto gain = scaled.getGain().getDefiningOp<tl::WeightOp>();
      if (keys == weightKeys.end() || !gain || columnScaleKeys.count(scaled.getInput()))
        return mlir::LogicalResult(op->emitError("only a weight can have its columns scaled, once, by a parameter"));
      weightKeys[scaled.getResult()] = keys->second;
      columnScaleKeys[scaled.getResult()] = gain.getKey().str();
      int id = addValue(scaled.getResult(), Storage::Weight);
      program.values[id].weightKeys = keys->second;
      program.values[id].columnScaleKey = gain.getKey().str();
      return mlir::success();
    }
    if (auto cache = llvm::dyn_cast<tl::KvCacheOp>(op)) {
      int id = addValue(cache.getResult(), Storage::State);
      program.values[id].name = "kv_cache." + cache.getKey().str();  // how a backend finds it again
      return mlir::success();
    }
    if (isView(op)) {
      int id = addValue(op->getResult(0), Storage::View);
      program.values[id].viewOf = program.storageOf(ids.lookup(op->getOperand(0))).id;
      // A view computes nothing: the first kernel to read through it does its indexing.
      viewLocations[id] = viewLocations.lookup(ids.lookup(op->getOperand(0)));
      viewLocations[id].push_back(op->getLoc());
      return mlir::success();
    }
    if (auto split = llvm::dyn_cast<tl::SplitOp>(op); split && foldIntoProducer(split)) return mlir::success();
    return std::nullopt;
  }

  mlir::LogicalResult lowerTopLevel(mlir::Operation *op) {
    if (std::optional<mlir::LogicalResult> lowered = lowerStorage(op)) return *lowered;
    if (!op->getDialect() || op->getDialect()->getNamespace() != "tl")
      return op->emitError("cannot lower '") << op->getName() << "' to a kernel";

    if (auto block = llvm::dyn_cast<tl::BlockOp>(op)) return lowerBlock(block);
    if (auto update = llvm::dyn_cast<tl::AdamWOp>(op)) return lowerUpdate(update);
    if (auto reduce = llvm::dyn_cast<tl::AllReduceOp>(op)) return lowerAllReduce(reduce);
    if (auto concat = llvm::dyn_cast<tl::ConcatGradOp>(op); concat && splitByTheOptimizer(concat))
      return mlir::success();  // lowered with the first update that reads it (lowerUpdate)
    if (auto norm = llvm::dyn_cast<tl::GlobalNormOp>(op)) return lowerGlobalNorm(norm);

    return lowerKernel(op);
  }

  // An op that computes: one kernel, its inputs, its origins, its outputs written to memory.
  mlir::LogicalResult lowerKernel(mlir::Operation *op) {
    Kernel kernel;
    kernel.layer = layers.lookup(op);
    for (mlir::Value operand : op->getOperands()) addInput(kernel, ids.lookup(operand));
    op->walk([&](mlir::Operation *inner) { addOrigins(kernel, inner->getLoc()); });
    if (auto fused = llvm::dyn_cast<tl::FusedLinearOp>(op)) {
      kernel.name = fusedLinearName(fused, program.dtype);
      if (mlir::failed(emitFusedLinear(fused, kernel))) return mlir::failure();
    } else if (auto fused = llvm::dyn_cast<tl::FusedLinearGradInputOp>(op)) {
      kernel.name = fusedLinearGradInputName(fused, program.dtype);
      if (mlir::failed(emitFusedLinearGradInput(fused, kernel))) return mlir::failure();
    } else if (auto fused = llvm::dyn_cast<tl::FusedFlashAttentionGradOp>(op)) {
      kernel.name = fusedAttentionGradName(fused, program.dtype);
      if (mlir::failed(emitFusedAttentionGrad(fused, kernel))) return mlir::failure();
    } else if (auto chain = llvm::dyn_cast<tl::FusedElementwiseOp>(op)) {
      kernel.name = fusedElementwiseName(chain, program.dtype);
      if (mlir::failed(emitRegion(chain.getBody().front(), chain.getInputs(), kernel)) ||
          mlir::failed(bindResults(chain, chain.bodyYield())))
        return mlir::failure();
    } else {
      kernel.name = kernelName(op, program.dtype);
      if (mlir::failed(emitOp(op, kernel))) return mlir::failure();
    }
    // What the op returns is written to memory; everything else stayed on chip.
    for (mlir::Value result : op->getResults()) {
      int id = ids.lookup(result);
      if (!isStateView(id)) program.values[id].storage = Storage::Activation;
      kernel.outputs.push_back(id);
      producer[id] = int(program.kernels.size());
    }
    program.kernels.push_back(std::move(kernel));
    roots.push_back({op, nullptr, false});
    return mlir::success();
  }

  static bool readsKvCache(const Kernel &kernel) {
    return llvm::any_of(kernel.ops, [](const OpRecord &op) { return op.kind == OpKind::cache_attention; });
  }

  // Kernel k may be launched as a dependent of the one before: neither is a collective
  // (its library launches those), and it is not one of the launches kept apart (lowerBlock).
  // Code generation keeps apart too the kernels whose path runs faster so (codegen::launchesApart).
  bool mayChain(size_t k) const {
    auto collective = [&](size_t i) {
      return llvm::any_of(program.kernels[i].ops, [](const OpRecord &op) { return op.kind == OpKind::all_reduce; });
    };
    const Kernel &kernel = program.kernels[k];
    return k > 0 && !collective(k) && !collective(k - 1) && (options.chainCacheAttention || !readsKvCache(kernel)) &&
           !attendsOverSequence(kernel) && !attendsOverSequence(program.kernels[k - 1]);
  }

  // Attention over a whole sequence (more than one query row a sequence).
  bool attendsOverSequence(const Kernel &kernel) const {
    return program.seqLen > 1 &&
           llvm::any_of(kernel.ops, [](const OpRecord &op) { return op.kind == OpKind::flash_attention; });
  }

  // A transformer block: its kernels launched as dependents of the one before (each may
  // start while that one finishes), the first too, after the block before it (or the
  // embedding); what flows between them is stored in the model's dtype, small enough to
  // stay in L2. Attention over the KV cache or over a sequence, and the GEMM after a
  // sequence's attention, are launched on their own: chained, they measured slower
  // (docs/codegen.md, "O3"). A decode-shaped forward's one-row attention stays chained,
  // where the whole chain measured fastest.
  mlir::LogicalResult lowerBlock(tl::BlockOp block) {
    mlir::Block &body = block.getBody().front();
    for (auto [arg, outer] : llvm::zip(body.getArguments(), block.getInputs())) ids[arg] = ids.lookup(outer);
    size_t first = program.kernels.size();
    for (mlir::Operation &inner : body)
      if (!llvm::isa<tl::YieldOp>(inner) && mlir::failed(lowerTopLevel(&inner))) return mlir::failure();
    for (size_t k = first; k < program.kernels.size(); ++k) {
      Kernel &kernel = program.kernels[k];
      kernel.layer = int(block.getLayer());
      roots[k].chained = mayChain(k);
    }
    auto yield = llvm::cast<tl::YieldOp>(body.getTerminator());
    for (auto [result, yielded] : llvm::zip(block.getResults(), yield.getValues())) ids[result] = ids.lookup(yielded);
    return mlir::success();
  }

  // A merged weight's gradient (the QKV's, the gate/up's) split into its parameters'
  // by a tl.concat_grad that only updates read: the split runs in the optimizer's kernel,
  // whose updates read each piece where it lies in the merged gradient (no copy, no
  // kernel of its own). Clipping's global norm may read the pieces too, if it reads them
  // all: it then reads the merged gradient whole (lowerGlobalNorm).
  static bool splitByTheOptimizer(tl::ConcatGradOp concat) {
    return !concat->use_empty() && llvm::all_of(concat->getUsers(), [&](mlir::Operation *user) {
      auto norm = llvm::dyn_cast<tl::GlobalNormOp>(user);
      return llvm::isa<tl::AdamWOp>(user) ||
             (norm && llvm::all_of(concat->getResults(),
                                   [&](mlir::Value piece) { return llvm::is_contained(norm.getInputs(), piece); }));
    });
  }

  // The gradients' global L2 norm: one kernel, reading a merged weight's gradient whole,
  // once, in place of the pieces AdamW reads in place (the same squares summed).
  mlir::LogicalResult lowerGlobalNorm(tl::GlobalNormOp norm) {
    Kernel kernel;
    kernel.layer = layers.lookup(norm);
    kernel.name = kernelName(norm, program.dtype);
    addOrigins(kernel, norm.getLoc());
    OpRecord record = recordOf(norm, OpKind::global_norm);
    for (mlir::Value input : norm.getInputs()) {
      auto concat = input.getDefiningOp<tl::ConcatGradOp>();
      int id = ids.lookup(concat && splitByTheOptimizer(concat) ? concat.getGrad() : input);
      if (llvm::is_contained(record.operands, id)) continue;
      addInput(kernel, id);
      record.operands.push_back(id);
    }
    int result = addValue(norm.getResult(), Storage::Activation);
    record.results.push_back(result);
    kernel.outputs.push_back(result);
    kernel.flops = countFlops(norm);
    kernel.ops.push_back(std::move(record));
    producer[result] = int(program.kernels.size());
    program.kernels.push_back(std::move(kernel));
    roots.push_back({norm, nullptr, false});
    return mlir::success();
  }

  // The optimizer's updates, one after another at the end of a training step, make one
  // kernel over every parameter (a multi-tensor update).
  mlir::LogicalResult lowerUpdate(tl::AdamWOp update) {
    bool extends = !program.kernels.empty() && updatesParameters(program.kernels.back());
    if (!extends) {
      Kernel kernel;
      kernel.layer = -1;
      program.kernels.push_back(std::move(kernel));
      roots.push_back({update, nullptr, false});
    }
    Kernel &kernel = program.kernels.back();
    // The gradient's tl.concat_grad, once, before the first update that reads a piece.
    if (auto concat = update.getGrad().getDefiningOp<tl::ConcatGradOp>();
        concat && splitByTheOptimizer(concat) && !ids.count(concat->getResult(0))) {
      addInput(kernel, ids.lookup(concat.getGrad()));
      addOrigins(kernel, concat.getLoc());
      if (mlir::failed(emitOp(concat, kernel))) return mlir::failure();
    }
    for (mlir::Value operand : update->getOperands())
      if (program.values[size_t(ids.lookup(operand))].storage != Storage::Local) addInput(kernel, ids.lookup(operand));
    addOrigins(kernel, update.getLoc());
    if (mlir::failed(emitOp(update, kernel))) return mlir::failure();
    kernel.name = fmt::format("tl_adamw_{}_{}_tensors", dtypeName(program.dtype), updateCount(kernel));
    return mlir::success();
  }

  // A bucket's mean over the ranks, computed where its operands lie: each result is a
  // view of its operand, so what reads it after reads the mean.
  mlir::LogicalResult lowerAllReduce(tl::AllReduceOp reduce) {
    Kernel kernel;
    kernel.layer = -1;
    OpRecord record = recordOf(reduce, OpKind::all_reduce);
    for (auto [input, result] : llvm::zip(reduce.getInputs(), reduce.getResults())) {
      int operand = ids.lookup(input);
      addInput(kernel, operand);
      record.operands.push_back(operand);
      int id = addValue(result, Storage::View);
      program.values[size_t(id)].viewOf = program.storageOf(operand).id;
      record.results.push_back(id);
      kernel.outputs.push_back(id);
      reducedInPlace.insert(id);
    }
    addOrigins(kernel, reduce.getLoc());
    kernel.flops = countFlops(reduce);
    kernel.name = fmt::format("tl_all_reduce_{}_{}_tensors", dtypeName(program.dtype), record.operands.size());
    kernel.ops.push_back(std::move(record));
    program.kernels.push_back(std::move(kernel));
    roots.push_back({reduce, nullptr, false});
    return mlir::success();
  }

  // A split right after the kernel that computes its operand is free: that kernel
  // writes each piece to its own buffer instead of the whole.
  bool foldIntoProducer(tl::SplitOp split) {
    int input = ids.lookup(split.getInput());
    auto found = producer.find(input);
    if (found == producer.end() || !split.getInput().hasOneUse() || !split.getInput().getDefiningOp<tl::LinearOp>())
      return false;
    Kernel &kernel = program.kernels[found->second];
    program.values[input].storage = Storage::Local;
    kernel.outputs.erase(std::find(kernel.outputs.begin(), kernel.outputs.end(), input));
    OpRecord record = recordOf(split, OpKind::split);
    record.operands = {input};
    for (mlir::Value result : split.getResults()) {
      int id = addValue(result, Storage::Activation);
      record.results.push_back(id);
      kernel.outputs.push_back(id);
      producer[id] = found->second;
    }
    kernel.ops.push_back(std::move(record));
    addOrigins(kernel, split.getLoc());
    kernel.name += "_split";
    roots[size_t(found->second)].foldedSplit = split;
    return true;
  }

  // Appends `op` to a kernel; its results are Local until the caller says otherwise.
  mlir::LogicalResult emitOp(mlir::Operation *op, Kernel &kernel) {
    if (auto fused = llvm::dyn_cast<tl::FusedLinearOp>(op)) return emitFusedLinear(fused, kernel);
    std::optional<OpKind> kind = opKindOf(op);
    if (!kind) return op->emitError("cannot lower '") << op->getName() << "' inside a kernel";
    OpRecord record = recordOf(op, *kind);
    for (mlir::Value operand : op->getOperands()) record.operands.push_back(ids.lookup(operand));
    for (mlir::Value result : op->getResults()) record.results.push_back(addValue(result, Storage::Local));
    if (llvm::isa<tl::KvCacheStoreOp>(op)) {  // the cache, written where it lies, wherever the store runs
      Value &cache = program.values[size_t(record.results[0])];
      cache.storage = Storage::View;
      cache.viewOf = program.storageOf(record.operands[0]).id;
    }
    kernel.flops += countFlops(op);
    kernel.ops.push_back(std::move(record));
    return mlir::success();
  }

  mlir::LogicalResult emitRegion(mlir::Block &body, mlir::ValueRange arguments, Kernel &kernel) {
    for (auto [arg, outer] : llvm::zip(body.getArguments(), arguments)) ids[arg] = ids.lookup(outer);
    return emitOps(body, kernel);
  }

  // A region's ops, its yield left out (the caller binds what it yields).
  mlir::LogicalResult emitOps(mlir::Block &body, Kernel &kernel) {
    for (mlir::Operation &op : body.without_terminator())
      if (mlir::failed(emitOp(&op, kernel))) return mlir::failure();
    return mlir::success();
  }

  // A cache updated in place (a kv_cache_store's result): it is the state's bytes.
  bool isStateView(int id) const {
    return program.values[size_t(id)].storage == Storage::View && program.storageOf(id).storage == Storage::State;
  }

  // Maps an op's results to the values its region yields.
  mlir::LogicalResult bindResults(mlir::Operation *op, tl::YieldOp yield) {
    for (auto [result, yielded] : llvm::zip(op->getResults(), yield.getValues())) {
      int id = ids.lookup(yielded);
      if (program.values[id].storage != Storage::Local && !isStateView(id))
        return op->emitError("a fused region must compute what it yields");
      ids[result] = id;
    }
    return mlir::success();
  }

  // prologue ops, then the GEMM, then epilogue ops, all in one kernel.
  mlir::LogicalResult emitFusedLinear(tl::FusedLinearOp fused, Kernel &kernel) {
    if (mlir::failed(emitRegion(fused.getPrologue().front(), fused.getPrologueInputs(), kernel)))
      return mlir::failure();
    mlir::Value a = fused.prologueYield().getValues()[0];
    if (mlir::failed(emitGemmAndEpilogue(OpKind::linear, a, fused.getWeight(), fused.getEpilogue().front(),
                                         fused.getEpilogueInputs(), kernel)))
      return mlir::failure();
    return bindResults(fused, fused.epilogueYield());
  }

  // dX's GEMM, then the epilogue ops, in one kernel.
  mlir::LogicalResult emitFusedLinearGradInput(tl::FusedLinearGradInputOp fused, Kernel &kernel) {
    if (mlir::failed(emitGemmAndEpilogue(OpKind::linear_grad_input, fused.getGrad(), fused.getWeight(),
                                         fused.getEpilogue().front(), fused.getEpilogueInputs(), kernel)))
      return mlir::failure();
    return bindResults(fused, fused.epilogueYield());
  }

  // Flash attention's backward into the epilogue's arguments (d q, d k, d v), then the
  // epilogue's ops over them.
  mlir::LogicalResult emitFusedAttentionGrad(tl::FusedFlashAttentionGradOp fused, Kernel &kernel) {
    OpRecord grad = recordOf(fused, OpKind::flash_attention_grad);
    for (mlir::Value operand : fused->getOperands()) grad.operands.push_back(ids.lookup(operand));
    mlir::Block &epilogue = fused.getEpilogue().front();
    for (mlir::BlockArgument arg : epilogue.getArguments()) grad.results.push_back(addValue(arg, Storage::Local));
    kernel.flops += countFlops(fused);
    kernel.ops.push_back(std::move(grad));
    if (mlir::failed(emitOps(epilogue, kernel))) return mlir::failure();
    return bindResults(fused, fused.epilogueYield());
  }

  // The GEMM `gemm` (linear or linear_grad_input) of `a` and `weight` into the
  // epilogue's first argument, then the epilogue's ops over it and `epilogueInputs`.
  mlir::LogicalResult emitGemmAndEpilogue(OpKind gemmKind, mlir::Value a, mlir::Value weight, mlir::Block &epilogue,
                                          mlir::ValueRange epilogueInputs, Kernel &kernel) {
    OpRecord gemm;
    gemm.kind = gemmKind;
    gemm.operands = {ids.lookup(a), ids.lookup(weight)};
    gemm.results = {addValue(epilogue.getArgument(0), Storage::Local)};
    auto acc = llvm::cast<mlir::RankedTensorType>(epilogue.getArgument(0).getType());
    kernel.flops += 2 * acc.getNumElements() * llvm::cast<mlir::RankedTensorType>(a.getType()).getShape().back();
    kernel.ops.push_back(std::move(gemm));
    for (auto [arg, outer] : llvm::zip(epilogue.getArguments().drop_front(), epilogueInputs))
      ids[arg] = ids.lookup(outer);
    return emitOps(epilogue, kernel);
  }

  void addInput(Kernel &kernel, int id) {
    if (std::find(kernel.inputs.begin(), kernel.inputs.end(), id) == kernel.inputs.end()) kernel.inputs.push_back(id);
    auto views = viewLocations.find(id);
    if (views == viewLocations.end()) return;
    for (mlir::Location loc : views->second)
      if (claimedViews.insert(loc).second) addOrigins(kernel, loc);
  }

  // Source ops in the file's order, each kernel's origins by source op.
  void sortOrigins() {
    std::vector<int> order(program.sourceOps.size()), renumbered(order.size());
    for (size_t i = 0; i < order.size(); ++i) order[i] = int(i);
    auto place = [&](int i) { return std::make_pair(program.sourceOps[i].line, program.sourceOps[i].column); };
    std::sort(order.begin(), order.end(), [&](int a, int b) { return place(a) < place(b); });
    std::vector<SourceOp> sorted;
    for (int old : order) {
      renumbered[size_t(old)] = int(sorted.size());
      sorted.push_back(program.sourceOps[size_t(old)]);
    }
    program.sourceOps = std::move(sorted);
    for (Kernel &kernel : program.kernels) {
      for (OpOrigin &origin : kernel.origins) origin.op = renumbered[size_t(origin.op)];
      std::sort(kernel.origins.begin(), kernel.origins.end(), [](const OpOrigin &a, const OpOrigin &b) {
        return std::make_pair(a.op, int(a.role)) < std::make_pair(b.op, int(b.role));
      });
    }
  }

  // Records the source ops named in `loc` as the kernel's origins, once each.
  void addOrigins(Kernel &kernel, mlir::Location loc) {
    forEachSourceOp(loc, [&](const SourceRef &source) {
      if (program.sourceFile.empty()) program.sourceFile = source.place.getFilename().str();
      auto [found, added] =
          sourceIndex.try_emplace({source.place.getLine(), source.place.getColumn()}, int(program.sourceOps.size()));
      if (added)
        program.sourceOps.push_back({int(source.place.getLine()), int(source.place.getColumn()), source.text.str()});
      OpOrigin origin{found->second, source.role};
      if (std::none_of(kernel.origins.begin(), kernel.origins.end(),
                       [&](const OpOrigin &o) { return o.op == origin.op && o.role == origin.role; }))
        kernel.origins.push_back(origin);
    });
  }

  void addParameter(tl::WeightOp weight) {
    std::string key = weight.getKey().str();
    for (const Parameter &p : program.parameters)
      if (p.key == key) return;
    // Norm gains (the only vectors among a Llama's weights) start at one.
    bool isGain = llvm::cast<mlir::RankedTensorType>(weight.getType()).getRank() == 1;
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
  const LoweringOptions &options;
  mlir::AsmState asmState;
  llvm::DenseMap<mlir::Operation *, int> layers;
  llvm::DenseMap<mlir::Value, int> ids;
  llvm::DenseMap<mlir::Value, std::vector<std::string>> weightKeys;  // checkpoint keys behind a weight value
  llvm::DenseMap<mlir::Value, std::string> columnScaleKeys;         // and the parameter scaling its columns
  std::map<int, int> producer;  // value id -> index of the kernel that writes it
  std::set<int> reducedInPlace;  // the results of all_reduce ops: views of their operands
  llvm::DenseMap<int, llvm::SmallVector<mlir::Location>> viewLocations;  // a View's ops (through views of views)
  llvm::DenseSet<mlir::Location> claimedViews;                           // those a kernel has taken
  std::map<std::pair<unsigned, unsigned>, int> sourceIndex;              // (line, column) -> Program::sourceOps
  std::vector<codegen::KernelRoot> roots;  // what each kernel was lowered from
  size_t blockEnd = 0;                      // the kernels lowered up to the end of the last tl.block
};

} // namespace

mlir::FailureOr<Program> lowerToProgram(mlir::ModuleOp module, const LoweringOptions &options,
                                        std::vector<codegen::KernelSpec> *specs) {
  mlir::func::FuncOp forward =
      options.entry.empty() ? getModelFunction(module) : module.lookupSymbol<mlir::func::FuncOp>(options.entry);
  if (!forward) {
    if (!options.entry.empty()) module.emitError("the module has no `func.func @") << options.entry << "` to lower";
    return mlir::failure();
  }

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
  if (forward.getSymName() == kTrainStepFunction) program.kind = ProgramKind::TrainStep;
  if (forward.getSymName() == "prefill") program.kind = ProgramKind::Prefill;
  if (forward.getSymName() == "decode") program.kind = ProgramKind::Decode;
  bool generation = program.kind == ProgramKind::Prefill || program.kind == ProgramKind::Decode;
  program.pipeline = options.pipeline;
  auto ids = llvm::dyn_cast<mlir::RankedTensorType>(forward.getArgumentTypes().empty() ? mlir::Type()
                                                                                      : forward.getArgumentTypes()[0]);
  tl::EmbeddingOp embedding;
  forward.walk([&](tl::EmbeddingOp op) { embedding = op; });
  if (!ids || ids.getRank() != 2 || !embedding || forward.getNumResults() != 2 + unsigned(generation))
    return forward.emitError("@") << forward.getSymName() << " must take token ids [B, S], embed them, and return "
                                   << (generation ? "(logits, k cache, v cache)" : "(logits, loss)");
  program.batch = ids.getDimSize(0);
  program.seqLen = ids.getDimSize(1);
  auto table = llvm::cast<mlir::RankedTensorType>(embedding.getTable().getType());
  program.vocab = table.getDimSize(0);
  program.dtype = toDType(table.getElementType());

  Lowering lowering(forward, program, options);
  if (mlir::failed(lowering.run())) return mlir::failure();
  if (specs && mlir::failed(lowering.buildSpecs(*specs))) return mlir::failure();
  return program;
}

} // namespace tlc
