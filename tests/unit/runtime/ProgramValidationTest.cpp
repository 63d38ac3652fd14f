// The Program validator: everything a backend relies on is checked at load, and each
// message names the JSON path of the fault.
#include <gtest/gtest.h>

#include <limits>

#include "TestUtil.h"
#include "runtime/MemoryPlanner.h"
#include "runtime/OpKind.h"
#include "runtime/Program.h"

namespace tlc {
namespace {

using test::errorMessage;
using test::makeOp;

constexpr int64_t kBatch = 2, kSeq = 3, kVocab = 7, kHidden = 4;

// embedding -> rmsnorm (local) -> linear -> logits -> cross_entropy, planned.
Program validProgram(int64_t kHidden = tlc::kHidden) {
  test::ProgramBuilder builder(kBatch, kSeq, kVocab);
  int ids = builder.value("ids", DType::I32, {kBatch, kSeq}, Storage::Input);
  int table = builder.weight("embed", {kVocab, kHidden}, {{"model.embed_tokens.weight", {kVocab, kHidden}}});
  int gain = builder.weight("norm", {kHidden}, {{"model.norm.weight", {kHidden}}}, "ones");
  int x = builder.value("x", DType::F32, {kBatch, kSeq, kHidden}, Storage::Activation);
  int h = builder.value("h", DType::F32, {kBatch, kSeq, kHidden}, Storage::Local);
  int logits = builder.value("logits", DType::F32, {kBatch, kSeq, kVocab}, Storage::Output);
  int loss = builder.value("loss", DType::F32, {}, Storage::Output);
  builder.kernel("tl_embedding", {makeOp("embedding", {table, ids}, {x})});
  builder.kernel("tl_head", {makeOp("rmsnorm", {x, gain}, {h}, {{"eps", 1e-5}}),
                             makeOp("linear", {h, table}, {logits})});
  builder.kernel("tl_loss", {makeOp("cross_entropy", {logits, ids}, {loss})});
  planMemory(builder.program());
  return builder.program();
}

std::string invalid(const Program &program) {
  return errorMessage([&] { validateProgram(program); });
}

TEST(ProgramValidation, AValidProgramPasses) { validateProgram(validProgram()); }

TEST(ProgramValidation, DataflowReadsOnlyWhatIsWritten) {
  Program readsLater = validProgram();
  std::swap(readsLater.kernels[0], readsLater.kernels[1]);  // the head before the embedding
  EXPECT_EQ(invalid(readsLater),
            "invalid program: kernels[0].ops[0].operands[0]: 'rmsnorm' reads value 3 ('x') before "
            "anything writes it");

  Program writtenTwice = validProgram();
  writtenTwice.kernels.push_back(writtenTwice.kernels[0]);
  EXPECT_CONTAINS(invalid(writtenTwice),
                  "kernels[3].ops[0].results[0]: value 3 ('x') is written again (first by kernels[0].ops[0])");

  Program inPlace = validProgram();
  inPlace.kernels[1].ops[0].results[0] = 3;  // rmsnorm writing its own input
  inPlace.kernels[1].outputs.push_back(3);
  EXPECT_CONTAINS(invalid(inPlace), "'rmsnorm' writes value 3 ('x') in place of its own operand");
}

TEST(ProgramValidation, ArenaPlacementIsAlignedInRangeAndDisjoint) {
  Program misaligned = validProgram();
  misaligned.values[3].offset += 4;
  EXPECT_CONTAINS(invalid(misaligned), "values[3].offset: ");
  EXPECT_CONTAINS(invalid(misaligned), "is not a multiple of 256");

  Program outside = validProgram();
  outside.values[5].offset = std::numeric_limits<int64_t>::max() - 255;  // wraps if added blindly
  EXPECT_CONTAINS(invalid(outside), "ends past the arena of");

  // x and logits are alive together (the head reads one and writes the other).
  Program overlapping = validProgram();
  overlapping.values[5].offset = overlapping.values[3].offset;
  EXPECT_CONTAINS(invalid(overlapping), "are alive at the same time but share bytes");
}

TEST(ProgramValidation, DtypesMatchHowOpsUseValues) {
  Program floatIds = validProgram();
  floatIds.values[0].dtype = DType::F32;
  EXPECT_CONTAINS(invalid(floatIds), "values[0].dtype: value 0 ('ids') is f32: token ids");

  Program idsAsFloats = validProgram();
  idsAsFloats.values[3].dtype = DType::I32;
  EXPECT_CONTAINS(invalid(idsAsFloats), "values[3].dtype");
}

TEST(ProgramValidation, AttributesAndShapesAsTheVerifierChecksThem) {
  for (double eps : {0.0, -1e-5, 1e-45, std::numeric_limits<double>::infinity(),
                     std::numeric_limits<double>::quiet_NaN()}) {
    Program program = validProgram();
    program.kernels[1].ops[0].attrs["eps"] = eps;
    EXPECT_CONTAINS(invalid(program), "kernels[1].ops[0] ('rmsnorm'): attribute 'eps' is ");
  }
  Program wrongShape = validProgram();
  wrongShape.values[5].shape = {kBatch, kSeq, kVocab + 1};
  wrongShape.kernels.pop_back();  // keep the loss out of it
  wrongShape.outputs.pop_back();
  EXPECT_CONTAINS(invalid(wrongShape), "kernels[1].ops[1].results[0]: value 5 ('logits') has shape 2x3x8, "
                                       "but kernels[1].ops[1] ('linear') computes 2x3x7");

  Program zeroDim = validProgram();
  zeroDim.values[4].shape = {kBatch, 0, kHidden};
  EXPECT_CONTAINS(invalid(zeroDim), "values[4].shape: shape 2x0x4 must have positive dimensions");

  Program huge = validProgram();
  huge.values[4].shape = {int64_t(1) << 32, int64_t(1) << 32, 2};
  EXPECT_CONTAINS(invalid(huge), "values[4].shape: shape 4294967296x4294967296x2 must have positive "
                                 "dimensions and at most 2^40 elements");
}

TEST(ProgramValidation, TokenIdsIndexWholeTables) {
  Program narrowTable = validProgram();
  narrowTable.vocab = kVocab + 1;  // ids up to 7, a table of 7 rows
  EXPECT_CONTAINS(invalid(narrowTable), "kernels[0].ops[0].operands[0]: 'embedding' indexes 7 rows with token ids up to vocab - 1 = 7");
}

TEST(ProgramValidation, KernelFieldsStayInRange) {
  Program threads = validProgram();
  threads.kernels[2].launch["cuda"] = {1, 4096, 0};
  EXPECT_EQ(invalid(threads), "invalid program: kernels[2].launch.cuda.block_threads: 4096 is outside 1..1024");
  Program grid = validProgram();
  grid.kernels[2].launch["hip"] = {int64_t(1) << 32, 256, 0};  // would be truncated to 0 blocks
  EXPECT_CONTAINS(invalid(grid), "kernels[2].launch.hip.grid_blocks: 4294967296 is outside 1..2147483647");
  Program workspace = validProgram();
  workspace.kernels[0].workspaceBytes = 64;  // the program's workspace is 0
  EXPECT_EQ(invalid(workspace), "invalid program: kernels[0].workspace_bytes: 64 is outside 0..0");
  Program sync = validProgram();
  sync.kernels[1].syncWords = int64_t(1) << 62;  // bytes would wrap when allocated
  EXPECT_EQ(invalid(sync), "invalid program: kernels[1].sync_words: 4611686018427387904 is outside 0..2147483647");
  Program flops = validProgram();
  flops.kernels[0].flops = -1;
  EXPECT_CONTAINS(invalid(flops), "kernels[0].flops: -1 is outside");
  Program total = validProgram();
  total.kernels[0].flops = total.kernels[1].flops = std::numeric_limits<int64_t>::max();
  EXPECT_CONTAINS(invalid(total), "total flops or min_bytes overflow");
}

// A weight a launch reads as bf16 parts (KernelLaunch::bf16PartsInputs) is an f32 weight
// among the kernel's inputs, of whole blocks of 32 elements, that no training step updates.
TEST(ProgramValidation, WeightsReadAsBf16PartsAreWholeBlocksAmongTheInputs) {
  const int table = 1, x = 3;
  Program parts = validProgram(32);  // a table of 7 x 32
  parts.kernels[1].launch["cuda:sm_90a"] = {1, 128, 0, {table}};
  validateProgram(parts);
  Program odd = validProgram();  // 7 x 4
  odd.kernels[1].launch["cuda:sm_90a"] = {1, 128, 0, {table}};
  EXPECT_EQ(invalid(odd), "invalid program: kernels[1].launch.cuda:sm_90a.bf16_parts_inputs[0]: value 1 ('embed') is "
                          "not an f32 weight of whole blocks of 32 elements");
  Program activation = validProgram(32);
  activation.kernels[1].launch["cuda:sm_90a"] = {1, 128, 0, {x}};
  EXPECT_CONTAINS(invalid(activation), "value 3 ('x') is not an f32 weight");
  Program elsewhere = validProgram(32);
  elsewhere.kernels[2].launch["hip"] = {1, 128, 0, {table}};  // the loss does not read the table
  EXPECT_EQ(invalid(elsewhere), "invalid program: kernels[2].launch.hip.bf16_parts_inputs[0]: value 1 is not among "
                                "the kernel's inputs");
  Program training = test::trainingStep(2, 4, 8, 4);  // a table of 8 x 4, updated by AdamW
  training.kernels[1].launch["cuda:sm_90a"] = {1, 128, 0, {table}};
  EXPECT_CONTAINS(invalid(training), "value 1 ('embed') is updated by the training step, so it cannot be kept as bf16 parts");
}

TEST(ProgramValidation, TheCallingConventionHolds) {
  Program noInput = validProgram();
  noInput.inputs.clear();
  EXPECT_CONTAINS(invalid(noInput), "inputs: lists 0 values; a forward takes exactly one");
  Program tooManyTokens = validProgram();
  tooManyTokens.batch = int64_t(1) << 40;
  EXPECT_CONTAINS(invalid(tooManyTokens), "batch: batch 1099511627776 x seq_len 3 exceeds the limit");
  Program noLogits = validProgram();
  noLogits.outputs.clear();
  EXPECT_CONTAINS(invalid(noLogits), "outputs: a forward returns the logits");
}

TEST(ProgramValidation, StringsAreValidUtf8) {
  // Found by fuzz-tl: a weight key with a stray byte made writing program.json throw.
  Program badName = validProgram();
  badName.values[3].name = "x\xff";
  EXPECT_EQ(invalid(badName), "invalid program: values[3].name: is not valid UTF-8");
  Program badAttr = validProgram();
  badAttr.kernels[1].ops[0].attrs["note"] = std::string("\xc0\x80");  // an overlong NUL
  EXPECT_EQ(invalid(badAttr), "invalid program: kernels[1].ops[0].attrs.note: is not valid UTF-8");
  Program badKey = validProgram();
  badKey.parameters[0].key = "model.\xed\xa0\x80";  // a UTF-16 surrogate
  EXPECT_EQ(invalid(badKey), "invalid program: parameters[0].key: is not valid UTF-8");
}

TEST(ProgramValidation, JsonPathsReachTheFileAndIntegersAreNotTruncated) {
  std::string text = programToJson(validProgram());
  std::string bigId = text;
  bigId.replace(bigId.find("\"id\": 3"), 7, "\"id\": 4294967299");
  EXPECT_CONTAINS(errorMessage([&] { programFromJson(bigId, "p.json"); }),
                  "program 'p.json': values[3].id: 4294967299 is out of range");
  std::string duplicate = text;
  duplicate.replace(duplicate.find("\"batch\": 2"), 10, "\"batch\": 2, \"batch\": 1");
  EXPECT_CONTAINS(errorMessage([&] { programFromJson(duplicate, "p.json"); }),
                  "program 'p.json': malformed JSON: duplicate key \"batch\"");
  std::string deep = "{\"model\": " + std::string(100, '[') + std::string(100, ']') + "}";
  EXPECT_CONTAINS(errorMessage([&] { programFromJson(deep, "p.json"); }), "nested deeper than 64 levels");
  std::string edited = text;
  edited.replace(edited.find("\"eps\": {\"f\": 1e-05}"), 19, "\"eps\": {\"f\": \"nan\"}");
  EXPECT_CONTAINS(errorMessage([&] { programFromJson(edited, "p.json"); }),
                  "program 'p.json': invalid program: kernels[1].ops[0] ('rmsnorm'): attribute 'eps' is nan");
}

TEST(MemoryPlanner, EveryPlanPassesThePlacementCheck) {
  Program program = validProgram();
  for (int64_t alignment : {256, 1024}) {
    planMemory(program, alignment);
    checkPlacement(program);
  }
}

// A training step updates parameters (tl.adamw) and only a training step does; each
// at most once, from a gradient of its shape.
TEST(ProgramValidation, OnlyATrainingStepUpdatesParameters) {
  validateProgram(test::trainingStep());

  Program forward = test::trainingStep();
  forward.kind = ProgramKind::Forward;
  EXPECT_EQ(invalid(forward), "invalid program: kernels[5].ops[0]: a forward program updates no parameter: 'adamw' "
                              "belongs to a train_step program");

  Program unknownKey = test::trainingStep();
  unknownKey.kernels[5].ops[0].attrs["key"] = std::string("model.norm.weight");
  EXPECT_CONTAINS(invalid(unknownKey), "kernels[5].ops[0].attrs.key: 'model.norm.weight' is not a parameter");

  Program twice = test::trainingStep();
  twice.kernels[5].ops.push_back(twice.kernels[5].ops[0]);
  EXPECT_CONTAINS(invalid(twice), "kernels[5].ops[1].attrs.key: 'model.embed_tokens.weight' is updated twice");

  Program nothing = test::trainingStep();
  nothing.kernels.pop_back();
  EXPECT_EQ(invalid(nothing), "invalid program: kind: a train_step program updates at least one parameter (op 'adamw')");

  Program wrongShape = test::trainingStep(2, 4, 6, 3);
  wrongShape.parameters[0].shape = {3, 6};
  EXPECT_CONTAINS(invalid(wrongShape), "weight value 1 ('embed') has shape 6x3, which parameter");
}

// The optimizer's kernel may open with the concat_grad that splits a merged gradient into
// the pieces its updates read (an update is what makes it the optimizer's), and each piece
// starts where the rows before it end.
TEST(ProgramValidation, TheOptimizersKernelMayHoldTheSplitsOfMergedGradients) {
  test::ProgramBuilder builder(kBatch, kSeq, kVocab);
  int merged = builder.value("merged", DType::F32, {5, kHidden}, Storage::Activation);
  int q = builder.value("q", DType::F32, {3, kHidden}, Storage::Local);
  int k = builder.value("k", DType::F32, {2, kHidden}, Storage::Local);
  Kernel optimizer;
  optimizer.ops = {makeOp("concat_grad", {merged}, {q, k}, {{"sizes", std::vector<int64_t>{3, 2}}}),
                   makeOp("adamw", {q}, {}), makeOp("adamw", {k}, {})};
  EXPECT_TRUE(updatesParameters(optimizer));
  EXPECT_EQ(updateCount(optimizer), 2);
  const Program &program = builder.program();
  EXPECT_EQ(pieceOffset(program, optimizer.ops[0], q), 0);
  EXPECT_EQ(pieceOffset(program, optimizer.ops[0], k), 3 * kHidden);
  EXPECT_EQ(pieceOffset(program, optimizer.ops[0], merged), -1);
  optimizer.ops.resize(1);
  EXPECT_FALSE(updatesParameters(optimizer));
}

TEST(ProgramValidation, BackwardOpsFollowTheirRules) {
  Program badLr = test::trainingStep();
  badLr.kernels[5].ops[0].attrs["lr"] = -1.0;
  EXPECT_CONTAINS(invalid(badLr), "kernels[5].ops[0] ('adamw'): attribute 'lr' is -1; it must be a positive normal f32");

  Program shortSequence = test::trainingStep(2, 1, 6, 3);
  EXPECT_CONTAINS(invalid(shortSequence), "('cross_entropy_grad'): a sequence of 1 token predicts nothing");

  // cross_entropy_grad's ids index the logits' vocabulary: it must hold every id.
  Program narrow = test::trainingStep();
  narrow.vocab = 9;
  EXPECT_CONTAINS(invalid(narrow), "'embedding' indexes 6 rows with token ids up to vocab - 1 = 8");
}

} // namespace
} // namespace tlc

