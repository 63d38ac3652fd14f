// Index arithmetic: every simplification keeps the value (checked against plain integer
// math over whole ranges), and the contiguity the emitter relies on is found exactly
// where it holds.
#include "compiler/codegen/ElementCode.h"
#include "compiler/codegen/IndexExpr.h"
#include "compiler/codegen/Schedule.h"
#include "compiler/codegen/Tasks.h"

#include <gtest/gtest.h>

#include <random>

namespace tlc::codegen {
namespace {

TEST(IndexExpr, DelinearizeThenLinearizeIsTheIdentity) {
  std::mt19937 random(7);
  for (int trial = 0; trial < 50; ++trial) {
    std::vector<int64_t> shape;
    int64_t count = 1;
    for (int d = 0; d < 1 + int(random() % 4); ++d) {
      shape.push_back(1 + int64_t(random() % 9));
      count *= shape.back();
    }
    IndexExpr e = IndexExpr::variable("e", count);
    IndexExpr back = linearize(delinearize(e, shape), shape);
    for (int64_t value = 0; value < count; ++value) ASSERT_EQ(back.evaluate({{"e", value}}), value);
  }
}

TEST(IndexExpr, SimplificationsKeepTheValue) {
  IndexExpr m = IndexExpr::variable("m", 1024), c = IndexExpr::variable("c", 512);
  struct Case {
    IndexExpr expr;
    int64_t (*reference)(int64_t m, int64_t c);
  };
  std::vector<Case> cases = {
      {(m * 512 + c).floorDiv(512), [](int64_t m, int64_t c) { return (m * 512 + c) / 512; }},
      {(m * 512 + c).mod(512), [](int64_t m, int64_t c) { return (m * 512 + c) % 512; }},
      {(m * 512 + c).floorDiv(64), [](int64_t m, int64_t c) { return (m * 512 + c) / 64; }},
      {(m * 512 + c).mod(64), [](int64_t m, int64_t c) { return (m * 512 + c) % 64; }},
      {(m * 6 + c).floorDiv(4), [](int64_t m, int64_t c) { return (m * 6 + c) / 4; }},
      {(m * 6 + c).mod(4), [](int64_t m, int64_t c) { return (m * 6 + c) % 4; }},
      {m.floorDiv(128).floorDiv(2), [](int64_t m, int64_t) { return m / 128 / 2; }},
      {m.mod(256).mod(128), [](int64_t m, int64_t) { return m % 256 % 128; }},
      {c.mod(64).floorDiv(2) * 2 + 1, [](int64_t, int64_t c) { return c % 64 / 2 * 2 + 1; }},
      {(c + 3) * 4 + 5, [](int64_t, int64_t c) { return (c + 3) * 4 + 5; }},
  };
  for (const Case &test : cases)
    for (int64_t mv = 0; mv < 1024; mv += 37)
      for (int64_t cv = 0; cv < 512; ++cv)
        ASSERT_EQ(test.expr.evaluate({{"m", mv}, {"c", cv}}), test.reference(mv, cv)) << test.expr.str();
  EXPECT_EQ((m * 512 + c).floorDiv(512).str(), "m");  // the simplifier sees through it
  EXPECT_EQ((m * 512 + c).mod(512).str(), "c");
  EXPECT_EQ(c.floorDiv(512).str(), "0");
}

// Whether a column expression is c shifted by a constant, decided over one period:
// the same answer as walking every column, for layouts of heads and halves, and for a
// plain column of a 2^31 - 1 wide GEMM without walking it.
TEST(IndexExpr, ShiftedIdentityIsDecidedOverOnePeriod) {
  std::mt19937 random(11);
  for (int trial = 0; trial < 300; ++trial) {
    int64_t width = 1 + int64_t(random() % 700), head = 1 + int64_t(random() % 40), shift = int64_t(random() % 5);
    IndexExpr c = IndexExpr::variable("c", width);
    std::vector<IndexExpr> layouts = {
        c + shift,
        c.floorDiv(head) * head + c.mod(head) + shift,                    // a head split and merge
        c.mod(head) * (width / head + 1) + c.floorDiv(head),              // heads transposed
        c.floorDiv(2 * head) * 2 * head + (c.mod(2 * head) + head).mod(2 * head),  // halves swapped
        (c + shift).floorDiv(head) * head + c.mod(head),
    };
    for (const IndexExpr &column : layouts) {
      int64_t delta = column.evaluate({{"c", 0}});
      bool walked = true;
      for (int64_t x = 0; x < width && walked; ++x) walked = column.evaluate({{"c", x}}) == x + delta;
      ASSERT_EQ(isShiftedIdentity(column, "c", width, delta), walked) << column.str() << " over " << width;
    }
  }
  int64_t vocab = 2147483647;
  EXPECT_TRUE(isShiftedIdentity(IndexExpr::variable("c", vocab) + 7, "c", vocab, 7));
  EXPECT_FALSE(isShiftedIdentity(IndexExpr::variable("c", vocab).mod(1000) + 7, "c", vocab, 7));
}

// A GEMM tile's 8 columns of a head, stored transposed [B, S, H, D] -> [B, H, S, D]: still
// 8 consecutive elements; with the head dimension split finer than 8, no longer.
TEST(IndexExpr, ContiguityIsFoundWhereItHolds) {
  IndexExpr m = IndexExpr::variable("m", 256), c = IndexExpr::variable("c", 512);
  ChunkLoop loop{"c", "c0", 8, 512, {{"m", {0, 1, 127, 128, 255}}}, {}};
  auto transposed = [&](int64_t headDim) {
    std::vector<int64_t> shape = {2, 512 / headDim, 128, headDim};  // [B, H, S, D]
    return linearize({m.floorDiv(128), c.floorDiv(headDim), m.mod(128), c.mod(headDim)}, shape);
  };
  EXPECT_TRUE(ElementCode::contiguous(transposed(64), loop));
  EXPECT_TRUE(ElementCode::contiguous(transposed(8), loop));
  EXPECT_FALSE(ElementCode::contiguous(transposed(4), loop));
  EXPECT_FALSE(ElementCode::contiguous(c * 2, loop));
  EXPECT_FALSE(ElementCode::contiguous(c + 1, loop));  // contiguous but not 16-byte aligned
}

// The structural check (no sampling, so long loops compile fast) claims aligned runs only
// where they hold at every value: random layouts of c and m, checked exhaustively.
TEST(IndexExpr, AlignedRunsAreClaimedOnlyWhereTheyHold) {
  std::mt19937 random(11);
  IndexExpr m = IndexExpr::variable("m", 12), c = IndexExpr::variable("c", 384);
  int claimed = 0, held = 0;
  for (int trial = 0; trial < 400; ++trial) {
    // c split into a random [c1, c2] (c2 = 1, 2, 4, ... 64), transposed with m, plus noise.
    int64_t inner = int64_t(1) << (random() % 7), outer = 384 / inner, scale = 1 + random() % 3;
    Index index = {c.floorDiv(inner), m, c.mod(inner)};
    std::vector<int64_t> shape = {outer, 12, inner};
    if (random() % 2) std::swap(index[0], index[1]), std::swap(shape[0], shape[1]);
    IndexExpr offset = linearize(index, shape) * scale + int64_t(random() % 3) * 8 + int64_t(random() % 2);
    if (random() % 3 == 0) offset = offset.mod(int64_t(8) << (random() % 8));
    if (random() % 4 == 0) offset = offset.floorDiv(int64_t(1) << (random() % 4));
    bool holds = true;
    for (int64_t mv = 0; mv < 12 && holds; ++mv)
      for (int64_t c0 = 0; c0 < 384 && holds; c0 += 8) {
        int64_t first = offset.evaluate({{"m", mv}, {"c", c0}});
        holds = first % 8 == 0;
        for (int64_t i = 1; i < 8 && holds; ++i) holds = offset.evaluate({{"m", mv}, {"c", c0 + i}}) == first + i;
      }
    bool claims = offset.alignedRuns("c", 8);
    if (claims) ++claimed;
    if (holds) ++held;
    ASSERT_TRUE(!claims || holds) << offset.str();
  }
  // It finds most of them (it misses sums of parts that are not runs each, like
  // c / 2 * 2 + c % 2; the emitter samples those).
  EXPECT_GE(claimed * 4, held * 3) << claimed << " of " << held;
  EXPECT_TRUE((m * 384 + c).alignedRuns("c", 8));
  EXPECT_TRUE(linearize({c.floorDiv(64), m, c.mod(64)}, {6, 12, 64}).alignedRuns("c", 8));
  EXPECT_FALSE(linearize({c.floorDiv(4), m, c.mod(4)}, {96, 12, 4}).alignedRuns("c", 8));
  EXPECT_FALSE((c + 1).alignedRuns("c", 8));
}

GemmSpec plainGemm(int64_t M, int64_t N, int64_t K) {
  GemmSpec gemm;
  gemm.M = M;
  gemm.N = N;
  gemm.K = K;
  gemm.groups = {{N, {0}, {{0, IndexExpr(0), ElementExpr::accumulator(IndexExpr::variable("c", N))}}}};
  return gemm;
}

// At the workshop's M = 1024 tokens every projection's grid gives every SM of an H100 work.
TEST(Schedule, TilesFillTheDevice) {
  for (auto [N, K] : std::vector<std::pair<int64_t, int64_t>>{{1024, 512}, {512, 512}, {4096, 512}, {512, 2048}}) {
    GemmSpec gemm = plainGemm(1024, N, K);
    GemmTile tile = chooseGemmTile(gemm, machineFor(findTarget("sm_90a"), {}));
    int64_t tiles = (1024 / tile.BM) * columnTiles(gemm, tile.BN);
    EXPECT_GE(tiles, 118) << N << "x" << K << ": " << tile.BM << "x" << tile.BN;
    EXPECT_LE(tile.sharedBytes(), 227 << 10);
  }
}

// A RoPE pair (i, i + D/2) must sit in one tile: tiles narrower than a head cannot hold it.
TEST(Schedule, RopeHalfPairsNeedWholeHeadsPerTile) {
  GemmSpec gemm = plainGemm(1024, 256, 64);
  IndexExpr c = IndexExpr::variable("c", 256);
  IndexExpr partner = c.floorDiv(128) * 128 + (c.mod(128) + 64).mod(128);  // head dim 128, "half" pairs
  gemm.groups[0].stores[0].value = ElementExpr::apply(
      "add", {ElementExpr::accumulator(c), ElementExpr::accumulator(partner)}, 0);
  EXPECT_FALSE(tileHoldsEpilogue(gemm, 64));
  EXPECT_TRUE(tileHoldsEpilogue(gemm, 128));
  EXPECT_GE(chooseGemmTile(gemm, machineFor(findTarget("sm_90a"), {})).BN, 128);
}

// The matrix-vector tile: one or two rows only, 16 columns a row at least, K split only
// where the tiles leave SMs idle; in a persistent kernel, tiles wide enough for at most one
// a worker, split only where that saves more streaming than the join costs.
TEST(Schedule, MatrixVectorTilesForOneOrTwoRows) {
  const Machine h100 = machineFor(findTarget("sm_90a"), {});
  std::optional<GemvTile> wide = chooseGemvTile(plainGemm(1, 11264, 2048), h100, 2);
  ASSERT_TRUE(wide);
  EXPECT_EQ(wide->BN, 16);
  EXPECT_EQ(wide->splits, 1) << "704 tiles fill 132 SMs";
  std::optional<GemvTile> narrow = chooseGemvTile(plainGemm(1, 1024, 2048), h100, 2);
  ASSERT_TRUE(narrow);
  EXPECT_EQ(narrow->splits, 2) << "64 tiles: K split in two";
  EXPECT_EQ(narrow->kRange(plainGemm(1, 1024, 2048)), 1024);
  EXPECT_EQ(chooseGemvTile(plainGemm(2, 1024, 2048), h100, 2)->BN, 32);
  EXPECT_TRUE(chooseGemvTile(plainGemm(3, 1024, 2048), h100, 2)->tensorCores) << "3 rows: on tensor cores";
  EXPECT_FALSE(chooseGemvTile(plainGemm(3, 1024, 2048), h100, 4)) << "3 rows of fp32 weights: tiled";
  EXPECT_FALSE(chooseGemvTile(plainGemm(1, 1024, 2044), h100, 2)) << "K not a multiple of 8";
  const Machine workers = persistentMachine(h100, 1);
  std::optional<GemvTile> task = chooseGemvTile(plainGemm(1, 11264, 2048), workers, 2);
  ASSERT_TRUE(task);
  EXPECT_EQ(task->BN, 96) << "118 tiles for 132 workers";
  EXPECT_EQ(task->splits, 1);
  EXPECT_EQ(chooseGemvTile(plainGemm(1, 1024, 2048), workers, 2)->BN, 16);
  EXPECT_EQ(chooseGemvTile(plainGemm(1, 1024, 2048), workers, 2)->splits, 1)
      << "64 tiles of 64 KiB: a split would save a worker less streaming than its join costs";
  EXPECT_EQ(chooseGemvTile(plainGemm(1, 256, 8192), workers, 4)->splits, 8)
      << "16 tiles of 512 KiB: split 8 ways";
  EXPECT_FALSE(splitSavesStreaming(64 << 10, 4));
  EXPECT_TRUE(splitSavesStreaming(256 << 10, 3));
  EXPECT_EQ(chooseGemvTile(plainGemm(1, 32000, 2048), workers, 2)->BN, 128) << "the widest a lane keeps in flight";
  ScheduleOverrides splits;
  splits.gemvSplits = 1;
  EXPECT_EQ(chooseGemvTile(plainGemm(1, 1024, 2048), machineFor(findTarget("sm_90a"), splits), 2)->splits, 1);
  splits.gemvSplits = 64;
  EXPECT_EQ(chooseGemvTile(plainGemm(1, 1024, 2048), machineFor(findTarget("sm_90a"), splits), 2)->splits, 4)
      << "a split at least 512 k";
  ScheduleOverrides columns;
  columns.gemvColumns = 64;
  columns.gemvWarps = 16;
  std::optional<GemvTile> forced = chooseGemvTile(plainGemm(1, 11264, 2048), machineFor(findTarget("sm_90a"), columns), 2);
  ASSERT_TRUE(forced);
  EXPECT_EQ(forced->BN, 64);
  EXPECT_EQ(forced->warps, 16);
  EXPECT_EQ(chooseGemvTile(plainGemm(1, 11264, 2048), persistentMachine(machineFor(findTarget("sm_90a"), columns), 1), 2)->warps,
            8)
      << "a persistent kernel's GEMVs keep the warps that free its weight ring";
  ScheduleOverrides off;
  off.noGemv = true;
  EXPECT_FALSE(chooseGemvTile(plainGemm(1, 1024, 2048), machineFor(findTarget("sm_90a"), off), 2));
}

// The tensor-core matrix-vector path (gemm_gemv.cuh v9): taken for bf16 GEMMs of 3 to 8
// rows whose 64-column tiles would leave SMs idle, not in a persistent kernel; with
// --gemv-tensor-cores for up to 16 rows of any width, the widest tile that still gives every
// SM one. Without it, wide GEMMs and 16 rows take the tiled paths, and so do fp32 weights.
TEST(Schedule, TensorCoreMatrixVectorTilesForNarrowGemmsOfAFewRows) {
  const Machine h100 = machineFor(findTarget("sm_90a"), {});
  std::optional<GemvTile> eight = chooseGemvTile(plainGemm(8, 2048, 2048), h100, 2);
  ASSERT_TRUE(eight);
  EXPECT_TRUE(eight->tensorCores);
  EXPECT_EQ(eight->BM, 8);
  EXPECT_EQ(eight->BN, 16) << "2048 columns in 32-column tiles would leave SMs idle";
  EXPECT_EQ(eight->splits, 1);
  EXPECT_TRUE(eight->warpsSplitK());
  // A in bf16, rows padded to 64 bytes past a multiple of 128; the warps' partial tiles.
  EXPECT_EQ(eight->stagedRowElements(plainGemm(8, 2048, 2048)), 2048 + 32);
  EXPECT_EQ(eight->sharedBytes(plainGemm(8, 2048, 2048)), 8 * 2080 * 2 + (8 * 20 + 8 + 8 * 8 + 8 * 256) * 4);
  EXPECT_TRUE(chooseGemvTile(plainGemm(3, 2560, 2048), h100, 2)->tensorCores);
  EXPECT_FALSE(chooseGemvTile(plainGemm(8, 11264, 2048), h100, 2)) << "wide: the tiled paths fill the SMs";
  EXPECT_FALSE(chooseGemvTile(plainGemm(16, 2048, 2048), h100, 2)) << "16 rows ran faster tiled";
  EXPECT_FALSE(chooseGemvTile(plainGemm(8, 2048, 2048), h100, 4)) << "fp32 weights";
  EXPECT_FALSE(chooseGemvTile(plainGemm(8, 2048, 2048), persistentMachine(h100, 1), 2)) << "not in a persistent kernel";
  EXPECT_FALSE(chooseGemvTile(plainGemm(2, 2048, 2048), h100, 2)->tensorCores) << "two rows stay on FMAs";
  Machine sixteenSMs = h100;
  sixteenSMs.multiprocessors = 16;
  EXPECT_FALSE(chooseGemvTile(plainGemm(8, 2048, 2048), sixteenSMs, 2)) << "32 tiles of 64 columns fill 16 SMs";

  ScheduleOverrides asked;
  asked.gemvTensorCores = true;
  const Machine forced = machineFor(findTarget("sm_90a"), asked);
  std::optional<GemvTile> wide = chooseGemvTile(plainGemm(8, 11264, 2048), forced, 2);
  ASSERT_TRUE(wide && wide->tensorCores);
  EXPECT_EQ(wide->BN, 64) << "176 tiles of 64 columns still give each of 132 SMs one";
  EXPECT_EQ(wide->warps / (wide->BN / 16), 2) << "two warps a group of 16 columns, splitting K";
  EXPECT_TRUE(chooseGemvTile(plainGemm(16, 2048, 2048), forced, 2)->tensorCores);
  EXPECT_FALSE(chooseGemvTile(plainGemm(17, 2048, 2048), forced, 2));
  EXPECT_TRUE(chooseGemvTile(plainGemm(1, 2048, 2048), forced, 2)->tensorCores) << "asked for: every row count";
  EXPECT_FALSE(chooseGemvTile(plainGemm(1, 2048, 2048), h100, 2)->tensorCores) << "one row stays on FMAs";
}

// RoPE's pairs (i, i + 32) of 64-wide heads in matrix-vector tiles narrower than a head:
// each tile two runs of columns, 32 apart, so 2560 columns fill the SMs without a K split
// (and its join); a GEMM that reads only its own columns keeps one run.
TEST(Schedule, MatrixVectorTilesPairRopeHalvesInTwoRuns) {
  GemmSpec gemm = plainGemm(1, 2560, 2048);
  IndexExpr c = IndexExpr::variable("c", 2560);
  IndexExpr partner = c.floorDiv(64) * 64 + (c.mod(64) + 32).mod(64);
  gemm.groups[0].stores[0].value = ElementExpr::apply(
      "add", {ElementExpr::accumulator(c), ElementExpr::accumulator(partner)}, 0);
  EXPECT_FALSE(tileHoldsEpilogue(gemm, 16)) << "one run of 16 columns splits a pair";
  ASSERT_TRUE(tilePairs(gemm, 16));
  EXPECT_EQ(*tilePairs(gemm, 16), std::vector<int64_t>{32});
  EXPECT_EQ(*tilePairs(gemm, 64), std::vector<int64_t>{0}) << "a whole head a tile: one run";
  EXPECT_FALSE(tilePairs(gemm, 24)) << "runs of 12 columns are not whole chunks of 8";

  const Machine h100 = machineFor(findTarget("sm_90a"), {});
  std::optional<GemvTile> chained = chooseGemvTile(gemm, h100, 2);
  ASSERT_TRUE(chained);
  EXPECT_EQ(chained->BN, 16);
  EXPECT_EQ(chained->pairs, std::vector<int64_t>{32});
  EXPECT_EQ(chained->splits, 1) << "160 tiles fill 132 SMs";
  std::optional<GemvTile> task = chooseGemvTile(gemm, persistentMachine(h100, 1), 2);
  ASSERT_TRUE(task);
  EXPECT_EQ(task->BN, 32) << "80 tiles, at most one a worker";
  EXPECT_EQ(task->pairs, std::vector<int64_t>{32});
  EXPECT_EQ(task->splits, 1);
  EXPECT_EQ(chooseGemvTile(plainGemm(1, 2560, 2048), h100, 2)->pairs, std::vector<int64_t>{0});

  // A paired tile's stores: tile 5 of a head's 4 holds columns 72..79 and 104..111.
  gemm.groups[0].stores[0].offset = c;
  GemmTileShape shape{1, 16, false, {32}};
  BlockAccess access = gemmBlockAccess(gemm, shape, 5);
  ASSERT_EQ(access.writes.size(), 2u);
  EXPECT_EQ(access.writes[0].begin, 72);
  EXPECT_EQ(access.writes[0].end, 80);
  EXPECT_EQ(access.writes[1].begin, 104);
  EXPECT_EQ(access.writes[1].end, 112);
}

} // namespace
} // namespace tlc::codegen
