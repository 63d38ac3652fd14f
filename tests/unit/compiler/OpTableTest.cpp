// The runtime's op kinds (runtime/Ops.def) and the tl dialect describe the same ops: every
// kind is a tl op whose verifier checks it against the runtime's rule for it, and every
// other tl op is one the runtime never sees as itself (a kernel made of regions, a weight,
// a terminator, a weight scaled at load time), lowered into the ops it contains.
#include "compiler/TlDialect.h"
#include "runtime/OpKind.h"

#include "mlir/IR/MLIRContext.h"
#include "mlir/IR/OperationSupport.h"

#include <gtest/gtest.h>

#include <set>
#include <string>

namespace {

std::set<std::string> tlOps(mlir::MLIRContext &context) {
  std::set<std::string> names;
  for (mlir::RegisteredOperationName name : context.getRegisteredOperations())
    if (name.getDialectNamespace() == "tl") names.insert(name.stripDialect().str());
  return names;
}

TEST(OpTable, EveryOpKindIsATlOpThatTheVerifierChecksAgainstItsRule) {
  mlir::MLIRContext context;
  context.loadDialect<tl::TlDialect>();
  std::set<std::string> dialect = tlOps(context);
  ASSERT_FALSE(tlc::allOpKinds().empty());
  for (tlc::OpKind kind : tlc::allOpKinds()) {
    std::string op = tlc::opKindName(kind);
    EXPECT_TRUE(dialect.count(op)) << "runtime/Ops.def lists '" << op << "', which is no tl op";
    auto name = mlir::RegisteredOperationName::lookup("tl." + op, &context);
    ASSERT_TRUE(name.has_value()) << op;
    EXPECT_TRUE(name->hasTrait<tl::OpTrait::RuntimeRules>()) << "tl." << op << " is not checked against its rule";
    EXPECT_EQ(tlc::findOpKind(op), kind) << op << " names another kind";
  }
}

TEST(OpTable, EveryTlOpDefinesItsCost) {
  mlir::MLIRContext context;
  context.loadDialect<tl::TlDialect>();
  for (const std::string &op : tlOps(context)) {
    auto name = mlir::RegisteredOperationName::lookup("tl." + op, &context);
    ASSERT_TRUE(name.has_value()) << op;
    EXPECT_TRUE(name->hasInterface<tl::CostOpInterface>()) << "tl." << op << " has no cost (compiler/OpCosts.cpp)";
  }
}

TEST(OpTable, EveryOtherTlOpIsLoweredIntoOpsTheRuntimeKnows) {
  mlir::MLIRContext context;
  context.loadDialect<tl::TlDialect>();
  // Kernels made of regions (their bodies are ops with kinds), parameters, terminators,
  // scale_columns, which a Program records as a weight scaled when it is loaded, and
  // kv_cache, which it records as state the backend keeps.
  const std::set<std::string> structural = {"block",         "fused_elementwise", "fused_flash_attention_grad",
                                            "fused_linear",  "fused_linear_grad_input", "weight",
                                            "scale_columns", "yield",           "kv_cache"};
  std::set<std::string> dialect = tlOps(context);
  for (const std::string &op : dialect) {
    bool hasKind = tlc::findOpKind(op).has_value();
    EXPECT_NE(hasKind, structural.count(op) != 0)
        << "tl." << op << (hasKind ? " is listed as structural but has an op kind"
                                   : " has no op kind (runtime/Ops.def) and is not structural");
  }
  for (const std::string &op : structural) EXPECT_TRUE(dialect.count(op)) << op << " is no tl op";
}

} // namespace
