// Launch shapes chosen per problem: GEMM tiles that fill the device (at M = 1024 a
// 128x128 tile leaves most of an H100's 132 SMs idle), attention query tiles and heads
// per block. Chosen for the NVIDIA tensor-core paths on the Machine a Program is tuned for
// (its target description, with a device's own SM count); the AMD and SIMT paths run
// fixed 64x64 tiles. The compile options' ScheduleOverrides force a choice, for measuring
// alternatives.
#pragma once

#include "compiler/Targets.h"
#include "compiler/codegen/KernelSpec.h"

#include <tlc/Compile.h>

#include <optional>
#include <string>
#include <vector>

namespace tlc::codegen {

// What the NVIDIA schedules are chosen for: the SMs and their limits, which instructions
// exist (wgmma, clusters), and the overrides.
struct Machine {
  int multiprocessors = 132;
  int64_t sharedBytesPerSM = 228 << 10, sharedBytesPerBlock = 227 << 10, reservedPerBlock = 1 << 10;
  int maxThreadsPerSM = 2048, registersPerSM = 65536;
  bool wgmma = true;     // the sm_90a path (gemm_wgmma.cuh) is generated
  bool clusters = true;  // thread-block clusters (RMSNorm's backward in a GEMM)
  bool gemv = true;      // GEMMs of a few rows run the matrix-vector path (gemm_gemv.cuh)
  // The kernels run as tasks of a persistent kernel (O3): no K split across blocks but a
  // matrix-vector GEMM's (the next kernel's tasks fill the SMs a short last wave leaves
  // idle); its workers share each SM `workersPerSM` ways, each block (task) at most
  // `maxThreadsPerBlock` threads.
  bool persistent = false;
  int workersPerSM = 1;
  int maxThreadsPerBlock = 1024;
  ScheduleOverrides overrides;
};

// The machine a persistent kernel's tasks are scheduled for: `machine`'s SMs each shared by
// `workers` workers, so every limit of an SM divided among them (the workers are the
// schedule's "SMs").
Machine persistentMachine(Machine machine, int workers);

// Blocks of `sharedBytes` of shared memory each that one of the machine's SMs holds at once.
inline int64_t blocksBySharedMemory(const Machine &machine, int64_t sharedBytes) {
  return machine.sharedBytesPerSM / (sharedBytes + machine.reservedPerBlock);
}

// The machine of `target` (an AMD target's sources still carry the NVIDIA paths: they are
// tuned for kDefaultTarget's), less what the overrides turn off.
Machine machineFor(const TargetDesc &target, const ScheduleOverrides &overrides);

struct GemmTile {
  int BM = 64, BN = 64, warpsM = 2, warpsN = 2, stages = 4;
  int slices = 1;  // warp groups splitting each stage's k steps
  int threads() const { return warpsM * warpsN * slices * 32; }
  // Pipeline stages, or the fp32 accumulator tile and `afterTile` bytes more (an
  // epilogue's own), whichever is larger.
  int64_t sharedBytes(int64_t afterTile = 0) const;
};

// The most column tiles a row may span when they share its sums as one thread-block
// cluster (RMSNorm's backward in a GEMM): the portable cluster size.
constexpr int kMaxClusterTiles = 8;
// That, or 0 where the machine runs no clusters.
inline int maxClusterTiles(const Machine &machine) { return machine.clusters ? kMaxClusterTiles : 0; }

// Whether column tiles run across the accumulator's columns regardless of the output
// groups (each 8 columns then finding their group in the epilogue): several groups of one
// band each, side by side over [0, N) in multiples of 8, each store reading only its own
// accumulator column (a QKV projection's q, k and v without RoPE). A tile of any width
// then holds the epilogue, and no group ends in a partial tile.
bool flatColumns(const GemmSpec &gemm);

// Column tiles of the spec's groups for a tile of BN columns (a group of b bands gets
// BN / b of its own columns per tile; flat columns: N / BN).
int64_t columnTiles(const GemmSpec &gemm, int BN);
// Tiles of BM x BN over every batch: what a launch of one tile a block runs.
int64_t gemmTiles(const GemmSpec &gemm, int BM, int BN);

// Whether every accumulator read of every group stays inside its tile with this BN.
bool tileHoldsEpilogue(const GemmSpec &gemm, int BN);
// The rows and columns of the GEMM tiles every target runs (the SIMT and MFMA paths'): a
// fused epilogue must hold in them, since one kernel source serves every path.
constexpr int kFixedTile = 64;

// The tensor-core (mma.sync) tile for this GEMM on `machine` (overrides.gemmTile forces
// one); throws when no candidate holds the epilogue's reads. `fp32`: operands split for
// 3xTF32 (gemm_mma_tf32.cuh), whose fragments leave registers for at most 128 columns.
GemmTile chooseGemmTile(const GemmSpec &gemm, const Machine &machine, bool fp32 = false);

// The Hopper warpgroup (wgmma) tile: BM 64, 128 or 256 (not warp-specialized), BN 64, 128,
// 160, 192 or 256; none when no candidate holds the epilogue's reads or the machine runs
// no wgmma. overrides.wgmmaTile forces one.
struct WgmmaTile {
  int BM = 128, BN = 128, stages = 4;
  int splits = 1;  // K split across this many blocks per tile
  // Blocks meant to share an SM (registers capped to fit): one block's epilogue then
  // runs while another's tensor cores work.
  int resident = 1;
  // Warp-specialized (gemm_wgmma.cuh v4): a producer warpgroup besides the BM / 64 consumers.
  bool producer = false;
  int splitTiles = 0;  // with splits > 1: only the last this many tiles are split (0: all of them)
  bool tf32 = false;   // gemm_wgmma_tf32.cuh: fp32 stages with their residuals beside them
  int threads() const { return (BM / 64 + (producer ? 1 : 0)) * 128; }
  // Stages, or the accumulator tile and `afterTile` bytes more (an epilogue's own), plus
  // 1 KiB for alignment.
  int64_t sharedBytes(int64_t afterTile = 0) const;
  int blocksPerMultiprocessor(const Machine &machine) const;  // that fit at once: shared memory, threads, `resident`
};
// `aKM`: A is stored [K, M] (a weight gradient's dYᵀ); gemm.bKN says the same of B.
// RMSNorm's backward in the epilogue (gemm.normGrad) takes a tile only where a row's
// column tiles fit one cluster (kMaxClusterTiles), K unsplit.
std::optional<WgmmaTile> chooseWgmmaTile(const GemmSpec &gemm, const Machine &machine, bool aKM = false);
// The tile of gemm_wgmma_tf32.cuh (fp32 operands; the backward's transposed operands on
// v4, transposed as they are split; RMSNorm's backward on v5, a row's tiles one cluster):
// none where the machine runs no wgmma or a row's tiles cannot be one cluster.
std::optional<WgmmaTile> chooseWgmmaTf32Tile(const GemmSpec &gemm, const Machine &machine, bool aKM);
// Whether the warp-specialized `tile` may split the K of its last wave's tiles: beyond one
// wave, and with RMSNorm from two waves on and only past column tile 0 (whose whole tiles
// share the sums).
bool splitsLastWave(const GemmSpec &gemm, const WgmmaTile &tile, const Machine &machine);

// The most rows the matrix-vector path takes on FMAs (more run on tensor cores or tiled).
constexpr int kMaxGemvFmaRows = 2;

// The matrix-vector path of a GEMM with at most 2 rows (gemm_gemv.cuh): blocks of `warps`
// warps over BN columns and a K_SPLITS-th of K each, A's rows staged in shared memory.
struct GemvTile {
  int BM = 1, BN = 16, splits = 1, warps = 8;
  bool tensorCores = false;  // gemm_gemv.cuh v9: mma.sync on groups of 16 columns, up to 16 rows
  // Chained: the blocks of the last wave (the last `multiprocessors`) let the next kernel
  // launch before they wait for their producers (gemm_gemv.cuh v12), not after their
  // products. Taken for one row on FMAs (at two rows it measured slower), and on tensor
  // cores where --chain-tensor-core-gemvs chains them.
  bool dependentsEarly = false;
  // Per group, where a tile is two runs of columns: the second run's distance from the
  // first (tilePairs), else 0.
  std::vector<int64_t> pairs;
  int threads(int warpSize) const { return warps * warpSize; }
  int64_t kRange(const GemmSpec &gemm) const;  // of each split, in elements
  // A staged row's elements (fp32; bf16 on tensor cores, padded: Mma::LDA in gemm_gemv.cuh).
  int64_t stagedRowElements(const GemmSpec &gemm) const;
  bool warpsSplitK() const;  // tensor cores: more warps than column groups, partial tiles added
  int64_t sharedBytes(const GemmSpec &gemm) const;
  int64_t tiles(const GemmSpec &gemm) const;   // column tiles, over the batch
  int64_t blocks(const GemmSpec &gemm) const;  // the grid: every tile's splits
  // The first block of the last wave on `multiprocessors` SMs (the grid's size where none
  // lets its dependents launch early).
  int64_t dependentsEarlyFrom(const GemmSpec &gemm, int multiprocessors) const;
};
// Where a tile of BN columns holds the epilogue's reads only as two runs (each group's
// width / 2 columns, then as many `pair` columns on: RoPE's halves of a head, i and
// i + D/2, in a tile narrower than the head): each group's pair (0 where one run holds its
// reads). None where neither holds.
std::optional<std::vector<int64_t>> tilePairs(const GemmSpec &gemm, int BN);
// The group column where paired tile `tile` of `width` columns starts (its second run
// `pair` on): tiles go through each block of 2 * pair columns a run at a time, as the
// emitted tile_cols does on the device.
inline int64_t pairedTileStart(int64_t tile, int64_t width, int64_t pair) {
  const int64_t half = width / 2;
  return tile / (pair / half) * 2 * pair + tile % (pair / half) * half;
}
// That path's tile, where the GEMM is one (M <= 2 on FMAs; on tensor cores, bf16 kernels
// only, 3 to 8 rows where the tiled paths' 64-column tiles leave SMs idle, or up
// to 16 with overrides.gemvTensorCores: the widest tile of up to 128 columns that gives
// every SM one, else 16 columns; K a multiple of 8, B stored [N, K], not
// RMSNorm's backward) and the machine runs it: the narrowest BN of 16 columns a row or more
// that holds the epilogue, in one run of columns or two (tilePairs; in a persistent kernel,
// the narrowest that leaves at most one tile a worker),
// K split where the tiles leave SMs or workers idle (in a persistent kernel, only where
// splitSavesStreaming). `weightBytes`: B's element size.
// The caller checks that A and B can be read 8 k at a time.
std::optional<GemvTile> chooseGemvTile(const GemmSpec &gemm, const Machine &machine, int weightBytes);

// A GEMV chain's tile (gemv_chain.cuh, tl-fuse-gemv-chains): the producer's output columns a
// block computes, BI, and its warps. BI: the widest power of two from 8 to 32 that divides
// the producer's group (`width`) into a block for every two SMs at least (the reader's K
// slice of each weight row is BI elements: wider reads stream better, fewer blocks less);
// on an H200 that is 32 for the 1.1B and 16 for the workshop, the best measured (8 to 64 for
// the workshop, 16 to 64 for the 1.1B). Or overrides.gemvChainColumns where it divides the group.
struct GemvChainTile {
  int BI = 8, warps = 8;
};
GemvChainTile chooseGemvChainTile(int64_t width, const Machine &machine);
// Why gemv_chain.cuh cannot run a producer of `rows` x `width` outputs over K (its
// accumulator `bands` runs of `width` columns) and its reader of N outputs (over K = width);
// empty when it can: at most kMaxGemvFmaRows rows, K and width read 8 at a time, a tile of 8
// to 256 columns that leaves at most 1024 blocks (the fixed-point sums' range), and shared
// memory within AMD's 64 KiB at any tile. tl-fuse-gemv-chains asks before it fuses.
std::string whyNotGemvChain(int64_t rows, int64_t K, int64_t width, int bands, int64_t N);
// gemv_chain.cuh's shared memory, in bytes.
int64_t gemvChainSharedBytes(int64_t rows, int64_t K, int64_t N, int BI, int bands, int warps);

// The cost model's rates, per SM: an H100's measured bf16 tensor-core rate and HBM
// bandwidth (shared/TINYLLAMA.md, the device notes); fp32 kernels run on FMAs.
constexpr double kTensorFlopsPerSM = 790e12 / 132, kFmaFlopsPerSM = 51e12 / 132;
constexpr double kBytesPerSM = 3.0e12 / 132;
// A persistent task's fixed cost (the wait, the entry, A's staging, the epilogue, the
// publish): fit so the estimates of the 1.1B's and the workshop's decode steps come within
// 10 % of what an H100 measured (bench/RESULTS.md).
constexpr double kTaskOverheadUs = 2.5;
// A split matrix-vector tile's join in a persistent kernel (its part through the workspace,
// the count, the last split's sum): what leaving it out saved the 1.1B's layer on an H100.
constexpr double kSplitJoinUs = 3.0;
// Whether splitting a tile that streams `tileBytes` of weights `splits` ways saves a
// worker more streaming time than the join costs.
bool splitSavesStreaming(int64_t tileBytes, int64_t splits);

struct AttentionTile {
  int queries = 64;  // QT: queries per head per block
  int heads = 1;     // HB: query heads sharing the block's K and V
  int mTiles = 1;    // MT: m16 tiles of queries per warp (2 only for head size 64)
  int resident = 1;  // blocks meant to share an SM: registers capped to fit them
  int elementBytes = 2;  // of the operands: bf16, or fp32 (split for tf32 products)
  int threads() const { return heads * (queries / (16 * mTiles)) * 32; }
  int64_t blocks(const AttentionSpec &spec) const;
  int64_t sharedBytes(const AttentionSpec &spec) const;
};

// overrides.attentionTile forces one. `fp32`: operands split for tensor-core products
// (attention_tiles.cuh's tl_attention_bf16x3 and tl_attention_tf32): one m16 tile a warp
// (two measured slower), and query tiles that give every SM two blocks.
AttentionTile chooseAttentionTile(const AttentionSpec &spec, const Machine &machine, bool fp32 = false);

} // namespace tlc::codegen