namespace tlc {
namespace {

// A weight whose columns a 1-D parameter scales at load (a folded RMSNorm gain): the
// parameter must exist and fit the columns, only in a forward, and it survives JSON.
TEST(ProgramValidation, ColumnScalesNameAFittingParameterOfAForward) {
  Program scaled = validProgram();
  scaled.values[1].columnScaleKey = "model.norm.weight";  // embed [7, 4] by norm [4]
  validateProgram(scaled);
  EXPECT_EQ(programFromJson(programToJson(scaled)).values[1].columnScaleKey, "model.norm.weight");

  Program unknown = scaled;
  unknown.values[1].columnScaleKey = "model.gain";
  EXPECT_CONTAINS(invalid(unknown), "values[1].column_scale_key: weight value 1 ('embed') is scaled by 'model.gain', "
                                    "which is not a parameter");
  Program misfit = scaled;
  misfit.values[1].columnScaleKey = "model.embed_tokens.weight";
  EXPECT_CONTAINS(invalid(misfit), "cannot have its columns scaled by 'model.embed_tokens.weight' of shape 7x4");
  Program notWeight = validProgram();
  notWeight.values[3].columnScaleKey = "model.norm.weight";  // x, an activation
  EXPECT_CONTAINS(invalid(notWeight), "values[3].column_scale_key: value 3 ('x') is not a weight");

  Program training = test::trainingStep();
  training.values[1].columnScaleKey = training.values[1].weightKeys[0];  // refused before its shape is looked at
  EXPECT_CONTAINS(invalid(training), "which a training step cannot keep up to date as its parameters change");
}

} // namespace
} // namespace tlc

