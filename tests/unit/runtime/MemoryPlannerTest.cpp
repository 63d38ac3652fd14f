// Memory planner: reuse across disjoint lifetimes, no overlap within shared lifetimes.
#include <gtest/gtest.h>

#include <random>

#include "TestUtil.h"
#include "runtime/MemoryPlanner.h"

namespace tlc {
namespace {

using test::makeOp;

// First and last kernel touching each value's bytes, computed independently of the
// planner: inputs for the whole run, outputs to the end, views charged to the value they view.
std::vector<std::pair<int, int>> lifetimes(const Program &program) {
  std::vector<std::pair<int, int>> spans(program.values.size(), {INT32_MAX, -1});
  auto touch = [&](int id, int k) {
    auto &span = spans[size_t(program.storageOf(id).id)];
    span = {std::min(span.first, k), std::max(span.second, k)};
  };
  for (size_t k = 0; k < program.kernels.size(); ++k)
    for (const OpRecord &op : program.kernels[k].ops) {
      for (int id : op.operands) touch(id, int(k));
      for (int id : op.results) touch(id, int(k));
    }
  for (int id : program.inputs) {
    touch(id, 0);
    touch(id, int(program.kernels.size()) - 1);
  }
  for (int id : program.outputs) touch(id, int(program.kernels.size()) - 1);
  return spans;
}

bool planned(const Value &value) {
  return value.storage == Storage::Input || value.storage == Storage::Output ||
         value.storage == Storage::Activation;
}

// Every pair of values alive at the same time must have disjoint bytes.
void expectNoOverlap(const Program &program) {
  auto spans = lifetimes(program);
  for (const Value &a : program.values)
    for (const Value &b : program.values) {
      if (a.id >= b.id || !planned(a) || !planned(b)) continue;
      bool aliveTogether = spans[size_t(a.id)].first <= spans[size_t(b.id)].second &&
                           spans[size_t(b.id)].first <= spans[size_t(a.id)].second;
      bool bytesOverlap = a.offset < b.offset + b.bytes() && b.offset < a.offset + a.bytes();
      EXPECT_FALSE(aliveTogether && bytesOverlap)
          << "values " << a.name << " and " << b.name << " share bytes while both are alive";
    }
  for (const Value &value : program.values)
    if (planned(value)) {
      EXPECT_GE(value.offset, 0) << value.name;
      EXPECT_LE(value.offset + value.bytes(), program.arenaBytes) << value.name;
    }
}

// ids -> a -> b -> c -> d -> logits: each activation is dead two kernels later.
Program chain() {
  test::ProgramBuilder builder(1, 256, 8);
  int ids = builder.value("ids", DType::I32, {1, 256}, Storage::Input);
  int table = builder.weight("table", {8, 1024}, {{"table", {8, 1024}}});
  int previous = builder.value("a", DType::F32, {1, 256, 1024}, Storage::Activation);
  builder.kernel("embed", {makeOp("embedding", {table, ids}, {previous})});
  for (const char *name : {"b", "c", "d"}) {
    int next = builder.value(name, DType::F32, {1, 256, 1024}, Storage::Activation);
    builder.kernel(std::string("silu_") + name, {makeOp("silu", {previous}, {next})});
    previous = next;
  }
  int logits = builder.value("logits", DType::F32, {1, 256, 1024}, Storage::Output);
  builder.kernel("final", {makeOp("silu", {previous}, {logits})});
  return builder.program();
}

TEST(MemoryPlanner, ChainReusesMemory) {
  Program program = chain();
  int64_t arena = planMemory(program);
  EXPECT_EQ(arena, program.arenaBytes);
  expectNoOverlap(program);
  int64_t activation = 256 * 1024 * 4;
  EXPECT_EQ(unplannedBytes(program), 5 * activation + 256 * 4);
  // At most two activations are alive at once, plus the ids.
  EXPECT_LT(arena, unplannedBytes(program));
  EXPECT_LE(arena, 3 * activation + 256);
  // a (kernels 0-1) and c (kernels 2-3) never live together: they share bytes.
  EXPECT_EQ(program.values[2].offset, program.values[4].offset);
}

TEST(MemoryPlanner, InputsAndOutputsSpanTheRun) {
  // The ids are read only by kernel 0 and the output is written by kernel 1; later
  // activations must still not take their bytes.
  test::ProgramBuilder builder(1, 256, 8);
  int ids = builder.value("ids", DType::I32, {1, 256}, Storage::Input);
  int table = builder.weight("table", {8, 1024}, {{"table", {8, 1024}}});
  int a = builder.value("a", DType::F32, {256, 1024}, Storage::Activation);
  int out = builder.value("out", DType::F32, {256, 1024}, Storage::Output);
  builder.kernel("k0", {makeOp("embedding", {table, ids}, {a})});
  builder.kernel("k1", {makeOp("silu", {a}, {out})});
  int previous = a;
  for (int k = 2; k < 6; ++k) {
    int next =
        builder.value("later" + std::to_string(k), DType::F32, {256, 1024}, Storage::Activation);
    builder.kernel("k" + std::to_string(k), {makeOp("silu", {previous}, {next})});
    previous = next;
  }
  Program program = builder.program();
  planMemory(program);
  expectNoOverlap(program);
  for (const Value &value : program.values) {
    if (!planned(value) || value.id == ids || value.id == out) continue;
    for (int kept : {ids, out}) {
      const Value &keptValue = program.values[size_t(kept)];
      EXPECT_FALSE(value.offset < keptValue.offset + keptValue.bytes() &&
                   keptValue.offset < value.offset + value.bytes())
          << value.name << " overlaps " << keptValue.name;
    }
  }
}

TEST(MemoryPlanner, ViewsKeepTheirBaseAlive) {
  test::ProgramBuilder builder(1, 64, 8);
  int ids = builder.value("ids", DType::I32, {1, 64}, Storage::Input);
  int table = builder.weight("table", {8, 256}, {{"table", {8, 256}}});
  int a = builder.value("a", DType::F32, {1, 64, 256}, Storage::Activation);
  int aFlat = builder.view("a.flat", a, {64, 256});
  int b = builder.value("b", DType::F32, {64, 256}, Storage::Activation);
  int c = builder.value("c", DType::F32, {64, 256}, Storage::Activation);
  int out = builder.value("out", DType::F32, {64, 256}, Storage::Output);
  builder.kernel("k0", {makeOp("embedding", {table, ids}, {a})});
  builder.kernel("k1", {makeOp("silu", {aFlat}, {b})});
  builder.kernel("k2", {makeOp("silu", {b}, {c})});
  builder.kernel("k3", {makeOp("add", {c, aFlat}, {out})}); // a is read again, through its view
  Program program = builder.program();
  planMemory(program);
  expectNoOverlap(program);
  const Value &aValue = program.values[size_t(a)], &cValue = program.values[size_t(c)];
  EXPECT_FALSE(aValue.offset < cValue.offset + cValue.bytes() &&
               cValue.offset < aValue.offset + aValue.bytes())
      << "c reuses a's bytes although a view of a is read after c is written";
  EXPECT_EQ(program.values[size_t(aFlat)].offset, aValue.offset);
}

TEST(MemoryPlanner, WeightsAndLocalsAreNotPlaced) {
  test::ProgramBuilder builder(1, 4, 8);
  int ids = builder.value("ids", DType::I32, {1, 4}, Storage::Input);
  int table = builder.weight("table", {8, 16}, {{"table", {8, 16}}});
  int local = builder.value("x", DType::F32, {1, 4, 16}, Storage::Local);
  int out = builder.value("out", DType::F32, {1, 4, 16}, Storage::Output);
  builder.kernel("k", {makeOp("embedding", {table, ids}, {local}), makeOp("silu", {local}, {out})});
  Program program = builder.program();
  planMemory(program, 64);
  EXPECT_EQ(program.values[size_t(table)].offset, -1);
  EXPECT_EQ(program.values[size_t(local)].offset, -1);
  EXPECT_EQ(unplannedBytes(program), 4 * 4 + 4 * 16 * 4);
  EXPECT_EQ(program.arenaBytes, 64 + 256);
}

TEST(MemoryPlanner, RandomProgramsNeverOverlapLiveValues) {
  for (uint64_t seed = 1; seed <= 20; ++seed) {
    std::mt19937_64 random(seed);
    test::ProgramBuilder builder(1, 8, 8);
    std::vector<int> live = {builder.value("ids", DType::I32, {1, 8}, Storage::Input)};
    int table = builder.weight("table", {8, 4}, {{"table", {8, 4}}});
    for (int k = 0; k < 30; ++k) {
      // Each kernel reads one or two earlier values and writes a value of random size (the
      // planner reads only ids: the ops need not be valid ones).
      int first = live[random() % live.size()], second = live[random() % live.size()];
      int64_t rows = 1 + int64_t(random() % 64);
      DType dtype = random() % 2 ? DType::F32 : DType::BF16;
      int result = builder.value("v" + std::to_string(k), dtype, {rows, 8}, Storage::Activation);
      builder.kernel("k" + std::to_string(k), {makeOp("concat", {table, first, second}, {result})});
      live.push_back(result);
    }
    builder.value("out", DType::F32, {8}, Storage::Output);
    builder.kernel("final",
                   {makeOp("global_norm", {live.back()}, {int(builder.program().values.size()) - 1})});
    Program program = builder.program();
    planMemory(program, 32);
    expectNoOverlap(program);
    for (const Value &value : program.values)
      if (planned(value)) EXPECT_EQ(value.offset % 32, 0) << value.name;
    EXPECT_LE(program.arenaBytes, unplannedBytes(program) + 32 * int64_t(program.values.size()));
  }
}

} // namespace
} // namespace tlc
