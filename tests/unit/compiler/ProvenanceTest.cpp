// Provenance: every op of a model file is attributed to exactly one kernel at every
// level, forward and training step, through every fusion pass.
#include "TestSupport.h"

#include "compiler/Provenance.h"
#include "compiler/TlDialect.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "llvm/Support/SourceMgr.h"

#include <map>
#include <set>

using namespace tlc;

namespace {

struct Case {
  const char *path;
  int level;
  bool training;
  bool persistent = false;  // O3's forward as one persistent kernel (its parts hold the origins)
};

std::ostream &operator<<(std::ostream &os, const Case &c) {
  return os << c.path << " O" << c.level << (c.training ? " training step" : " forward")
            << (c.persistent ? ", persistent" : "");
}

using Place = std::pair<int, int>;  // line, column

std::string debugString(mlir::Location loc) {
  std::string text;
  llvm::raw_string_ostream(text) << loc;
  return text;
}

// The ops of @forward as parsed, by place: whether each is a parameter (tl.weight).
std::map<Place, bool> parsedOps(mlir::ModuleOp module) {
  std::map<Place, bool> ops;
  for (mlir::Operation &op : getForwardFunction(module).getBody().front().without_terminator()) {
    int found = 0;
    forEachSourceOp(op.getLoc(), [&](const SourceRef &source) {
      ops[{int(source.place.getLine()), int(source.place.getColumn())}] = llvm::isa<tl::WeightOp>(op);
      ++found;
    });
    EXPECT_EQ(found, 1) << "the parser's op at " << debugString(op.getLoc()) << " is not named once";
  }
  return ops;
}

class ProvenanceTest : public ::testing::TestWithParam<Case> {};

TEST_P(ProvenanceTest, EveryOpInExactlyOneKernel) {
  const Case &c = GetParam();
  auto context = support::makeContext();
  llvm::SourceMgr sourceMgr;
  auto module = parseModelFile(*context, std::string(TLC_SOURCE_DIR) + "/" + c.path, sourceMgr);
  ASSERT_TRUE(module);
  std::map<Place, bool> ops = parsedOps(*module);
  ASSERT_GT(ops.size(), 100u);

  CompileOptions options{c.level, 1, 16, "f32"};
  options.persistent = c.persistent;
  AdamWOptions adamw;
  ASSERT_TRUE(mlir::succeeded(optimizeModule(*module, options, {}, c.training ? &adamw : nullptr)));
  auto program = buildProgram(*module, options, c.training ? &adamw : nullptr);
  ASSERT_TRUE(mlir::succeeded(program));

  // Kernels per source op and role (a persistent kernel's parts: it computes what they do).
  std::map<Place, std::map<OriginRole, std::set<size_t>>> kernelsOf;
  std::vector<const Kernel *> kernels = computeKernels(*program);
  for (size_t k = 0; k < kernels.size(); ++k) {
    const Kernel &kernel = *kernels[k];
    EXPECT_FALSE(kernel.origins.empty()) << "kernel " << k << " (" << kernel.name << ") names no model op";
    for (const OpOrigin &origin : kernel.origins) {
      const SourceOp &op = program->sourceOps.at(size_t(origin.op));
      ASSERT_TRUE(ops.count({op.line, op.column})) << op.text << " is no op of " << c.path;
      kernelsOf[{op.line, op.column}][origin.role].insert(k);
    }
  }
  size_t persistentKernels = 0;
  for (const Kernel &kernel : program->kernels) {
    if (kernel.parts.empty()) continue;
    ++persistentKernels;
    std::set<std::pair<int, OriginRole>> own, ofParts;
    for (const OpOrigin &origin : kernel.origins) own.insert({origin.op, origin.role});
    for (const Kernel &part : kernel.parts)
      for (const OpOrigin &origin : part.origins) ofParts.insert({origin.op, origin.role});
    EXPECT_EQ(own, ofParts) << kernel.name << " names other ops than its parts";
  }
  ASSERT_EQ(persistentKernels, c.persistent ? 1u : 0u) << program->persistentFallback;
  size_t gradients = 0, computed = 0;
  for (const auto &[place, isWeight] : ops) {
    auto &roles = kernelsOf[place];
    std::string where = std::to_string(place.first) + ":" + std::to_string(place.second);
    if (isWeight) {  // parameters: no kernel computes them; a training step updates each once
      EXPECT_TRUE(roles[OriginRole::Computes].empty()) << where;
      if (c.training) EXPECT_EQ(roles[OriginRole::Updates].size(), 1u) << "the weight at " << where;
      continue;
    }
    ++computed;
    EXPECT_EQ(roles[OriginRole::Computes].size(), 1u) << "the op at " << where << " is computed by "
                                                      << roles[OriginRole::Computes].size() << " kernels";
    // (An add's gradient is its output's, passed on: not every op has a kernel of its own in the backward.)
    if (!c.training) EXPECT_TRUE(roles[OriginRole::Gradient].empty() && roles[OriginRole::Recomputes].empty()) << where;
    gradients += !roles[OriginRole::Gradient].empty();
  }
  // The backward names what it differentiates: most ops, all but the adds.
  if (c.training) EXPECT_GT(gradients, computed * 3 / 4);
}

std::vector<Case> cases() {
  std::vector<Case> all;
  for (const char *path : {"models/tinyllama.tl", "models/tinyllama-1.1b.tl"})
    for (int level = 0; level <= 3; ++level)
      for (bool training : {false, true}) all.push_back({path, level, training});
  for (const char *path : {"models/tinyllama.tl", "models/tinyllama-1.1b.tl"}) all.push_back({path, 3, false, true});
  return all;
}

INSTANTIATE_TEST_SUITE_P(Models, ProvenanceTest, ::testing::ValuesIn(cases()), [](const auto &info) {
  const Case &c = info.param;
  return std::string(std::string(c.path).find("1.1b") == std::string::npos ? "workshop" : "tinyllama_1_1b") + "_O" +
         std::to_string(c.level) + (c.training ? "_train" : "_forward") + (c.persistent ? "_persistent" : "");
});

} // namespace
