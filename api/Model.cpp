// tlc::Model: the .tl file is parsed once; each shape gets a clone of the module,
// optimized and lowered for it, and a backend loaded with the shared weights.
#include <tlc/Model.h>

#include "api/CapturedDiagnostics.h"
#include "api/Compile.h"
#include "compiler/ModelIO.h"
#include "runtime/CallerBuffers.h"
#include "runtime/RunInputs.h"

#include <tlc/Error.h>
#include <tlc/Tensor.h>

#include "mlir/IR/MLIRContext.h"
#include "llvm/Support/SourceMgr.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>
#include <map>

namespace tlc {

struct Model::Impl {
  struct Loaded {
    Program program;
    std::unique_ptr<Backend> backend;
    uint64_t lastUse = 0;
  };

  Impl(const std::string &path, ModelOptions options) : path(path), options(std::move(options)), context(registry()) {
    CapturedDiagnostics diagnostics(context, sourceMgr);
    module = parseModelFile(context, path, sourceMgr);
    if (!module) diagnostics.fail();
    mlir::func::FuncOp forward = getForwardFunction(*module);
    if (!forward) diagnostics.fail();
    if (auto attr = (*module)->getAttrOfType<mlir::StringAttr>("tl.model")) name = attr.str();
    if (auto attr = (*module)->getAttrOfType<mlir::IntegerAttr>("tl.max_seq_len")) maxSeqLen = attr.getInt();
    // Logits are the first result, [batch, seq, vocab].
    auto logits = forward.getFunctionType().getNumResults() > 0
                      ? llvm::dyn_cast<mlir::RankedTensorType>(forward.getFunctionType().getResult(0))
                      : mlir::RankedTensorType();
    if (!logits || logits.getRank() != 3 || logits.isDynamicDim(2))
      throw Error(fmt::format("{}: @forward's first result must be logits [batch, seq, vocab]", path));
    vocab = logits.getDimSize(2);
  }

  static mlir::DialectRegistry registry() {
    mlir::DialectRegistry dialects;
    registerTlcDialects(dialects);
    return dialects;
  }

  void checkShape(int64_t batch, int64_t seqLen) const {
    if (batch < 1 || seqLen < 1)
      throw Error(fmt::format("{}: batch {} x seq {}: both must be at least 1", path, batch, seqLen));
    if (maxSeqLen > 0 && seqLen > maxSeqLen)
      throw Error(fmt::format("{}: sequence length {} exceeds the model's maximum of {} (tl.max_seq_len)", path,
                              seqLen, maxSeqLen));
  }

  Loaded &serve(int64_t batch, int64_t seqLen) {
    checkShape(batch, seqLen);
    auto found = shapes.find({batch, seqLen});
    if (found == shapes.end()) found = shapes.emplace(std::make_pair(batch, seqLen), compile(batch, seqLen)).first;
    found->second.lastUse = ++clock;
    evictBeyond(std::max(1, options.maxLoadedShapes));
    return shapes.at({batch, seqLen});
  }

  Loaded compile(int64_t batch, int64_t seqLen) {
    // The backend first: the kernels are tuned for its device.
    Loaded loaded;
    loaded.backend = createBackend(options.backend);
    CompileOptions compileOptions{options.optLevel, batch, seqLen, options.dtype};
    tuneForDevice(compileOptions, loaded.backend->deviceInfo());
    CapturedDiagnostics diagnostics(context, sourceMgr);
    mlir::OwningOpRef<mlir::ModuleOp> copy(module->clone());
    if (mlir::failed(optimizeModule(*copy, compileOptions))) diagnostics.fail();
    auto program = buildProgram(*copy, compileOptions);
    if (mlir::failed(program)) diagnostics.fail();
    ++compiles;
    if (!weightsReady) {  // every shape has the same parameters: open the weights once
      RunInputs inputs;
      inputs.weightsPath = options.weightsPath;
      inputs.seed = options.seed;
      inputs.threads = options.backend.cpuThreads;
      weights = loadWeights(inputs, *program);
      weightsReady = true;
    }
    loaded.program = std::move(*program);
    loaded.backend->load(loaded.program, weights);
    return loaded;
  }

  void evictBeyond(int keep) {
    while (int(shapes.size()) > keep) {
      auto oldest = std::min_element(shapes.begin(), shapes.end(),
                                     [](const auto &a, const auto &b) { return a.second.lastUse < b.second.lastUse; });
      shapes.erase(oldest);
    }
  }

  std::string path;
  ModelOptions options;
  mlir::MLIRContext context;
  llvm::SourceMgr sourceMgr;
  mlir::OwningOpRef<mlir::ModuleOp> module;
  std::string name;
  int64_t vocab = 0, maxSeqLen = 0;
  Weights weights;
  bool weightsReady = false;
  std::map<std::pair<int64_t, int64_t>, Loaded> shapes;
  uint64_t clock = 0;
  int compiles = 0;
};

Model::Model(const std::string &path, ModelOptions options) : impl_(std::make_unique<Impl>(path, std::move(options))) {}
Model::~Model() = default;
Model::Model(Model &&other) noexcept = default;
Model &Model::operator=(Model &&other) noexcept = default;

const std::string &Model::name() const { return impl_->name; }
int64_t Model::vocab() const { return impl_->vocab; }
int64_t Model::maxSeqLen() const { return impl_->maxSeqLen; }

ForwardResult Model::forward(Span<const int32_t> tokens, int64_t batch, int64_t seqLen) {
  Impl::Loaded &loaded = impl_->serve(batch, seqLen);
  return loaded.backend->forward(std::vector<int32_t>(tokens.begin(), tokens.end()));
}

float Model::forward(Span<const int32_t> tokens, int64_t batch, int64_t seqLen, Span<float> logits) {
  impl_->checkShape(batch, seqLen);
  size_t expected = size_t(Tensor::elementsOf({batch, seqLen, impl_->vocab}));  // checked: never wraps
  if (logits.size() != expected)
    throw Error(fmt::format("{}: the logits buffer holds {} floats; batch {} x seq {} x vocab {} needs {}", impl_->path,
                            logits.size(), batch, seqLen, impl_->vocab, expected));
  ForwardResult result = forward(tokens, batch, seqLen);
  std::memcpy(logits.data(), result.logits.data.data(), expected * sizeof(float));
  return result.loss;
}

void Model::forwardOnDevice(const DeviceForward &request, int64_t batch, int64_t seqLen) {
  impl_->checkShape(batch, seqLen);
  checkDeviceForward(request, batch, seqLen, impl_->vocab, impl_->path);  // before compiling anything
  impl_->serve(batch, seqLen).backend->forwardOnDevice(request);
}

const Program &Model::program(int64_t batch, int64_t seqLen) { return impl_->serve(batch, seqLen).program; }
const Backend &Model::backend(int64_t batch, int64_t seqLen) { return *impl_->serve(batch, seqLen).backend; }
int Model::compiledShapes() const { return impl_->compiles; }

std::vector<std::pair<int64_t, int64_t>> Model::loadedShapes() const {
  std::vector<std::pair<uint64_t, std::pair<int64_t, int64_t>>> byUse;
  for (const auto &[shape, loaded] : impl_->shapes) byUse.push_back({loaded.lastUse, shape});
  std::sort(byUse.rbegin(), byUse.rend());
  std::vector<std::pair<int64_t, int64_t>> shapes;
  for (const auto &entry : byUse) shapes.push_back(entry.second);
  return shapes;
}

} // namespace tlc
