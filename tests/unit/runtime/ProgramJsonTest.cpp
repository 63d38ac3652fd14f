// Program: JSON round-trip, error messages for bad input, validation, attribute access.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <limits>

#include "TestUtil.h"
#include "runtime/MemoryPlanner.h"
#include "runtime/OpKind.h"
#include "runtime/Program.h"

namespace tlc {
namespace {

using test::errorMessage;
using test::makeOp;

// Every storage class and every attribute kind, including awkward doubles and
// attributes no op rule reads (they round-trip untouched), in a valid Program.
Program programWithEverything() {
  test::ProgramBuilder builder(2, 3, 11, DType::BF16);
  int ids = builder.value("ids", DType::I32, {2, 3}, Storage::Input);
  int table = builder.weight("embed", {11, 4}, {{"model.embed_tokens.weight", {11, 4}}});
  int merged = builder.weight("qkv", {12, 4}, {{"q.weight", {4, 4}}, {"k.weight", {8, 4}}});
  int x = builder.value("x", DType::BF16, {2, 3, 4}, Storage::Activation);
  int gain = builder.weight("norm", {4}, {{"model.norm.weight", {4}}}, "ones");
  int heads = builder.view("x.heads", x, {2, 3, 1, 4});
  int local = builder.value("h", DType::F32, {2, 3, 12}, Storage::Local);
  int parts = builder.value("h.q", DType::F32, {2, 3, 4}, Storage::Local);
  int rest = builder.value("h.kv", DType::F32, {2, 3, 8}, Storage::Local);
  int roped = builder.value("roped", DType::F32, {2, 3, 1, 4}, Storage::Local);
  int flat = builder.value("roped.flat", DType::F32, {2, 3, 4}, Storage::Local);
  int sum = builder.value("sum", DType::F32, {2, 3, 4}, Storage::Local);
  int normed = builder.value("normed", DType::F32, {2, 3, 4}, Storage::Local);
  int logits = builder.value("logits", DType::BF16, {2, 3, 11}, Storage::Output);
  int loss = builder.value("loss", DType::F32, {}, Storage::Output);
  builder.kernel("tl_embedding", {makeOp("embedding", {table, ids}, {x})});
  builder.kernel(
      "tl_fused",
      {
          makeOp("linear", {x, merged}, {local}),
          makeOp("split", {local}, {parts, rest}, {{"sizes", std::vector<int64_t>{4, 8}}}),
          makeOp("rope", {heads}, {roped}, {{"theta", 10000.0}, {"style", std::string("half")}}),
          makeOp("merge_heads", {roped}, {flat}),
          makeOp("add", {flat, parts}, {sum}),
          makeOp("rmsnorm", {sum, gain}, {normed},
                 {{"eps", 1e-6},
                  {"big", int64_t(1) << 40},
                  {"negative", int64_t(-3)},
                  {"third", 1.0 / 3.0},
                  {"neg_inf", -std::numeric_limits<double>::infinity()},
                  {"empty", std::vector<int64_t>{}}}),
          makeOp("linear", {normed, table}, {logits}),
      });
  builder.kernel("tl_loss", {makeOp("cross_entropy", {logits, ids}, {loss})});
  Program &program = builder.program();
  program.optLevel = 2;
  program.pipeline = "tl-qkv-merge,tl-flash";
  program.kernels[1].flops = 123456789012;
  program.kernels[1].minBytes = 4096;
  program.kernels[1].layer = 3;
  program.sourceFile = "models/tiny.tl";
  program.sourceOps = {{4, 18, "%embedding = tl.embedding"}, {8, 15, "%q_proj = tl.linear"}, {9, 3, "tl.weight"}};
  program.kernels[0].origins = {{0, OriginRole::Computes}};
  program.kernels[1].origins = {{1, OriginRole::Computes}, {1, OriginRole::Gradient}, {2, OriginRole::Updates},
                                {0, OriginRole::Recomputes}};
  planMemory(program);
  return program;
}

void expectSamePrograms(const Program &a, const Program &b) {
  EXPECT_EQ(a.model, b.model);
  EXPECT_EQ(a.optLevel, b.optLevel);
  EXPECT_EQ(a.pipeline, b.pipeline);
  EXPECT_EQ(a.dtype, b.dtype);
  EXPECT_EQ(a.batch, b.batch);
  EXPECT_EQ(a.seqLen, b.seqLen);
  EXPECT_EQ(a.vocab, b.vocab);
  EXPECT_EQ(a.arenaBytes, b.arenaBytes);
  EXPECT_EQ(a.inputs, b.inputs);
  EXPECT_EQ(a.outputs, b.outputs);
  EXPECT_EQ(a.sourceFile, b.sourceFile);
  ASSERT_EQ(a.sourceOps.size(), b.sourceOps.size());
  for (size_t i = 0; i < a.sourceOps.size(); ++i) {
    EXPECT_EQ(a.sourceOps[i].line, b.sourceOps[i].line);
    EXPECT_EQ(a.sourceOps[i].column, b.sourceOps[i].column);
    EXPECT_EQ(a.sourceOps[i].text, b.sourceOps[i].text);
  }
  ASSERT_EQ(a.parameters.size(), b.parameters.size());
  for (size_t i = 0; i < a.parameters.size(); ++i) {
    EXPECT_EQ(a.parameters[i].key, b.parameters[i].key);
    EXPECT_EQ(a.parameters[i].shape, b.parameters[i].shape);
    EXPECT_EQ(a.parameters[i].init, b.parameters[i].init);
  }
  ASSERT_EQ(a.values.size(), b.values.size());
  for (size_t i = 0; i < a.values.size(); ++i) {
    const Value &x = a.values[i], &y = b.values[i];
    EXPECT_EQ(x.id, y.id);
    EXPECT_EQ(x.name, y.name);
    EXPECT_EQ(x.dtype, y.dtype);
    EXPECT_EQ(x.shape, y.shape);
    EXPECT_EQ(x.storage, y.storage);
    EXPECT_EQ(x.weightKeys, y.weightKeys);
    EXPECT_EQ(x.viewOf, y.viewOf);
    EXPECT_EQ(x.offset, y.offset);
  }
  ASSERT_EQ(a.kernels.size(), b.kernels.size());
  for (size_t k = 0; k < a.kernels.size(); ++k) {
    const Kernel &x = a.kernels[k], &y = b.kernels[k];
    EXPECT_EQ(x.name, y.name);
    EXPECT_EQ(x.inputs, y.inputs);
    EXPECT_EQ(x.outputs, y.outputs);
    EXPECT_EQ(x.flops, y.flops);
    EXPECT_EQ(x.minBytes, y.minBytes);
    EXPECT_EQ(x.layer, y.layer);
    ASSERT_EQ(x.origins.size(), y.origins.size());
    for (size_t o = 0; o < x.origins.size(); ++o) {
      EXPECT_EQ(x.origins[o].op, y.origins[o].op);
      EXPECT_EQ(x.origins[o].role, y.origins[o].role);
    }
    ASSERT_EQ(x.ops.size(), y.ops.size());
    for (size_t o = 0; o < x.ops.size(); ++o) {
      EXPECT_EQ(x.ops[o].kind, y.ops[o].kind);
      EXPECT_EQ(x.ops[o].operands, y.ops[o].operands);
      EXPECT_EQ(x.ops[o].results, y.ops[o].results);
      EXPECT_EQ(x.ops[o].attrs, y.ops[o].attrs); // variant ==: same alternative, same value
    }
  }
}

TEST(ProgramJson, RoundTripKeepsEveryField) {
  Program program = programWithEverything();
  std::string text = programToJson(program);
  Program parsed = programFromJson(text, "roundtrip.json");
  expectSamePrograms(program, parsed);
  EXPECT_EQ(programToJson(parsed), text);
}

// A launch's weights read as bf16 parts round-trip, and a file's bad id names its path.
TEST(ProgramJson, LaunchesKeepTheWeightsTheyReadAsBf16Parts) {
  test::ProgramBuilder builder(2, 3, 8);
  int ids = builder.value("ids", DType::I32, {2, 3}, Storage::Input);
  int table = builder.weight("embed", {8, 32}, {{"model.embed_tokens.weight", {8, 32}}});
  int x = builder.value("x", DType::F32, {2, 3, 32}, Storage::Activation);
  int logits = builder.value("logits", DType::F32, {2, 3, 8}, Storage::Output);
  int loss = builder.value("loss", DType::F32, {}, Storage::Output);
  builder.kernel("tl_embedding", {makeOp("embedding", {table, ids}, {x})});
  builder.kernel("tl_head", {makeOp("linear", {x, table}, {logits})});
  builder.kernel("tl_loss", {makeOp("cross_entropy", {logits, ids}, {loss})});
  Program &program = builder.program();
  planMemory(program);
  program.kernels[1].entry = "tl_head";
  program.kernels[1].launch["cuda"] = {4, 128, 0};
  program.kernels[1].launch["cuda:sm_90a"] = {4, 128, 1024, {table}};
  const std::string text = programToJson(program);
  Program parsed = programFromJson(text, "parts.json");
  EXPECT_EQ(parsed.kernels[1].launch.at("cuda:sm_90a").bf16PartsInputs, std::vector<int>{table});
  EXPECT_TRUE(parsed.kernels[1].launch.at("cuda").bf16PartsInputs.empty());
  EXPECT_EQ(programToJson(parsed), text);
  std::string negative = text;
  const std::string field = "\"bf16_parts_inputs\": [" + std::to_string(table) + "]";
  ASSERT_NE(negative.find(field), std::string::npos) << text;
  negative.replace(negative.find(field), field.size(), "\"bf16_parts_inputs\": [-2]");
  EXPECT_CONTAINS(errorMessage([&] { programFromJson(negative, "parts.json"); }),
                  "kernels[1].launch.cuda:sm_90a.bf16_parts_inputs: -2 is not a value id");
}

// A training step says so ("kind"); a forward's file has no such field, as before.
TEST(ProgramJson, TrainingStepsKeepTheirKind) {
  Program step = test::trainingStep();
  planMemory(step);
  std::string text = programToJson(step);
  EXPECT_NE(text.find("\"kind\": \"train_step\""), std::string::npos);
  Program parsed = programFromJson(text, "step.json");
  EXPECT_EQ(parsed.kind, ProgramKind::TrainStep);
  EXPECT_EQ(programToJson(parsed), text);
  EXPECT_EQ(programToJson(programWithEverything()).find("\"kind\""), std::string::npos);

  std::string unknown = text;
  unknown.replace(unknown.find("\"train_step\""), 12, "\"inference\"");
  EXPECT_CONTAINS(errorMessage([&] { programFromJson(unknown, "p.json"); }),
                  "kind: unknown program kind 'inference' (expected forward, train_step, prefill or decode)");
}

// Provenance names an op of the source table and a known role, or the file is refused.
TEST(ProgramJson, OriginsNameSourceOpsAndRoles) {
  std::string text = programToJson(programWithEverything());
  EXPECT_CONTAINS(text, "\"origins\": [[1, \"computes\"], [1, \"gradient\"], [2, \"updates\"], [0, \"recomputes\"]]");
  auto replaced = [&](const std::string &from, const std::string &to) {
    std::string changed = text;
    return changed.replace(changed.find(from), from.size(), to);
  };
  std::string outOfRange = replaced("[2, \"updates\"]", "[7, \"updates\"]");
  EXPECT_CONTAINS(errorMessage([&] { programFromJson(outOfRange, "p.json"); }),
                  "kernels[1].origins[2]: refers to source op 7, but the program has 3");
  std::string badRole = replaced("\"updates\"", "\"guesses\"");
  EXPECT_CONTAINS(errorMessage([&] { programFromJson(badRole, "p.json"); }),
                  "kernels[1].origins[2][1]: unknown origin role 'guesses'");
}

TEST(ProgramJson, IntegralDoublesStayDoubles) {
  Program parsed = programFromJson(programToJson(programWithEverything()));
  const OpRecord &rope = parsed.kernels[1].ops[2];
  ASSERT_TRUE(std::holds_alternative<double>(rope.attrs.at("theta")));
  EXPECT_EQ(std::get<double>(rope.attrs.at("theta")), 10000.0);
  const OpRecord &norm = parsed.kernels[1].ops[5];
  EXPECT_EQ(std::get<double>(norm.attrs.at("third")), 1.0 / 3.0);
  EXPECT_EQ(std::get<int64_t>(norm.attrs.at("big")), int64_t(1) << 40);
  EXPECT_EQ(std::get<double>(norm.attrs.at("neg_inf")), -std::numeric_limits<double>::infinity());
}

TEST(ProgramJson, OneLinePerValueAndOp) {
  std::string text = programToJson(programWithEverything());
  EXPECT_CONTAINS(text,
                  "\n    {\"id\": 3, \"name\": \"x\", \"dtype\": \"bf16\", \"shape\": [2, 3, 4], "
                  "\"storage\": \"activation\"");
  EXPECT_CONTAINS(text, "\"attrs\": {\"sizes\": {\"ints\": [4, 8]}}}");
  EXPECT_CONTAINS(text, "{\"style\": {\"s\": \"half\"}, \"theta\": {\"f\": 10000.0}}");
}

TEST(ProgramJson, MalformedJsonNamesTheOrigin) {
  std::string message = errorMessage([] { programFromJson("{\"model\": ", "broken.json"); });
  EXPECT_CONTAINS(message, "broken.json");
  EXPECT_CONTAINS(message, "malformed JSON");
}

TEST(ProgramJson, MissingFieldNamesItsPath) {
  std::string text = programToJson(programWithEverything());
  size_t field = text.find("\"dtype\": \"bf16\", \"shape\": [2, 3, 4]");
  ASSERT_NE(field, std::string::npos);
  text.erase(field, std::string("\"dtype\": \"bf16\", ").size());
  std::string message = errorMessage([&] { programFromJson(text, "p.json"); });
  EXPECT_CONTAINS(message, "p.json");
  EXPECT_CONTAINS(message, "values[3]");
  EXPECT_CONTAINS(message, "missing field 'dtype'");
}

TEST(ProgramJson, WrongTypesAndNamesAreReported) {
  std::string text = programToJson(programWithEverything());
  std::string badShape = text;
  badShape.replace(badShape.find("\"shape\": [2, 3, 4]"), 18, "\"shape\": [2, \"3\", 4]");
  EXPECT_CONTAINS(errorMessage([&] { programFromJson(badShape, "p.json"); }),
                  "values[3].shape[1]: expected an integer, got \"3\"");

  std::string badStorage = text;
  badStorage.replace(badStorage.find("\"activation\""), 12, "\"register\"");
  EXPECT_CONTAINS(errorMessage([&] { programFromJson(badStorage, "p.json"); }),
                  "unknown storage class 'register'");

  std::string badOp = text;
  badOp.replace(badOp.find("\"op\": \"split\""), 13, "\"op\": \"layernorm\"");
  EXPECT_CONTAINS(errorMessage([&] { programFromJson(badOp, "p.json"); }),
                  "kernels[1].ops[1].op: unknown op 'layernorm'");

  std::string badAttr = text;
  badAttr.replace(badAttr.find("{\"ints\": [4, 8]}"), 16, "{\"bits\": [4, 8]}");
  EXPECT_CONTAINS(errorMessage([&] { programFromJson(badAttr, "p.json"); }),
                  "kernels[1].ops[1].attrs.sizes: unknown attribute tag 'bits'");

  EXPECT_CONTAINS(errorMessage([] { programFromJson("[1, 2]", "p.json"); }),
                  "expected a JSON object");
}

TEST(ProgramJson, InvalidProgramIsRejectedOnLoad) {
  std::string text = programToJson(programWithEverything());
  // Make the view point past the end of the value list.
  text.replace(text.find("\"view_of\": 3"), 12, "\"view_of\": 99");
  std::string message = errorMessage([&] { programFromJson(text, "p.json"); });
  EXPECT_CONTAINS(message, "p.json");
  EXPECT_CONTAINS(message, "refers to value 99");
}

TEST(ProgramJson, SaveAndLoadFile) {
  test::TempDir directory;
  Program program = programWithEverything();
  saveProgram(program, directory.file("program.json"));
  expectSamePrograms(program, loadProgram(directory.file("program.json")));
}

TEST(ProgramJson, MissingFileMessage) {
  test::TempDir directory;
  std::string path = directory.file("absent.json");
  EXPECT_EQ(errorMessage([&] { loadProgram(path); }),
            "cannot open program file '" + path + "': No such file or directory");
}

TEST(Program, AttributeGettersNameTheProblem) {
  OpRecord op = makeOp("linear", {}, {}, {{"eps", 1e-5}, {"n", int64_t(3)}});
  EXPECT_EQ(errorMessage([&] { op.intAttr("foo"); }), "op 'linear' has no int attribute 'foo'");
  EXPECT_EQ(errorMessage([&] { op.intAttr("eps"); }), "op 'linear' attribute 'eps' is not an int");
  EXPECT_EQ(errorMessage([&] { op.stringAttr("n"); }), "op 'linear' attribute 'n' is not a string");
  EXPECT_EQ(errorMessage([&] { op.intsAttr("x"); }), "op 'linear' has no int array attribute 'x'");
  EXPECT_EQ(op.floatAttr("n"), 3.0); // an integer is accepted where a float is expected
  EXPECT_EQ(op.floatAttr("eps"), 1e-5);
}

TEST(Program, EnumNamesRoundTrip) {
  for (DType dtype : {DType::F32, DType::BF16, DType::I32})
    EXPECT_EQ(parseDType(dtypeName(dtype)), dtype);
  for (Storage storage : {Storage::Input, Storage::Output, Storage::Weight, Storage::Activation,
                          Storage::View, Storage::Local})
    EXPECT_EQ(parseStorage(storageName(storage)), storage);
  EXPECT_STREQ(storageName(Storage::Activation), "activation");
  EXPECT_EQ(dtypeBytes(DType::BF16), 2);
  EXPECT_CONTAINS(errorMessage([] { parseDType("f16"); }), "unknown dtype 'f16'");
  for (OpKind kind : allOpKinds()) EXPECT_EQ(parseOpKind(opKindName(kind)), kind);
  EXPECT_STREQ(opKindName(OpKind::kv_cache_store), "kv_cache_store");
  EXPECT_CONTAINS(errorMessage([] { parseOpKind("fused_linear"); }), "unknown op 'fused_linear'");
}

TEST(Program, ValidationCatchesInconsistencies) {
  Program viewTooBig = programWithEverything();
  viewTooBig.values[5].shape = {2, 3, 2, 4};
  EXPECT_CONTAINS(errorMessage([&] { validateProgram(viewTooBig); }),
                  "does not match the value it views");

  Program badOperand = programWithEverything();
  badOperand.kernels[2].ops[0].operands[1] = -4;
  EXPECT_CONTAINS(errorMessage([&] { validateProgram(badOperand); }), "refers to value -4");

  Program sharedLocal = programWithEverything();
  sharedLocal.kernels[2].ops[0].operands[0] = 6; // tl_loss reading tl_fused's local
  EXPECT_CONTAINS(errorMessage([&] { validateProgram(sharedLocal); }),
                  "is used by kernel 1 and kernel 2");

  Program unknownKey = programWithEverything();
  unknownKey.values[2].weightKeys[1] = "v.weight";
  EXPECT_CONTAINS(errorMessage([&] { validateProgram(unknownKey); }),
                  "uses key 'v.weight', which is not a parameter");

  Program viewCycle = programWithEverything();
  viewCycle.values[3].storage = Storage::View;
  viewCycle.values[3].viewOf = 5;
  EXPECT_CONTAINS(errorMessage([&] { validateProgram(viewCycle); }), "cycle of views");
}

} // namespace
} // namespace tlc
