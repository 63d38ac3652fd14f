// Differential testing across levels: models a few edits away from the builder's (a
// per-element op inserted, an op removed, operands or a chain reordered:
// tests/support/ModelMutations.h). Where a variant compiles and runs at O0 on the CPU
// reference, every level must compile it, run it with O0's logits and loss, and emit
// kernels that NVRTC (sm_90a) and hipRTC (gfx90a) compile. The variants come from fixed
// seeds, so a failure names one that reproduces, with its .tl text; fuzz-tl explores
// further with the same edits.
#include "api/Compile.h"
#include "compiler/ModelIO.h"
#include "models/ModelBuilder.h"
#include "runtime/Backend.h"
#include "runtime/Error.h"
#include "runtime/Jit.h"
#include "tests/support/ModelMutations.h"
#include "tests/unit/compiler/TestSupport.h"

#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/Parser/Parser.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <map>

namespace tlc {
namespace {

constexpr int kVariants = 48;

// Two blocks of a narrow workshop model: GQA, tied embedding, every kind of op.
LlamaConfig smallModel() { return support::resizedConfig("workshop", {2, 64, 4, 2, 16, 128, 96}); }

struct Variant {
  std::string edits;  // what was done, "; "-separated
  std::string text;   // the .tl file
};

// Variant `seed`: one to three edits of the small model, printed as a .tl file.
Variant makeVariant(mlir::MLIRContext &context, uint64_t seed) {
  auto module = buildLlamaModule(context, smallModel());
  std::mt19937_64 random(seed);
  Variant variant;
  for (int edits = 1 + int(random() % 3), tries = 0; edits > 0 && tries < 20; ++tries) {
    mlir::OwningOpRef<mlir::ModuleOp> copy(module->clone());
    std::string what = support::mutateModel(*copy, random);
    if (what.empty()) continue;
    module = std::move(copy);
    variant.edits += (variant.edits.empty() ? "" : "; ") + what;
    --edits;
  }
  variant.text = printModule(*module);
  return variant;
}

// A level's Program, or the diagnostics that refused it.
struct Compiled {
  std::optional<Program> program;
  std::string errors;
};

Compiled compileVariant(mlir::MLIRContext &context, const Variant &variant, int level) {
  Compiled compiled;
  mlir::ScopedDiagnosticHandler collect(&context, [&](mlir::Diagnostic &diagnostic) {
    compiled.errors += diagnostic.str() + "\n";
    return mlir::success();
  });
  try {
    auto module = mlir::parseSourceString<mlir::ModuleOp>(variant.text, &context);
    if (!module) return compiled;
    CompileOptions options{level, 2, 8, "f32"};
    if (mlir::failed(optimizeModule(*module, options))) return compiled;
    auto program = buildProgram(*module, options);
    if (mlir::succeeded(program)) compiled.program = std::move(*program);
  } catch (const Error &error) {
    compiled.errors += error.what();
  }
  return compiled;
}

TEST(Differential, VariantsRunAtEveryLevelWithO0sResults) {
  std::unique_ptr<mlir::MLIRContext> owned = support::makeContext();
  mlir::MLIRContext &context = *owned;
  auto cpu = createCpuBackend(2);
  std::map<std::string, std::string> kernels;  // distinct source -> entry
  int ranAtO0 = 0;
  std::map<std::string, int> openSeen;  // variants failing with an open finding's message
  for (uint64_t seed = 0; seed < kVariants; ++seed) {
    Variant variant = makeVariant(context, seed);
    SCOPED_TRACE(::testing::Message() << "variant " << seed << ": " << variant.edits << "\n" << variant.text);
    std::vector<ForwardResult> results;
    for (int level = 0; level <= 3; ++level) {
      Compiled compiled = compileVariant(context, variant, level);
      if (level == 0 && !compiled.program) break;  // a variant O0 refuses asks nothing of the others
      if (!compiled.program) {
        auto open = std::find_if(support::openFindings().begin(), support::openFindings().end(),
                                 [&](const support::OpenFinding &f) { return compiled.errors.find(f.message) != std::string::npos; });
        if (open != support::openFindings().end()) ++openSeen[open->message];
        else ADD_FAILURE() << "O0 compiles it, O" << level << " does not:\n" << compiled.errors;
        results.clear();
        break;
      }
      Weights weights = Weights::random(compiled.program->parameters, 100 + seed);
      cpu->load(*compiled.program, weights);
      results.push_back(cpu->forward(randomTokenIds(*compiled.program, 200 + seed)));
      for (const Kernel &kernel : compiled.program->kernels) kernels.emplace(kernel.source, kernel.entry);
    }
    if (results.empty()) continue;
    ++ranAtO0;
    const ForwardResult &o0 = results[0];
    bool finite = std::all_of(o0.logits.data.begin(), o0.logits.data.end(), [](float x) { return std::isfinite(x); });
    if (!finite) continue;  // an edit that overflows: nothing to compare
    for (int level = 1; level <= 3; ++level) {
      const ForwardResult &result = results[size_t(level)];
      EXPECT_LE(relativeError(result.logits.data, o0.logits.data), 1e-4) << "O" << level << " vs O0";
      EXPECT_NEAR(result.loss, o0.loss, 1e-3 * std::max(1.0f, std::fabs(o0.loss))) << "O" << level << " vs O0";
    }
  }
  std::printf("%d of %d variants ran at O0 and were compared at every level; %zu distinct kernels\n", ranAtO0,
              kVariants, kernels.size());
  EXPECT_GE(ranAtO0, kVariants / 2) << "most variants must be valid models, or the test tests little";
  for (const support::OpenFinding &finding : support::openFindings()) {
    std::printf("open finding, %d variants: %s\n", openSeen[finding.message], finding.what);
    EXPECT_GT(openSeen[finding.message], 0) << "no variant shows '" << finding.message
                                            << "' any more: remove it from support::openFindings()";
  }

  // The GPU code of every level builds, with both vendors' run-time compilers.
  std::vector<JitSource> sources;
  for (const auto &[source, entry] : kernels) sources.push_back({entry, source});
  for (std::string arch : {"sm_90a", "gfx90a"}) {
    std::unique_ptr<JitCompiler> compiler = arch == "gfx90a" ? createHiprtcCompiler() : createNvrtcCompiler();
    JitOptions options;
    options.arch = arch;
    options.useCache = false;
    options.progress = false;
    std::vector<std::string> binaries = jitCompileAll(*compiler, sources, options);
    for (size_t i = 0; i < binaries.size(); ++i) EXPECT_FALSE(binaries[i].empty()) << sources[i].entry << " " << arch;
  }
}

} // namespace
} // namespace tlc