namespace tlc {
namespace {

// A kernel's source carries what it was generated for; a Program that gives the kernel
// other dtypes, sizes, workspace or launch shape is refused, naming both.
TEST(ProgramValidation, KernelSourcesAgreeWithTheirKernels) {
  Program program = validProgram();
  for (Kernel &kernel : program.kernels) {
    kernel.entry = kernel.name;
    kernel.launch["cuda"] = {2, 128, 0};
    kernel.source = kKernelSignaturePrefix + kernelSignature(program, kernel) + "\nextern \"C\" __global__ void f() {}";
  }
  validateProgram(program);
  EXPECT_EQ(kernelSignature(program, program.kernels[0]),
            "in f32[7,4] i32[2,3]; out f32[2,3,4]; workspace 0; sync 0; launch cuda 2x128+0");

  Program bf16 = program;
  bf16.values[size_t(bf16.kernels[0].outputs[0])].dtype = DType::BF16;
  EXPECT_CONTAINS(invalid(bf16), "kernels[0].source: was generated for 'in f32[7,4] i32[2,3]; out f32[2,3,4]; "
                                 "workspace 0; sync 0; launch cuda 2x128+0', but the program gives the kernel 'in "
                                 "f32[7,4] i32[2,3]; out bf16[2,3,4];");
  Program wider = program;
  wider.kernels[2].launch["cuda"].gridBlocks = 3;
  EXPECT_CONTAINS(invalid(wider), "kernels[2].source: was generated for");
  Program scratch = program;
  scratch.workspaceBytes = 64;
  scratch.kernels[1].workspaceBytes = 64;
  EXPECT_CONTAINS(invalid(scratch), "kernels[1].source: was generated for");
  Program unsigned_ = program;
  unsigned_.kernels[1].source = "extern \"C\" __global__ void f() {}";
  EXPECT_CONTAINS(invalid(unsigned_), "kernels[1].source: has no signature line");
}

} // namespace
} // namespace tlc
