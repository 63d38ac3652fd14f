// What the compiler hands the runtime: kernels, parameters, memory plan.
#include "TestSupport.h"

#include "runtime/MemoryPlanner.h"
#include "runtime/OpKind.h"

#include "mlir/IR/Diagnostics.h"

#include <map>

using namespace tlc;

namespace {

Program workshopAtO0() { return support::compileConfig(*presetConfig("workshop"), {0, 8, 128, "f32"}); }

TEST(Lowering, WorkshopParametersMatchTheModelCard) {
  Program program = workshopAtO0();
  int64_t count = 0;
  for (const Parameter &p : program.parameters) {
    int64_t n = 1;
    for (int64_t d : p.shape) n *= d;
    count += n;
  }
  EXPECT_EQ(count, 31977984);  // TINYLLAMA.md: 31.98M
  EXPECT_EQ(program.parameters.size(), 1u + 8u * 9u + 1u);
  // Tied: the embedding table is one weight value read by two kernels.
  int embeddingValues = 0;
  for (const Value &v : program.values)
    if (v.storage == Storage::Weight && v.weightKeys == std::vector<std::string>{"model.embed_tokens.weight"})
      ++embeddingValues;
  EXPECT_EQ(embeddingValues, 1);
}

TEST(Lowering, O0IsOneKernelPerPrimitiveOp) {
  Program program = workshopAtO0();
  std::map<int, int> perLayer;
  for (const Kernel &k : program.kernels) {
    ++perLayer[k.layer];
    EXPECT_EQ(k.ops.size(), 1u) << k.name;
    EXPECT_EQ(k.name.rfind(std::string("tl_") + opKindName(k.ops[0].kind) + "_f32", 0), 0u) << k.name;
  }
  // norm, q, k, v, 2 rope, 3 transpose, 2 repeat_kv, QKᵀ, scale, mask, softmax, PV,
  // transpose, o, add, norm, gate, up, silu, mul, down, add
  for (int layer = 0; layer < 8; ++layer) EXPECT_EQ(perLayer[layer], 26) << "layer " << layer;
  EXPECT_EQ(perLayer[-1], 4);  // embedding, final norm, output projection, loss
  EXPECT_EQ(program.kernels.front().ops[0].kind, OpKind::embedding);
  EXPECT_EQ(program.kernels.back().ops[0].kind, OpKind::cross_entropy);
}

TEST(Lowering, KernelsCarryTheirCost) {
  Program program = workshopAtO0();
  int64_t flops = 0;
  for (const Kernel &k : program.kernels) {
    flops += k.flops;
    EXPECT_GT(k.minBytes, 0) << k.name;
  }
  // TINYLLAMA.md: about 65 GFLOP of matrix work plus ~1 GFLOP attention per forward.
  EXPECT_GT(flops, 64e9);
  EXPECT_LT(flops, 70e9);
  auto q = std::find_if(program.kernels.begin(), program.kernels.end(),
                        [](const Kernel &k) { return k.name == "tl_linear_f32_1024x512x512"; });
  ASSERT_NE(q, program.kernels.end());
  EXPECT_EQ(q->flops, 2LL * 1024 * 512 * 512);
  EXPECT_EQ(q->minBytes, (1024 * 512 + 512 * 512 + 1024 * 512) * 4);
}

TEST(Lowering, MemoryPlanReusesActivations) {
  Program program = workshopAtO0();
  EXPECT_GT(program.arenaBytes, 0);
  // The S×S scores of one block are the largest activations: 8 x 8 x 128 x 128 x 4 B = 4 MiB.
  EXPECT_LT(program.arenaBytes, unplannedBytes(program) / 10);
}

TEST(Lowering, Bf16StorageReachesEveryFloatValue) {
  Program program = support::compileConfig(support::smallConfig("workshop"), {0, 1, 8, "bf16"});
  EXPECT_EQ(program.dtype, DType::BF16);
  for (const Value &v : program.values) {
    if (v.storage == Storage::Input) EXPECT_EQ(v.dtype, DType::I32);
    else if (v.shape.empty()) EXPECT_EQ(v.dtype, DType::F32) << v.name;  // the loss
    else EXPECT_EQ(v.dtype, DType::BF16) << v.name;
  }
}

// Anything tlc writes, the runtime loads: every level of both models, in both dtypes,
// passes validation and survives program.json unchanged.
TEST(Lowering, EveryLevelPassesValidationAndRoundTrips) {
  for (const char *preset : {"workshop", "tinyllama-1.1b"})
    for (const char *dtype : {"f32", "bf16"})
      for (int level = 0; level <= 3; ++level) {
        Program program = support::compileConfig(support::smallConfig(preset), {level, 2, 8, dtype});
        std::string where = std::string(preset) + " " + dtype + " O" + std::to_string(level);
        EXPECT_NO_THROW(validateProgram(program)) << where;
        std::string text = programToJson(program);
        EXPECT_EQ(programToJson(programFromJson(text, where)), text) << where;
      }
}

// A model the verifier accepts but the runtime cannot run is refused at compile time,
// so tlc never writes a Program that tl-run would reject.
TEST(Lowering, AModelBreakingTheRuntimeContractIsAnError) {
  auto context = support::makeContext();
  support::LastDiagnostic diagnostic(*context);
  auto module = buildLlamaModule(*context, support::smallConfig("workshop"));
  CompileOptions options{0, 1, 4, "f32"};
  ASSERT_TRUE(mlir::succeeded(optimizeModule(*module, options)));
  // Make the loss read a second i32 input instead of the token ids: two inputs.
  mlir::func::FuncOp forward = getForwardFunction(*module);
  forward.getBody().front().addArgument(forward.getArgument(0).getType(), forward.getLoc());
  forward.setType(mlir::FunctionType::get(context.get(), forward.getBody().front().getArgumentTypes(),
                                          forward.getResultTypes()));
  EXPECT_TRUE(mlir::failed(buildProgram(*module, options)));
  EXPECT_NE(diagnostic.message.find("the model does not lower to a runnable Program: invalid program: inputs: "
                                    "lists 2 values; a forward takes exactly one"),
            std::string::npos)
      << diagnostic.message;
}

TEST(Specialize, RejectsSequencesBeyondTheModelLimit) {
  auto context = support::makeContext();
  support::LastDiagnostic diagnostic(*context);
  auto module = buildLlamaModule(*context, support::smallConfig("workshop"));
  EXPECT_TRUE(mlir::failed(optimizeModule(*module, {0, 1, 4096, "f32"})));
  EXPECT_NE(diagnostic.message.find("exceeds the model's maximum of 2048"), std::string::npos) << diagnostic.message;
}

} // namespace
