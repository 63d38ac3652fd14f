#include "compiler/codegen/Schedule.h"

#include "runtime/Error.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <initializer_list>
#include <numeric>

namespace tlc::codegen {
namespace {

int64_t ceilDiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

struct Candidate {
  GemmTile tile;
  int blocksPerSM;   // resident at once (shared memory and registers)
  double efficiency; // throughput of a full SM, relative to the largest tile
};

const std::vector<Candidate> &candidates() {
  static const std::vector<Candidate> all = {
      {{128, 256, 2, 4, 3, 1}, 1, 1.00},
      {{128, 128, 2, 4, 3, 1}, 2, 0.85},
      {{64, 128, 2, 2, 4, 2}, 2, 0.70},
      {{64, 64, 2, 2, 4, 2}, 3, 0.50},
  };
  return all;
}

// overrides.gemmTile: BMxBNxWARPS_MxWARPS_NxSLICESxSTAGES, e.g. 64x128x2x2x2x4.
bool gemmOverride(const Machine &machine, GemmTile &tile) {
  const std::string &text = machine.overrides.gemmTile;
  int bm = 0, bn = 0, wm = 0, wn = 0, slices = 0, stages = 0;
  if (text.empty() || std::sscanf(text.c_str(), "%dx%dx%dx%dx%dx%d", &bm, &bn, &wm, &wn, &slices, &stages) != 6)
    return false;
  tile = {bm, bn, wm, wn, stages, slices};
  bool valid = wm > 0 && wn > 0 && bm % (16 * wm) == 0 && bn % (16 * wn) == 0 && (slices == 1 || slices == 2) &&
               stages >= 2 && stages <= 8;
  return valid && tile.sharedBytes() <= machine.sharedBytesPerBlock && tile.threads() <= 1024;
}

} // namespace

Machine persistentMachine(Machine machine, int workers) {
  workers = std::max(1, workers);
  machine.persistent = true;
  machine.workersPerSM = workers;
  machine.multiprocessors *= workers;
  machine.sharedBytesPerSM /= workers;
  machine.sharedBytesPerBlock = std::min(machine.sharedBytesPerBlock, machine.sharedBytesPerSM - machine.reservedPerBlock);
  machine.registersPerSM /= workers;
  machine.maxThreadsPerSM /= workers;
  // At least 128 registers a thread, what the largest tiles' accumulators need.
  machine.maxThreadsPerBlock = std::min(machine.maxThreadsPerSM, machine.registersPerSM / 128 / 32 * 32);
  return machine;
}

Machine machineFor(const TargetDesc &target, const ScheduleOverrides &overrides) {
  const TargetDesc &nvidia = target.vendor == Vendor::NVIDIA ? target : findTarget(kDefaultTarget);
  Machine machine;
  machine.multiprocessors = nvidia.multiprocessors;
  machine.sharedBytesPerSM = nvidia.sharedBytesPerSM;
  machine.sharedBytesPerBlock = nvidia.sharedBytesPerBlock;
  machine.reservedPerBlock = nvidia.reservedSharedPerBlock;
  machine.maxThreadsPerSM = nvidia.maxThreadsPerSM;
  machine.registersPerSM = nvidia.registersPerSM;
  machine.wgmma = nvidia.matrixUnits == MatrixUnits::Wgmma && !overrides.noWgmma;
  machine.gemv = !overrides.noGemv;
  machine.clusters = nvidia.clusters && !overrides.noClusters;
  machine.overrides = overrides;
  return machine;
}

int64_t GemmTile::sharedBytes(int64_t afterTile) const {
  int64_t pipeline = int64_t(stages) * ((BM + BN) * 64 * 2 + 128);  // A, B and a norm gain per stage
  int64_t epilogue = int64_t(BM) * (BN + 8) * 4 + BM * 4 + afterTile;
  return std::max(pipeline, epilogue);
}

bool flatColumns(const GemmSpec &gemm) {
  if (gemm.groups.size() < 2 || gemm.bKN || gemm.normGrad) return false;
  int64_t start = 0;
  for (const GemmGroup &group : gemm.groups) {
    if (group.bands.size() != 1 || group.bands[0] != start || group.width % 8 != 0) return false;
    // Its own column: start + c for every c. Without a division or remainder by c (period
    // 1) the column is affine in c, so two points decide it.
    for (const Store &store : group.stores)
      for (const ElementExpr *leaf : leaves(store.value, ElementExpr::Kind::Accumulator))
        if (leaf->column.period("c") != 1 || leaf->column.evaluate({{"c", 0}, {"m", 0}}) != start ||
            leaf->column.evaluate({{"c", 1}, {"m", 0}}) != start + 1)
          return false;
    start += group.width;
  }
  return start == gemm.N;
}

int64_t columnTiles(const GemmSpec &gemm, int BN) {
  if (flatColumns(gemm)) return ceilDiv(gemm.N, BN);
  int64_t tiles = 0;
  for (const GemmGroup &group : gemm.groups) tiles += ceilDiv(group.width, BN / int64_t(group.bands.size()));
  return tiles;
}

int64_t gemmTiles(const GemmSpec &gemm, int BM, int BN) {
  return gemm.batch * ceilDiv(gemm.M, BM) * columnTiles(gemm, BN);
}

// Beyond this many columns a group's reads are not walked column by column.
constexpr int64_t kMaxColumnsWalked = 1 << 16;

// Whether every column c of `group` reads `column` (an accumulator column) inside c's own
// tile of `width` columns, decided from the expression's structure rather than column by
// column: it repeats every L = lcm(its period in c, width) columns, shifted by
// column(L) - column(0). When that shift is L the reads keep pace with c, so the first L
// columns and the last L + width (where the group ends) decide it; otherwise they drift
// by a column or more each L and leave the tile within 2 * width + 2 repeats.
static bool readsStayInTile(const IndexExpr &column, const GemmGroup &group, int64_t width) {
  auto at = [&](int64_t c) { return column.evaluate({{"c", c}, {"m", 0}}); };
  auto inTile = [&](int64_t c) {
    for (int64_t start : group.bands) {
      int64_t local = at(c) - start;
      if (local >= 0 && local < group.width && local / width == c / width) return true;
    }
    return false;
  };
  auto allInTile = [&](int64_t from, int64_t to) {
    for (int64_t c = std::max<int64_t>(0, from); c < to; ++c)
      if (!inTile(c)) return false;
    return true;
  };
  constexpr int64_t kMaxPeriod = 4096;
  int64_t period = column.period("c");
  if (period > kMaxPeriod) return group.width <= kMaxColumnsWalked && allInTile(0, group.width);
  int64_t repeat = std::lcm(period, width);
  if (repeat >= group.width) return allInTile(0, group.width);
  if (at(repeat) - at(0) == repeat)
    return allInTile(0, repeat) && allInTile(group.width - repeat - width, group.width);
  return group.width <= (2 * width + 2) * repeat && allInTile(0, group.width);
}

// Whether `stays` holds for every accumulator column the group's stores read.
template <class Stays> static bool storesReadWithin(const GemmGroup &group, Stays &&stays) {
  for (const Store &store : group.stores)
    for (const ElementExpr *leaf : leaves(store.value, ElementExpr::Kind::Accumulator))
      if (!stays(leaf->column)) return false;
  return true;
}

bool tileHoldsEpilogue(const GemmSpec &gemm, int BN) {
  if (flatColumns(gemm)) return BN % 8 == 0;
  for (const GemmGroup &group : gemm.groups) {
    int64_t width = BN / int64_t(group.bands.size());
    if (width % 8 != 0 ||
        !storesReadWithin(group, [&](const IndexExpr &column) { return readsStayInTile(column, group, width); }))
      return false;
  }
  return true;
}

// Whether every column c of `group` reads `column` inside c's own tile when a tile is two
// runs of `width` / 2 columns, the second `pair` columns after the first (tile t of a
// 2 * pair block: runs at t * width / 2 and pair on). Column by column: pairs are tried
// only for the few GEMMs whose one-run tiles do not hold, narrower than a head.
static bool readsStayInPairedTile(const IndexExpr &column, const GemmGroup &group, int64_t width, int64_t pair) {
  const int64_t half = width / 2;
  auto tileOf = [&](int64_t c) { return c / (2 * pair) * (pair / half) + c % pair / half; };
  for (int64_t c = 0; c < group.width; ++c) {
    const int64_t read = column.evaluate({{"c", c}, {"m", 0}});
    bool inTile = false;
    for (int64_t start : group.bands) {
      const int64_t local = read - start;
      inTile = inTile || (local >= 0 && local < group.width && tileOf(local) == tileOf(c));
    }
    if (!inTile) return false;
  }
  return true;
}

std::optional<std::vector<int64_t>> tilePairs(const GemmSpec &gemm, int BN) {
  if (flatColumns(gemm)) return BN % 8 == 0 ? std::optional(std::vector<int64_t>(gemm.groups.size(), 0)) : std::nullopt;
  std::vector<int64_t> pairs;
  for (const GemmGroup &group : gemm.groups) {
    const int64_t width = BN / int64_t(group.bands.size());
    if (width % 8 != 0) return std::nullopt;
    if (storesReadWithin(group, [&](const IndexExpr &column) { return readsStayInTile(column, group, width); })) {
      pairs.push_back(0);
      continue;
    }
    // Runs of whole 8-column chunks, a block of 2 * pair columns holding whole tiles.
    int64_t found = 0;
    if (width % 16 == 0 && group.width <= kMaxColumnsWalked)
      for (int64_t pair = width / 2; pair <= group.width / 2 && found == 0; pair *= 2)
        if (group.width % (2 * pair) == 0 && storesReadWithin(group, [&](const IndexExpr &column) {
              return readsStayInPairedTile(column, group, width, pair);
            }))
          found = pair;
    if (found == 0) return std::nullopt;
    pairs.push_back(found);
  }
  return pairs;
}

int64_t GemvTile::kRange(const GemmSpec &gemm) const { return ceilDiv(gemm.K / 8, splits) * 8; }
int64_t GemvTile::stagedRowElements(const GemmSpec &gemm) const {
  return tensorCores ? (kRange(gemm) + 63) / 64 * 64 + 32 : kRange(gemm);
}
bool GemvTile::warpsSplitK() const { return tensorCores && warps > BN / 16; }
int64_t GemvTile::sharedBytes(const GemmSpec &gemm) const {
  const int64_t staged = int64_t(BM) * stagedRowElements(gemm) * (tensorCores ? 2 : 4);
  return staged + (int64_t(BM) * (BN + 4) + BM + int64_t(BM) * warps + (warpsSplitK() ? int64_t(warps) * 16 * 16 : 0)) * 4;
}

bool splitSavesStreaming(int64_t tileBytes, int64_t splits) {
  if (splits <= 1) return false;
  const double unsplitUs = double(tileBytes) / kBytesPerSM * 1e6;
  return unsplitUs * (1.0 - 1.0 / double(splits)) > kSplitJoinUs;
}

namespace {
constexpr int64_t kMaxGemvChainBlocks = 1024;
// The narrowest tile (a power of two from 8 to 256 dividing `width`) that leaves at most
// kMaxGemvChainBlocks blocks; 0 for none.
int narrowestChainTile(int64_t width) {
  for (int BI = 8; BI <= 256; BI *= 2)
    if (width % BI == 0 && width / BI <= kMaxGemvChainBlocks) return BI;
  return 0;
}
} // namespace

int64_t gemvChainSharedBytes(int64_t rows, int64_t K, int64_t N, int BI, int bands, int warps) {
  return (rows * ceilDiv(K, 8) * 8 + rows * (N + 4) + rows * (int64_t(BI) * bands + 4) + rows * BI + rows + rows * warps) * 4;
}

std::string whyNotGemvChain(int64_t rows, int64_t K, int64_t width, int bands, int64_t N) {
  if (rows > kMaxGemvFmaRows) return fmt::format("{} rows, more than the matrix-vector path takes", rows);
  if (K % 8 != 0 || width % 8 != 0)
    return fmt::format("K {} and the producer's {} columns must be multiples of 8", K, width);
  if (!narrowestChainTile(width))
    return fmt::format("no tile of 8 to 256 columns divides {} into at most {} blocks", width, kMaxGemvChainBlocks);
  // The widest tile and most warps the options can ask for.
  if (int64_t bytes = gemvChainSharedBytes(rows, K, N, 256, bands, 16); bytes > (64 << 10))
    return fmt::format("its rows need {} bytes of shared memory, more than AMD's 64 KiB", bytes);
  return "";
}

GemvChainTile chooseGemvChainTile(int64_t width, const Machine &machine) {
  GemvChainTile tile;
  tile.BI = narrowestChainTile(width);
  for (int BI = 32; BI >= 8; BI /= 2)
    if (width % BI == 0 && 2 * (width / BI) >= machine.multiprocessors && width / BI <= kMaxGemvChainBlocks) {
      tile.BI = BI;
      break;
    }
  if (int asked = machine.overrides.gemvChainColumns; asked > 0 && width % asked == 0 && width / asked <= kMaxGemvChainBlocks)
    tile.BI = asked;
  if (machine.overrides.gemvWarps > 0) tile.warps = machine.overrides.gemvWarps;
  return tile;
}

std::optional<GemvTile> chooseGemvTile(const GemmSpec &gemm, const Machine &machine, int weightBytes) {
  if (!machine.gemv || gemm.K % 8 != 0 || gemm.bKN || gemm.normGrad) return std::nullopt;
  GemvTile tile;
  tile.BM = int(gemm.M);
  tile.BN = 0;
  // The tensor-core form: bf16 weights, 16 columns a warp group, launched on its own at O3
  // too (codegen::launchesApart). Taken for
  // 3 to 8 rows where 64-column tiles of the tiled paths would not give every SM one (the
  // 1.1B's QKV, o_proj and down at a batch of 8: 10-15 % faster; its gate/up and logits,
  // and 16 rows, ran faster tiled); for up to 16 rows everywhere where asked for.
  const bool narrow = gemm.batch * ceilDiv(gemm.N, 64) < machine.multiprocessors;
  tile.tensorCores = (machine.overrides.gemvTensorCores || (gemm.M >= 3 && gemm.M <= 8 && narrow)) &&
                     !machine.persistent && weightBytes == 2 && gemm.M <= 16 && tilePairs(gemm, 16);
  if (!tile.tensorCores && gemm.M > kMaxGemvFmaRows) return std::nullopt;
  // A persistent kernel's weight ring is freed by the default number of warps.
  const int warps = machine.overrides.gemvWarps > 0 && !machine.persistent ? machine.overrides.gemvWarps : tile.warps;
  // At least 16 columns a row: a warp's 2 columns a row share each staged element of A. On
  // tensor cores, groups of 16 columns that the block's warps divide.
  auto holds = [&](int BN) {
    return (tile.tensorCores ? BN % 16 == 0 && warps % (BN / 16) == 0 : BN >= 16 * tile.BM) && tilePairs(gemm, BN);
  };
  // On tensor cores, the widest tile that still gives every SM one (A is staged once a
  // block for all its columns).
  if (tile.tensorCores)
    for (int BN : {128, 64, 32})
      if (tile.BN == 0 && holds(BN) && gemm.batch * columnTiles(gemm, BN) >= machine.multiprocessors) tile.BN = BN;
  if (machine.persistent) {
    // A worker's tasks run one after another, each paying its waits, A's staging and the
    // norm: tiles as wide as leaves at most one a worker, up to 128 columns (what a
    // warp's lanes keep in flight), or the widest of those that holds the epilogue.
    for (int BN = 16; BN <= 128 && tile.BN == 0; BN += 16)
      if (holds(BN) && gemm.batch * columnTiles(gemm, BN) <= machine.multiprocessors) tile.BN = BN;
    for (int BN = 128; BN >= 16 && tile.BN == 0; BN -= 16)
      if (holds(BN)) tile.BN = BN;
  }
  for (int BN : {16, 32, 64, 128, 256})
    if (tile.BN == 0 && holds(BN)) tile.BN = BN;
  if (machine.overrides.gemvColumns > 0 && holds(machine.overrides.gemvColumns)) tile.BN = machine.overrides.gemvColumns;
  if (tile.BN == 0) return std::nullopt;
  tile.pairs = *tilePairs(gemm, tile.BN);
  tile.warps = warps;
  // K split only where the tiles leave SMs (or workers) idle (a split costs a round trip
  // through the workspace); each split at least two warps' worth of k, A's range in at
  // most 64 KiB.
  const int64_t tiles = gemm.batch * columnTiles(gemm, tile.BN), chunks = gemm.K / 8;
  const int64_t minChunks = 2 * 32, sharedTarget = int64_t(64) << 10;
  const int64_t wanted = machine.overrides.gemvSplits > 0 ? machine.overrides.gemvSplits : machine.multiprocessors / tiles;
  tile.splits = int(std::clamp<int64_t>(wanted, 1, std::max<int64_t>(1, chunks / minChunks)));
  // A persistent task's join lies on the path to the next part: split only where it saves
  // more of a worker's streaming than the join costs.
  if (machine.persistent && machine.overrides.gemvSplits == 0 &&
      !splitSavesStreaming(int64_t(tile.BN) * gemm.K * weightBytes, tile.splits))
    tile.splits = 1;
  while (tile.sharedBytes(gemm) > sharedTarget && tile.splits < chunks) ++tile.splits;
  tile.splits = int(ceilDiv(chunks, ceilDiv(chunks, tile.splits)));  // no empty split
  if (tile.sharedBytes(gemm) > machine.sharedBytesPerBlock - machine.reservedPerBlock) return std::nullopt;
  tile.dependentsEarly = !machine.overrides.gemvDependentsAtEnd &&
                        (tile.tensorCores ? machine.overrides.chainTensorCoreGemvs : tile.BM == 1);
  return tile;
}

int64_t GemvTile::tiles(const GemmSpec &gemm) const { return gemm.batch * columnTiles(gemm, BN); }
int64_t GemvTile::blocks(const GemmSpec &gemm) const { return tiles(gemm) * splits; }
int64_t GemvTile::dependentsEarlyFrom(const GemmSpec &gemm, int multiprocessors) const {
  return dependentsEarly ? std::max<int64_t>(0, blocks(gemm) - multiprocessors) : blocks(gemm);
}

GemmTile chooseGemmTile(const GemmSpec &gemm, const Machine &machine, bool fp32) {
  const int multiprocessors = machine.multiprocessors;
  GemmTile forced;
  if (gemmOverride(machine, forced) && tileHoldsEpilogue(gemm, forced.BN)) return forced;
  // Estimated time: waves of resident tiles, each wave as long as its SMs' work.
  const Candidate *best = nullptr;
  double bestTime = 0;
  // RMSNorm's backward in the epilogue: a row's tiles should fit one cluster.
  auto clusterFits = [&](const Candidate &candidate) {
    return tileHoldsEpilogue(gemm, candidate.tile.BN) && columnTiles(gemm, candidate.tile.BN) <= maxClusterTiles(machine);
  };
  bool someClusterFits = std::any_of(candidates().begin(), candidates().end(), clusterFits);
  for (const Candidate &candidate : candidates()) {
    if (!tileHoldsEpilogue(gemm, candidate.tile.BN) || (fp32 && candidate.tile.BN > 128)) continue;
    if (gemm.normGrad && someClusterFits && !clusterFits(candidate)) continue;
    int64_t tiles = gemmTiles(gemm, candidate.tile.BM, candidate.tile.BN);
    int64_t slots = int64_t(multiprocessors) * candidate.blocksPerSM;
    // A wave with fewer tiles than slots still takes a tile's time on the SMs it uses.
    int64_t perSM = std::min<int64_t>(candidate.blocksPerSM, ceilDiv(tiles, multiprocessors));
    double wave = double(perSM) * candidate.tile.BM * candidate.tile.BN / candidate.efficiency;
    double time = double(ceilDiv(tiles, slots)) * wave;
    if (!best || time < bestTime * 0.999) {
      best = &candidate;
      bestTime = time;
    }
  }
  if (!best) throw Error("code generation: no GEMM tile holds this epilogue's reads (a RoPE pair split across tiles)");
  return best->tile;
}

int64_t WgmmaTile::sharedBytes(int64_t afterTile) const {
  // A, B and a norm gain per stage, rows of 128 bytes; with tf32 two buffers of their residuals.
  int64_t pipeline = int64_t(stages) * ((BM + BN) * 128 + 128) + (tf32 ? 2 * (BM + BN) * 128 : 0);
  int64_t epilogue = int64_t(BM) * (BN + 8) * 4 + BM * 4 + afterTile;
  if (producer) {  // two mbarriers per stage after the stages, then the rows' inverse RMS; no gain
    // (tf32: each stage's residuals beside it)
    pipeline = int64_t(stages) * ((BM + BN) * 128 * (tf32 ? 2 : 1) + 16) + BM * 4;
    epilogue -= BM * 4;
  }
  return std::max(pipeline, epilogue) + 1024;
}

int WgmmaTile::blocksPerMultiprocessor(const Machine &machine) const {
  // Registers: 255 per thread unless `resident` caps them.
  int64_t bySharedMemory = blocksBySharedMemory(machine, sharedBytes());
  int64_t byRegisters = std::max<int64_t>(resident, machine.registersPerSM / (int64_t(threads()) * 255));
  return int(std::max<int64_t>(1, std::min({bySharedMemory, byRegisters, int64_t(machine.maxThreadsPerSM / threads())})));
}

// The n of gemm_wgmma.cuh's wgmma shapes (its tl_wgmma_width).
static bool isWgmmaWidth(int n) { return n == 64 || n == 128 || n == 160 || n == 192 || n == 256; }

bool splitsLastWave(const GemmSpec &gemm, const WgmmaTile &tile, const Machine &machine) {
  const int multiprocessors = machine.multiprocessors;
  int64_t rowTiles = ceilDiv(gemm.M, tile.BM), tiles = gemmTiles(gemm, tile.BM, tile.BN);
  if (!tile.producer || tile.splits < 2 || tile.splitTiles < 1 || tiles <= multiprocessors) return false;
  // With RMSNorm the sums are shared from column tile 0 (beyond one wave), which must be
  // whole; and only from two full waves on: the 1.1B O2 QKV (1.2 waves) ran 70 µs split
  // against 65 on two 128x128 blocks an SM, whose waits for the shared sums overlap.
  return !gemm.rowNorm ||
         (gemm.batch == 1 && tile.splitTiles <= tiles - rowTiles && tiles >= 2 * int64_t(multiprocessors));
}

namespace {
std::optional<WgmmaTile> chooseWgmmaTileAnySplit(const GemmSpec &gemm, const Machine &machine, bool aKM);
} // namespace

std::optional<WgmmaTile> chooseWgmmaTile(const GemmSpec &gemm, const Machine &machine, bool aKM) {
  std::optional<WgmmaTile> tile = chooseWgmmaTileAnySplit(gemm, machine, aKM);
  if (!tile || !machine.persistent) return tile;
  tile->splits = 1;
  tile->splitTiles = 0;
  // A task fits its worker: else the largest of the v1 tiles that does.
  auto fits = [&](const WgmmaTile &t) {
    return t.threads() <= machine.maxThreadsPerBlock && t.sharedBytes() <= machine.sharedBytesPerBlock &&
           tileHoldsEpilogue(gemm, t.BN) && (!(aKM || gemm.bKN) || t.BN % 64 == 0);
  };
  if (fits(*tile)) return tile;
  for (WgmmaTile candidate : {WgmmaTile{128, 128, 3, 1, 2}, WgmmaTile{128, 64, 4}, WgmmaTile{64, 128, 4},
                              WgmmaTile{64, 64, 4}})
    if (fits(candidate)) return candidate;
  return std::nullopt;
}

namespace {

// A stored [K, M] or B stored [K, N] (the backward's GEMMs): only gemm_wgmma.cuh's v1
// kernel reads them (64-column panels, wgmma's transposes), so no producer warpgroup and
// no 160-column tiles.
bool transposableTile(const GemmSpec &gemm, bool aKM, const WgmmaTile &tile) {
  return !(aKM || gemm.bKN) || (!tile.producer && tile.BN % 64 == 0);
}

// RMSNorm's backward in the epilogue (gemm_wgmma.cuh v11): v1's kernel, a row's column
// tiles one cluster, K unsplit.
bool normGradClusterFits(const GemmSpec &gemm, const Machine &machine, const WgmmaTile &tile) {
  return !gemm.normGrad || (gemm.batch == 1 && !tile.producer && tile.BN % 64 == 0 && tile.splits == 1 &&
                            columnTiles(gemm, tile.BN) <= maxClusterTiles(machine));
}

// RMSNorm's backward in the epilogue: 128-row tiles, four stages, of the narrowest of
// `widths` whose columns hold the epilogue and whose row's tiles fit one cluster. tf32:
// 64-row tiles where 128-row ones would leave half the SMs idle (K is never split here).
std::optional<WgmmaTile> normGradTile(const GemmSpec &gemm, const Machine &machine, std::initializer_list<int> widths,
                                      bool tf32) {
  for (int BN : widths) {
    WgmmaTile tile{tf32 && 2 * gemmTiles(gemm, 128, BN) <= machine.multiprocessors ? 64 : 128, BN, 4};
    tile.tf32 = tf32;
    if (tileHoldsEpilogue(gemm, BN) && normGradClusterFits(gemm, machine, tile)) return tile;
  }
  return std::nullopt;
}

// overrides.wgmmaTile (BMxBNxSTAGES[xSPLITS[xRESIDENT[xPRODUCER]]]) where it parses and
// the GEMM and the machine can run it; none otherwise. fp32 operands (`tf32`) take
// gemm_wgmma_tf32.cuh's tiles: 64 or 128 rows and columns, K unsplit with a producer
// (launched kernels only: a persistent kernel's tf32 tasks keep the schedule's tiles).
std::optional<WgmmaTile> forcedWgmmaTile(const GemmSpec &gemm, const Machine &machine, bool aKM, bool tf32 = false) {
  const std::string &text = machine.overrides.wgmmaTile;
  WgmmaTile forced;
  int producer = 0;
  bool parsed = !text.empty() && std::sscanf(text.c_str(), "%dx%dx%dx%dx%dx%d", &forced.BM, &forced.BN, &forced.stages,
                                             &forced.splits, &forced.resident, &producer) >= 3;
  if (!parsed) return std::nullopt;
  forced.producer = producer == 1;
  forced.tf32 = tf32;
  if (tf32 && ((forced.producer && forced.splits > 1) || (forced.BM != 64 && forced.BM != 128) ||
               (forced.BN != 64 && forced.BN != 128) || machine.persistent))
    return std::nullopt;
  // The warp-specialized kernel: 64- or 128-row tiles, no RMSNorm gain (one folded into
  // the weight is fine); it splits K only for the 128-row tiles of a short last wave.
  if (forced.producer && forced.splits > 1)
    forced.splitTiles = gemmTiles(gemm, forced.BM, forced.BN) % machine.multiprocessors;
  bool producerFits = producer == 0 || (forced.producer && gemm.gain < 0 &&
                                        (forced.splits == 1 ||
                                         (forced.BM == 128 && splitsLastWave(gemm, forced, machine))));
  if (producerFits && forced.splits >= 1 && forced.splits <= 8 && forced.resident >= 1 && forced.resident <= 4 &&
      forced.resident * (forced.sharedBytes() + machine.reservedPerBlock) <= machine.sharedBytesPerSM &&
      (forced.BM == 64 || forced.BM == 128 || (forced.BM == 256 && !forced.producer && forced.resident == 1)) &&
      isWgmmaWidth(forced.BN) &&
      forced.stages >= 3 && forced.stages <= 16 && forced.sharedBytes() <= machine.sharedBytesPerBlock &&
      tileHoldsEpilogue(gemm, forced.BN) && transposableTile(gemm, aKM, forced) &&
      normGradClusterFits(gemm, machine, forced))
    return forced;
  return std::nullopt;
}

std::optional<WgmmaTile> chooseWgmmaTileAnySplit(const GemmSpec &gemm, const Machine &machine, bool aKM) {
  // overrides.noWgmma: sm_90a runs the mma.sync path too (to test and time it on a Hopper).
  if (!machine.wgmma) return std::nullopt;
  if (std::optional<WgmmaTile> forced = forcedWgmmaTile(gemm, machine, aKM)) return forced;
  const int multiprocessors = machine.multiprocessors;
  const bool transposed = aKM || gemm.bKN;
  static const WgmmaTile candidates[] = {{128, 128, 3, 1, 2}, {128, 256, 4}, {128, 128, 4}, {64, 128, 4}, {64, 64, 6}};
  // RMSNorm's backward: 128-row tiles of the narrowest width whose row fits one cluster
  // (H100, the workshop's QKV dX with its norm, 1024x512, K 1024: 14.2 µs on 128x64
  // tiles, 17.5 on 64x64, 23.8 on 64x128, before the registers were prefetched; 13.3 after).
  if (gemm.normGrad) return normGradTile(gemm, machine, {64, 128, 256}, /*tf32=*/false);
  // Measured on an H100 (bench/kernels.py --sweep-wgmma): GEMMs of at most two waves of
  // 64x64 tiles run fastest on 64x64 tiles with a deep pipeline, splitting K two ways
  // when it is 2048 or more and the tiles leave half the SMs idle; larger ones on 128x128 tiles,
  // three stages, two blocks per SM (so one block's epilogue overlaps the other's
  // mainloop: 8-21 % faster than one 128x256 block at four 1.1B shapes), else the
  // largest tile whose columns hold the epilogue's reads.
  std::optional<WgmmaTile> best;
  int64_t kTiles = ceilDiv(gemm.K, 64);
  // The backward's GEMMs of at most two waves of 128x64 tiles (the workshop's): 128x64
  // tiles, four stages, K split two ways where the tiles fill at most half the SMs and K
  // is 1024 or more (H100 sweep, bench/RESULTS.md: the gate/up's dX 36.1 µs on 64x64
  // tiles, 29.9 on 128x64, 20.3 split; its dW 18.4 -> 17.1; the head-layout dX, K 512,
  // slower split: 5.7 -> 7.9).
  if (transposed && tileHoldsEpilogue(gemm, 64) && gemmTiles(gemm, 128, 64) <= 2 * multiprocessors) {
    WgmmaTile tile{128, 64, 4};
    if (kTiles >= 16 && 2 * gemmTiles(gemm, 128, 64) <= multiprocessors) tile.splits = 2;
    return tile;
  }
  // Larger ones (the 1.1B's) on 256x128 tiles, four warpgroups, three stages: 12 % less
  // time summed over its ten distinct backward GEMMs than two 128x128 blocks an SM (the
  // logits' dX 680 -> 530 µs, the gate/up's dX 231 -> 182), slower only at the QKV's dW
  // (80 -> 82).
  if (transposed && tileHoldsEpilogue(gemm, 128)) return WgmmaTile{256, 128, 3};
  if (tileHoldsEpilogue(gemm, 64) && gemmTiles(gemm, 64, 64) <= 2 * multiprocessors) {
    best = WgmmaTile{64, 64, 6};
    // K of 2048 or more in one wave: split two ways where the parts still fit one wave,
    // else a deeper pipeline (the workshop's down projection, 128 tiles, with gemm_mma.cuh
    // v5's copies: 8.1 µs with 8 stages against 8.2 with 6, 8.4 with 10-16, 10.8 split
    // two ways and 10.1 warp-specialized).
    if (kTiles >= 32 && 2 * gemmTiles(gemm, 64, 64) <= multiprocessors) best->splits = 2;
    else if (kTiles >= 32 && gemmTiles(gemm, 64, 64) <= multiprocessors) best->stages = 8;
    return best;
  }
  // 256x160 tiles (four warpgroups, no producer: with one each would have 96 registers,
  // too few for m64n160) where they fill one wave and 128x256 tiles need more: the 1.1B
  // QKV's 2048 x 2560 (flat columns) in 128 tiles took 38.0 µs against 51.9 for 128x256
  // tiles with the split tail.
  if (!transposed && gemm.gain < 0 && tileHoldsEpilogue(gemm, 160) && gemmTiles(gemm, 128, 256) > multiprocessors &&
      gemmTiles(gemm, 256, 160) <= multiprocessors && gemmTiles(gemm, 256, 160) * 10 >= multiprocessors * 9)
    return WgmmaTile{256, 160, 4};
  // Without an RMSNorm gain to apply to A, 128x256 tiles on the warp-specialized kernel
  // when their waves are nearly full (8-15 % faster than two 128x128 blocks per SM at the
  // 1.1B shapes), or beyond one wave with the tiles of a short last wave split K among
  // the SMs the full waves leave idle (the 1.1B QKV's 160 tiles: 132 whole, then 28 in
  // four parts, where whole tiles took two waves).
  int64_t wide = gemmTiles(gemm, 128, 256), tail = wide % multiprocessors;
  if (!transposed && gemm.gain < 0 && tileHoldsEpilogue(gemm, 256)) {
    WgmmaTile tile{128, 256, 4, 1, 1, true};
    WgmmaTile split = tile;
    split.splits = int(tail ? std::min<int64_t>({multiprocessors / tail, kTiles / 8, 8}) : 1);
    split.splitTiles = int(tail);
    if (split.splits >= 2 && splitsLastWave(gemm, split, machine)) return split;
    if (wide * 10 >= ceilDiv(wide, multiprocessors) * multiprocessors * 8) return tile;
  }
  for (const WgmmaTile &candidate : candidates)
    if (tileHoldsEpilogue(gemm, candidate.BN) && transposableTile(gemm, aKM, candidate)) return candidate;
  return best;
}
} // namespace

std::optional<WgmmaTile> chooseWgmmaTf32Tile(const GemmSpec &gemm, const Machine &machine, bool aKM) {
  // (A stored [K, M] and B stored [K, N] are transposed as they are split: v4.)
  if (!machine.wgmma) return std::nullopt;
  if (std::optional<WgmmaTile> forced = forcedWgmmaTile(gemm, machine, aKM, /*tf32=*/true)) return forced;
  const int multiprocessors = machine.multiprocessors;
  // RMSNorm's backward (v5): as the bf16 kernel's, in tf32's widths.
  if (gemm.normGrad) return normGradTile(gemm, machine, {64, 128}, /*tf32=*/true);
  // At most two waves of 64x64 tiles: those, two blocks an SM (one's split pass in shared
  // memory beside the other's wgmma), K split two or four ways where K is 1024 or more and
  // the parts still fit the block slots of one wave. K of 2048 or more over 128 rows or
  // more: 128x128 tiles (half the split passes per product), K split to fill at most one
  // wave. (Not in a persistent kernel: the next part's tasks fill the idle slots there.)
  // K split in two, again and again, while the parts still fit the block slots of a wave.
  auto fillWave = [&](WgmmaTile &tile, int mostSplits) {
    const int64_t tiles = gemmTiles(gemm, tile.BM, tile.BN), slots = int64_t(multiprocessors) * tile.resident;
    while (tile.splits < mostSplits && 2 * tile.splits * tiles <= slots) tile.splits *= 2;
  };
  const int64_t kTiles = ceilDiv(gemm.K, 32);
  if (tileHoldsEpilogue(gemm, 64) && gemmTiles(gemm, 64, 64) <= 2 * multiprocessors) {
    WgmmaTile tile{64, 64, 4, 1, 2};
    if (kTiles >= 64 && gemm.M >= 128 && !machine.persistent && tileHoldsEpilogue(gemm, 128)) {
      tile = WgmmaTile{128, 128, 4};
      fillWave(tile, 8);
    } else if (kTiles >= 32 && !machine.persistent) {
      fillWave(tile, 4);
    }
    tile.tf32 = true;
    return tile;
  }
  for (WgmmaTile tile : {WgmmaTile{128, 128, 4}, WgmmaTile{128, 64, 4}})
    if (tileHoldsEpilogue(gemm, tile.BN)) {
      tile.tf32 = true;
      return tile;
    }
  return std::nullopt;
}

int64_t AttentionTile::blocks(const AttentionSpec &spec) const {
  return spec.B * spec.HKV * (spec.H / spec.HKV / heads) * ceilDiv(spec.SQ, queries);
}

int64_t AttentionTile::sharedBytes(const AttentionSpec &spec) const {
  return (int64_t(heads) * queries * spec.D + 2 * 64 * (spec.D + spec.DV)) * elementBytes;
}

static AttentionTile attentionTileOf(const AttentionSpec &spec, const Machine &machine, bool fp32) {
  const int multiprocessors = machine.multiprocessors;
  int group = int(spec.H / spec.HKV);
  // Two m16 tiles a warp hold 32 query rows of scores and outputs: registers allow it at head size 64.
  int maxMTiles = spec.D <= 64 && spec.DV <= 64 && !fp32 ? 2 : 1;
  // overrides.attentionTile: QTxHB[xMT[xRESIDENT]].
  if (const std::string &text = machine.overrides.attentionTile; !text.empty()) {
    AttentionTile forced;
    int fields =
        std::sscanf(text.c_str(), "%dx%dx%dx%d", &forced.queries, &forced.heads, &forced.mTiles, &forced.resident);
    if (fields >= 2 && forced.mTiles >= 1 && forced.mTiles <= maxMTiles && forced.queries > 0 &&
        forced.resident >= 1 && forced.resident <= 8 &&
        forced.queries % (16 * forced.mTiles) == 0 &&
        forced.heads > 0 && group % forced.heads == 0 && forced.threads() <= 256)
      return forced;
  }
  // Groups of 4 or more query heads over long sequences: 32 queries of 4 heads, two m16
  // tiles a warp (H100, 32 over 4 heads, S = 512 and 2048: 4-5 % faster than 16 queries of
  // 8 heads; with 8 over 8 heads two m16 tiles a warp were 10-25 % slower).
  if (maxMTiles == 2 && group % 4 == 0 && spec.SQ >= 512) return {32, 4, 2};
  // One m16 tile a warp at head size 64 fits in 128 registers (135 uncapped, a few bytes
  // spilled capped): 4 blocks of 4 warps per SM instead of 3 (H100, 8 over 8 heads,
  // S = 2048: 206 µs against 227).
  auto capped = [&](AttentionTile tile) {
    if (maxMTiles == 2) tile.resident = std::max(1, 512 / tile.threads());
    return tile;
  };
  // All heads of a kv group in one block when 8 warps allow (K and V read once per
  // group); then the largest query tile that still gives every SM a block, or two where
  // the operands are fp32 (one m16 tile a warp: a block's key tiles are a longer chain of
  // splits and products, so more of them side by side hide it better).
  const int64_t wantedBlocks = int64_t(multiprocessors) * 9 / 10 * (fp32 ? 2 : 1);
  AttentionTile best{16, 1};
  for (int heads = group; heads >= 1; --heads) {
    if (group % heads) continue;
    for (int queries : {128, 64, 32, 16}) {
      AttentionTile tile{queries, heads};
      int warps = heads * queries / 16;
      // 128 queries of one head in a block measured slower than 64 (H100, S = 512 and 2048).
      if (warps > 8 || queries > ceilDiv(spec.SQ, 16) * 16 || (heads == 1 && queries > 64)) continue;
      if (tile.blocks(spec) >= wantedBlocks || queries == 16) return capped(tile);
    }
    best = {16, heads};
  }
  return capped(best);
}

AttentionTile chooseAttentionTile(const AttentionSpec &spec, const Machine &machine, bool fp32) {
  AttentionTile tile = attentionTileOf(spec, machine, fp32);
  tile.elementBytes = fp32 ? 4 : 2;
  return tile;
}

} // namespace tlc::codegen
