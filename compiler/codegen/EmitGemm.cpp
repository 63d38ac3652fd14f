// GEMM kernels: a Spec of hooks for gemm_mma.cuh and gemm_wgmma.cuh (NVIDIA tensor cores;
// their _tf32 versions for fp32 operands), gemm_mfma.cuh (AMD gfx90a) and gemm_simt.cuh
// (fp32 at the highest matmul precision, or operands the matrix-unit loaders cannot take).
#include "compiler/codegen/GemmSource.h"

#include "runtime/Bf16Parts.h"
#include "runtime/Error.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <climits>
#include <map>
#include <cstdlib>
#include <optional>

namespace tlc::codegen::gemm {

int64_t ceilDiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

constexpr int64_t kSimtSharedBytes = 64 * 72 * 4 + 64 * 4;

// RMSNorm's backward in the epilogue (gemm_norm_grad.cuh): its shared memory after the
// accumulator tile and row scales, and the workspace and sync words of the form without
// clusters (a superset of the clustered form's), for tiles of BM x BN.
int64_t normGradSharedBytes(int BM, int threads) { return (4 * int64_t(BM) + 8 * int64_t(threads)) * 4; }
int64_t normGradWorkspaceBytes(const GemmSpec &gemm, int BM, int BN) {
  int64_t tilesM = ceilDiv(gemm.M, BM), tilesN = ceilDiv(gemm.N, BN);
  return (tilesM * gemm.N + tilesN * 2 * tilesM * BM + gemm.M * gemm.N) * 4;
}
int64_t normGradSyncWords(const GemmSpec &gemm, int BM, int BN) { return ceilDiv(gemm.N, BN) + ceilDiv(gemm.M, BM); }

GemmOperands gemmOperands(const KernelSource &source, const GemmSpec &gemm) {
  auto all = [&](DType dtype) {  // A (the loads it is computed from, where it is), B and the gain
    bool a = true;
    if (!gemm.aValue) a = source.dtype(gemm.a) == dtype;
    else
      for (const ElementExpr *load : leaves(gemm.aValue, ElementExpr::Kind::Load)) a = a && source.dtype(load->param) == dtype;
    return a && source.dtype(gemm.b) == dtype && (gemm.gain < 0 || source.dtype(gemm.gain) == dtype);
  };
  if (all(DType::BF16)) return {true, 0};
  // An fp32 A computed as it is loaded stays on FMAs: the tf32 mainloops copy A as stored.
  int products = tf32Products(source.matmulPrecision());
  if (!gemm.aValue && all(DType::F32) && products > 0) return {true, products};
  return {};
}

std::vector<int64_t> sampleValues(int64_t extent) {
  std::vector<int64_t> values;
  for (int64_t v : {0, 1, 2, 3, 5, 7, 8, 13, 16, 31, 63, 64, 127, 128, 129, 255, 256, 511, 1023, 2047})
    if (v < extent) values.push_back(v);
  values.push_back(extent - 1);
  return values;
}

// How many tile columns of `group` a tile of BN columns holds, as C.
std::string bandWidth(const GemmGroup &group) {
  return group.bands.size() == 1 ? "BN" : fmt::format("(BN / {})", group.bands.size());
}

// The band an accumulator leaf reads, and whether it reads the group's own column of it.
struct BandRead {
  size_t band = 0;
  bool aligned = false;  // column == band start + c
};

BandRead bandOf(const ElementExpr &leaf, const GemmGroup &group) {
  int64_t delta = leaf.column.evaluate({{"c", 0}, {"m", 0}});
  bool constant = isShiftedIdentity(leaf.column, "c", group.width, delta, {{"m", 0}});
  for (size_t b = 0; b < group.bands.size(); ++b) {
    if (constant && delta == group.bands[b]) return {b, true};
    int64_t local = delta - group.bands[b];
    if (!constant && local >= 0 && local < group.width) return {b, false};
  }
  throw Error("code generation: an epilogue reads an accumulator column outside its tile");
}

// offset = row part (of `rowVar` and bt) + column part (of k), where the layout allows it
// (splits, head splits and merges, transposes do): the tensor-core loaders then compute
// each thread's row offsets once and only move along k.
std::optional<Separated> separate(const IndexExpr &offset, const std::string &rowVar, int64_t rows, int64_t batch,
                                  int64_t K) {
  IndexExpr origin = offset.substitute(rowVar, IndexExpr(0)).substitute("bt", IndexExpr(0)).substitute("k", IndexExpr(0));
  if (!origin.isConstant()) return std::nullopt;
  Separated parts{offset.substitute("k", IndexExpr(0)),
                  offset.substitute(rowVar, IndexExpr(0)).substitute("bt", IndexExpr(0)) - origin.constant()};
  for (int64_t r : sampleValues(rows))
    for (int64_t b : sampleValues(batch))
      for (int64_t k = 0; k < K; k += std::max<int64_t>(1, K / 512)) {
        std::map<std::string, int64_t> point{{rowVar, r}, {"bt", b}, {"k", k}};
        if (offset.evaluate(point) != parts.row.evaluate(point) + parts.column.evaluate(point)) return std::nullopt;
      }
  return parts;
}

// The hooks of a plain A: where element [m, k] (after the prologue's layout changes) is.
std::string operandA(const KernelSource &source, const GemmSpec &gemm, const std::optional<Separated> &parts) {
  const std::string &type = source.type(gemm.a);
  const std::string a = "p." + source.name(gemm.a), offset = indexCode(gemm.aOffset);
  std::string hooks = fmt::format("  TL_DEVICE static const {} *a_base(const Params &p) {{ return {}; }}\n", type, a);
  hooks += fmt::format("  TL_DEVICE static const {} *a_src(const Params &p, int bt, int m, int k) {{ (void)bt; return {} + "
                       "({}); }}\n",
                       type, a, offset);
  hooks += fmt::format("  TL_DEVICE static float a_elem(const Params &p, int bt, int m, int k) {{ (void)bt; return "
                       "tl_ld({}, {}); }}\n",
                       a, offset);
  if (parts) {  // a_src = a_base + a_row + a_col
    hooks += fmt::format("  TL_DEVICE static int a_row(int bt, int m) {{ (void)bt; return {}; }}\n", indexCode(parts->row));
    hooks += fmt::format("  TL_DEVICE static int a_col(int k) {{ return {}; }}\n", indexCode(parts->column));
  }
  return hooks;
}

// The hooks of an A computed as it is loaded: 8 consecutive k of row m (the tensor-core
// paths store them to shared memory in bf16), or one element (the FMA path).
std::string operandAComputed(const GemmSpec &gemm, ElementCode &code,
                             const std::map<std::string, std::vector<int64_t>> &samples) {
  ChunkLoop chunk{"k", "k0", 8, gemm.K, samples, {}}, single{"k", "k0", 1, gemm.K, samples, {}};
  return "  TL_DEVICE static void a_chunk(const Params &p, int bt, int m, int k0, float (&v)[8]) {\n"
         "    (void)bt; (void)m;\n" +
         code.values(gemm.aValue, "v", chunk, "    ") +
         "  }\n"
         "  TL_DEVICE static float a_elem(const Params &p, int bt, int m, int k0) {\n"
         "    (void)bt; (void)m;\n    float v[1];\n" +
         code.values(gemm.aValue, "v", single, "    ") + "    return v[0];\n  }\n";
}

// Values the index expressions are checked at, per loop variable.
std::map<std::string, std::vector<int64_t>> gemmSamples(const GemmSpec &gemm, bool withK) {
  std::map<std::string, std::vector<int64_t>> s{{"m", sampleValues(gemm.M)}, {"bt", sampleValues(gemm.batch)}};
  if (withK) s["k"] = sampleValues(gemm.K);
  return s;
}

// Whether B can be read as a weight's bf16 parts (blocks of 32 floats, each as its 32 high
// parts, then its 32 residuals): an f32 weight of a forward, whose element [n, k] is at a
// row offset of whole blocks plus k, with K whole blocks too.
bool bReadsWeightParts(const KernelSource &source, const GemmSpec &gemm, const std::optional<Separated> &bParts) {
  const Value &weight = source.value(gemm.b);
  const int64_t block = int64_t(kBf16PartsBlock);  // also the tiles' k step: a k tile's row is one block
  if (!source.weightPartsAllowed() || weight.storage != Storage::Weight || weight.dtype != DType::F32 || !bParts ||
      gemm.bKN || gemm.K % block != 0 || weight.numElements() % block != 0)
    return false;
  for (int64_t k = 0; k < gemm.K; ++k)
    if (bParts->column.evaluate({{"k", k}}) != k) return false;
  for (int64_t b : sampleValues(gemm.batch))
    for (int64_t n = 0; n < gemm.N; ++n)
      if (bParts->row.evaluate({{"n", n}, {"bt", b}}) % block != 0) return false;
  return true;
}

bool readsEightAlongK(const GemmSpec &gemm, const GemmPlan &plan) {
  ChunkLoop eightAlongK{"k", "k", 8, gemm.K, gemmSamples(gemm, false), {}};
  eightAlongK.samples["n"] = sampleValues(gemm.N);
  return (plan.computedA || (plan.aParts && ElementCode::contiguous(gemm.aOffset, eightAlongK))) && plan.bParts &&
         !gemm.bKN && ElementCode::contiguous(gemm.bOffset, eightAlongK);
}

GemmPlan planGemm(const KernelSource &source, const GemmSpec &gemm) {
  GemmPlan plan;
  // Operands the matrix units take: bf16, or fp32 split for tf32 products unless the
  // precision asks for exact ones (gemm_mma_tf32.cuh: 3xTF32, or plain TF32).
  plan.operands = gemmOperands(source, gemm);
  plan.bConstant = source.constantArgument(gemm.b);
  // The matrix-unit paths load 16 bytes of A along k, and of B along k (or n when B is
  // stored [K, N]), with one access: 8 bf16 or 4 floats.
  const int chunk = plan.operands.tf32Products ? 4 : 8;
  ChunkLoop alongK{"k", "k", chunk, gemm.K, gemmSamples(gemm, false), {}};
  ChunkLoop alongN{"n", "n", chunk, gemm.N, gemmSamples(gemm, true), {}};
  ChunkLoop alongM{"m", "m", chunk, gemm.M, {{"bt", sampleValues(gemm.batch)}, {"k", sampleValues(gemm.K)}}, {}};
  alongK.samples["n"] = sampleValues(gemm.N);
  // A computed as it is loaded (a prologue of elementwise ops) goes to the tensor cores in
  // bf16 where its inputs are bf16, as an elementwise kernel would have stored it.
  plan.computedA = gemm.aValue != nullptr;
  plan.aParts = plan.computedA ? std::nullopt : separate(gemm.aOffset, "m", gemm.M, gemm.batch, gemm.K);
  if (plan.aParts && plan.aParts->row.maxValue() > INT32_MAX) plan.aParts.reset();  // row offsets are 32-bit
  plan.bParts =
      gemm.bKN ? std::optional<Separated>(Separated{}) : separate(gemm.bOffset, "n", gemm.N, gemm.batch, gemm.K);
  if (plan.bParts && !gemm.bKN && plan.bParts->row.maxValue() > INT32_MAX) plan.bParts.reset();
  // A few rows (a decode step): B streamed once by the matrix-vector path.
  plan.flat = flatColumns(gemm);
  if (readsEightAlongK(gemm, plan)) {
    plan.gemv = chooseGemvTile(gemm, source.machine(), int(dtypeBytes(source.dtype(gemm.b))));
    if (plan.gemv) return plan;
  }
  // A stored [K, M] (read down its columns): NVIDIA's mma.sync path transposes it as it
  // loads; the other paths read A along k.
  plan.aKM = plan.operands.matrixUnits && !plan.computedA && !gemm.rowNorm &&
             !ElementCode::contiguous(gemm.aOffset, alongK) && ElementCode::contiguous(gemm.aOffset, alongM);
  plan.bf16Parts = plan.operands.tf32Products > 0 && !plan.aKM && !gemm.bKN;
  plan.matrixUnits = plan.operands.matrixUnits && gemm.K % 8 == 0 &&
                     (plan.computedA || plan.aKM || (ElementCode::contiguous(gemm.aOffset, alongK) && plan.aParts)) &&
                     ElementCode::contiguous(gemm.bOffset, gemm.bKN ? alongN : alongK) &&
                     (!gemm.bKN || gemm.groups.size() == 1) && tileHoldsEpilogue(gemm, kFixedTile) && plan.bParts;
  if (!tileHoldsEpilogue(gemm, kFixedTile) && !plan.matrixUnits)
    throw Error(fmt::format("code generation: kernel '{}': its epilogue needs tiles wider than 64 columns", source.entry()));
  plan.flat = flatColumns(gemm);

  const Machine &machine = source.machine();
  plan.nvidia = plan.matrixUnits ? chooseGemmTile(gemm, machine, plan.operands.tf32Products > 0)
                                 : GemmTile{64, 64, 2, 2, 1, 1};
  // RMSNorm's backward runs on wgmma clustered only (without clusters: the mma.sync path's workspace form).
  if (plan.matrixUnits && !(gemm.normGrad && maxClusterTiles(machine) == 0))
    plan.hopper = plan.operands.tf32Products ? chooseWgmmaTf32Tile(gemm, machine, plan.aKM)
                                             : chooseWgmmaTile(gemm, machine, plan.aKM);
  const std::optional<WgmmaTile> &hopper = plan.hopper;
  plan.weightParts = hopper && plan.bf16Parts && bReadsWeightParts(source, gemm, plan.bParts);
  plan.hopperRowTiles = hopper ? gemm.batch * ceilDiv(gemm.M, hopper->BM) : 0;
  plan.hopperTiles = hopper ? plan.hopperRowTiles * columnTiles(gemm, hopper->BN) : 0;
  // Split-K: every tile, or only those of a short last wave.
  plan.hopperSplitTiles = !hopper || hopper->splits == 1 ? 0
                          : hopper->splitTiles > 0      ? std::min<int64_t>(hopper->splitTiles, plan.hopperTiles)
                                                        : plan.hopperTiles;
  // Beyond one wave, RMSNorm's sums of squares are computed by column tile 0 only and shared
  // (also where the last wave's tiles split K; never where every tile does).
  plan.normShared = hopper && gemm.rowNorm && plan.hopperSplitTiles < plan.hopperTiles &&
                    plan.hopperTiles > machine.multiprocessors * hopper->blocksPerMultiprocessor(machine);
  // RMSNorm's backward: a row's column tiles as one cluster on NVIDIA's sm_90, for the
  // tile the NVIDIA path runs (AMD has no clusters); on sm_90a for wgmma's tile.
  plan.nvidiaColumnTiles = columnTiles(gemm, plan.matrixUnits ? plan.nvidia.BN : kFixedTile);
  plan.clusterTiles =
      gemm.normGrad && plan.nvidiaColumnTiles <= maxClusterTiles(machine) ? plan.nvidiaColumnTiles : 1;
  plan.hopperColumnTiles = hopper ? columnTiles(gemm, hopper->BN) : 0;
  plan.hopperCluster = hopper && gemm.normGrad ? plan.hopperColumnTiles : 1;
  return plan;
}


ColumnMapping columnMapping(const GemmSpec &gemm, bool flat, const std::vector<int64_t> &pairs) {
  ColumnMapping map;
  if (flat) {
    map.tilesN = "(N + BN - 1) / BN;  // flat: across the groups";
    map.tileCols = "    const int c = tn * BN; return {-1, c, N - c < BN ? N - c : BN};\n";
    map.bColumn = "    const int n = t.col0 + j; return n < N ? n : -1;  // flat: the accumulator column\n";
    return map;
  }
  std::vector<std::string> groupTiles;
  map.bColumn = "    switch (t.group) {\n";
  for (size_t g = 0; g < gemm.groups.size(); ++g) {
    const GemmGroup &group = gemm.groups[g];
    map.groupTiles += fmt::format("  static constexpr int GROUP{}_TILES = ({} + {} - 1) / {};\n", g, group.width,
                                  bandWidth(group), bandWidth(group));
    groupTiles.push_back(fmt::format("GROUP{}_TILES", g));
    const int64_t pair = g < pairs.size() ? pairs[g] : 0;
    std::string body =
        pair == 0 ? fmt::format("const int w = {}, c = tn * w; return {{{}, c, {} - c < w ? {} - c : w}};",
                                bandWidth(group), g, group.width, group.width)
                  : fmt::format("const int w = {0}, per = {2} / (w / 2), c = tn / per * {3} + tn % per * (w / 2); "
                                "static_assert({2} % (w / 2) == 0, \"whole runs a pair\"); return {{{1}, c, w, {2}}};",
                                bandWidth(group), g, pair, 2 * pair);
    if (g + 1 < gemm.groups.size())
      map.tileCols += fmt::format("    if (tn < GROUP{}_TILES) {{ {} }}\n    tn -= GROUP{}_TILES;\n", g, body, g);
    else map.tileCols += fmt::format("    {{ {} }}\n", body);
    std::string start = fmt::format("{}", group.bands[0]);
    for (size_t band = 1; band < group.bands.size(); ++band)
      start = fmt::format("band == {} ? {} : {}", band, group.bands[band], start);
    map.bColumn += fmt::format(
        "    case {}: {{ const int w = {}, band = j / w, c = {}; (void)band; return c < {} ? ({}) + c : -1; }}\n", g,
        bandWidth(group), pair == 0 ? "t.col0 + j % w" : "tl_tile_column(t, j % w)", group.width, start);
  }
  map.tilesN = fmt::format("{};", fmt::join(groupTiles, " + "));
  map.bColumn += "    }\n    return -1;\n";
  return map;
}

// The spec's compile-time shape and switches, which the mainloop templates read.
std::string specConstants(const KernelSource &source, const GemmSpec &gemm, const GemmPlan &plan,
                          const ColumnMapping &columns, const std::string &specName) {
  const std::string &entry = source.entry();
  std::string spec;
  spec += fmt::format("template <int BM_, int BN_, int WARPS_M_, int WARPS_N_, int STAGES_, int K_SLICES_, int K_SPLITS_, "
                      "int SPLIT_TILES_>\n"
                      "struct {} {{\n",
                      specName.empty() ? entry + "_spec" : specName);
  spec += fmt::format("  using Params = {}_params;\n", entry);
  spec += "  static constexpr int BM = BM_, BN = BN_, WARPS_M = WARPS_M_, WARPS_N = WARPS_N_, STAGES = STAGES_, "
          "K_SLICES = K_SLICES_, K_SPLITS = K_SPLITS_, SPLIT_TILES = SPLIT_TILES_;\n";
  spec += fmt::format("  static constexpr int M = {}, N = {}, K = {}, BATCH = {};\n", gemm.M, gemm.N, gemm.K, gemm.batch);
  spec += "  static constexpr int TILES_M = (M + BM - 1) / BM;\n";
  spec += columns.groupTiles;
  spec += fmt::format("  static constexpr int TILES_N = {}\n", columns.tilesN);
  spec += fmt::format("  static constexpr bool ROW_NORM = {}, B_KN = {}, A_KM = {}, CHAINED = {};\n", gemm.rowNorm,
                      gemm.bKN, plan.matrixUnits && plan.aKM, source.chained());
  spec += fmt::format("  static constexpr bool A_COMPUTED = {};  // A's elements computed as they are loaded\n",
                      plan.computedA);
  spec += fmt::format("  static constexpr bool NORM_GAIN = {};  // RMSNorm's gain applied to A (not folded into B)\n",
                      gemm.gain >= 0);
  spec += fmt::format("  static constexpr float NORM_EPS = {};\n", floatLiteral(gemm.rowNorm ? gemm.eps : 0.0));
  spec += fmt::format("  static constexpr bool NORM_SHARED = {};  // sm_90a: row sums of squares shared by column tiles\n",
                      plan.normShared);
  spec += fmt::format("  static constexpr bool NORM_GRAD = {};  // the epilogue is RMSNorm's backward (gemm_norm_grad.cuh)\n",
                      gemm.normGrad.has_value());
  spec += fmt::format("  static constexpr int TF32_PRODUCTS = {};  // fp32 operands on tensor cores: 3 (3xTF32) or 1\n",
                      plan.operands.tf32Products);
  spec += fmt::format("  static constexpr bool BF16_PARTS = {};  // sm_90a's wgmma: the products' parts bf16 (3xBF16, "
                      "or medium's one), not tf32\n",
                      plan.bf16Parts);
  spec += fmt::format("  static constexpr bool B_PARTS = {};  // sm_90a: B a weight split into bf16 parts at load "
                      "(gemm_wgmma_tf32.cuh v9)\n",
                      plan.weightParts);
  spec += fmt::format("  static constexpr bool B_CONSTANT = {};  // no kernel writes B: may be read before the producers' wait\n",
                      plan.bConstant);
  if (plan.gemv) {
    spec += fmt::format("  static constexpr bool GEMV_MMA = {};  // matrix-vector products on tensor cores (v9)\n",
                        plan.gemv->tensorCores);
    spec += fmt::format("  static constexpr int DEPENDENTS_EARLY_FROM = {};  // blocks from here on let the next kernel "
                        "launch before their wait (v12)\n",
                        plan.gemv->dependentsEarlyFrom(gemm, source.machine().multiprocessors));
  }
  spec += fmt::format("  static constexpr int CLUSTER_N = {} && TILES_N <= {} ? TILES_N : 1;  // a row's tiles, one "
                      "cluster where the target has them\n",
                      gemm.normGrad && maxClusterTiles(source.machine()) > 0, kMaxClusterTiles);
  if (gemm.normGrad) {
    const RowSpec &norm = *gemm.normGrad;
    auto pointer = [&](const char *hook, int param, bool output) {
      if (param < 0)
        return fmt::format("  TL_DEVICE static {}float *{}(const Params &) {{ return nullptr; }}\n",
                           output ? "" : "const ", hook);
      return fmt::format("  TL_DEVICE static {}{} *{}(const Params &p) {{ return p.{}; }}\n", output ? "" : "const ",
                         source.type(param), hook, source.name(param));
    };
    spec += fmt::format("  static constexpr float NORM_GRAD_EPS = {};\n", floatLiteral(norm.eps));
    spec += fmt::format("  static constexpr bool NORM_GRAD_RESIDUAL = {}, NORM_GRAD_NORMALIZED = {};\n", norm.residual >= 0,
                        norm.normalized >= 0);
    spec += pointer("norm_x", norm.x, false) + pointer("norm_gain", norm.gain, false) +
            pointer("norm_residual", norm.residual, false) + pointer("norm_dx", norm.y, true) +
            pointer("norm_dgain", norm.gainGrad, true) + pointer("norm_normalized", norm.normalized, true);
  }
  spec += "  TL_DEVICE static tl_tile_cols tile_cols(int tn) {\n" + columns.tileCols + "  }\n";
  return spec;
}

std::string operandAHooks(const KernelSource &source, const GemmSpec &gemm, const GemmPlan &plan, ElementCode &code) {
  const std::string &bType = source.type(gemm.b);
  std::string spec = plan.computedA ? operandAComputed(gemm, code, gemmSamples(gemm, false))
                                    : operandA(source, gemm, plan.aParts);
  if (gemm.gain >= 0) {
    std::string gain = "p." + source.name(gemm.gain);
    spec += fmt::format("  TL_DEVICE static const {} *gain(const Params &p) {{ return {}; }}\n", source.type(gemm.gain), gain);
    spec += fmt::format("  TL_DEVICE static float gain_elem(const Params &p, int k) {{ return tl_ld({}, k); }}\n", gain);
  } else {
    spec += fmt::format("  TL_DEVICE static const {} *gain(const Params &) {{ return nullptr; }}\n", bType);
    spec += "  TL_DEVICE static float gain_elem(const Params &, int) { return 1.0f; }\n";
  }
  return spec;
}

std::string operandBHooks(const KernelSource &source, const GemmSpec &gemm, const GemmPlan &plan,
                          const ColumnMapping &columns) {
  const std::string &bType = source.type(gemm.b);
  const std::string b = "p." + source.name(gemm.b);
  std::string spec = "  TL_DEVICE static int b_column(const tl_tile_cols &t, int j) {\n" + columns.bColumn + "  }\n";
  spec += fmt::format("  TL_DEVICE static const {} *b_base(const Params &p) {{ return {}; }}\n", bType, b);
  spec += fmt::format("  TL_DEVICE static const {0} *b_src(const Params &p, int bt, const tl_tile_cols &t, int j, int k) {{\n"
                      "    (void)bt; const int n = b_column(t, j); return n < 0 ? nullptr : {1} + ({2});\n  }}\n",
                      bType, b, indexCode(gemm.bOffset));
  if (plan.bParts && !gemm.bKN) {  // b_src = b_base + b_row + b_col
    spec += fmt::format("  TL_DEVICE static int b_row(int bt, const tl_tile_cols &t, int j) {{\n"
                        "    (void)bt; const int n = b_column(t, j); return n < 0 ? -1 : {};\n  }}\n",
                        indexCode(plan.bParts->row));
    spec += fmt::format("  TL_DEVICE static int b_col(int k) {{ return {}; }}\n", indexCode(plan.bParts->column));
  }
  spec += fmt::format("  TL_DEVICE static float b_elem(const Params &p, int bt, const tl_tile_cols &t, int j, int k) {{\n"
                      "    (void)bt; const int n = b_column(t, j); return n < 0 ? 0.0f : tl_ld({}, {});\n  }}\n",
                      b, indexCode(gemm.bOffset));
  return spec;
}


std::function<std::string(const ElementExpr &)> describeAccumulator(const GemmGroup &group) {
  return [group](const ElementExpr &leaf) {
    BandRead read = bandOf(leaf, group);
    return read.band == 0 ? std::string("acc") : fmt::format("acc[{} + c]", group.bands[read.band]);
  };
}

std::function<std::string(const ElementExpr &, const std::string &)>
epilogueAccumulator(const GemmGroup &group, bool paired) {
  // The tile's place of group column x (its row's index): two runs where the tile pairs them.
  auto local = [paired](const std::string &x) { return paired ? fmt::format("tl_tile_local(t, {})", x) : x + " - t.col0"; };
  return [group, local](const ElementExpr &leaf, const std::string &i) {
    BandRead read = bandOf(leaf, group);
    std::string width = bandWidth(group);
    if (read.aligned) return read.band == 0 ? fmt::format("v[{}]", i) : fmt::format("row[lc + {} + {} * {}]", i, read.band, width);
    std::string column = indexCode(leaf.column - group.bands[read.band]);
    return read.band == 0 ? fmt::format("row[{}]", local(column))
                          : fmt::format("row[{} * {} + {}]", read.band, width, local(column));
  };
}

EpilogueCode epilogueHook(const KernelSource &source, const GemmSpec &gemm, bool flat, const std::vector<int64_t> &pairs,
                          ElementCode &code) {
  EpilogueCode result;
  std::string epilogue;
  for (size_t g = 0; g < gemm.groups.size(); ++g) {
    const GemmGroup &group = gemm.groups[g];
    const bool paired = g < pairs.size() && pairs[g] != 0;
    ChunkLoop loop{"c", "c0", 8, group.width, {{"m", sampleValues(gemm.M)}, {"bt", sampleValues(gemm.batch)}}, {}};
    loop.accumulator = epilogueAccumulator(group, paired);
    epilogue += fmt::format("    case {}: {{  // columns {}..{} of this group's output\n      const int c0 = {};\n", g, 0,
                            group.width - 1, paired ? "tl_tile_column(t, lc)" : "t.col0 + lc");
    epilogue += code.chunk(group.stores, loop, "      ");
    epilogue += "    } break;\n";
    std::vector<std::string> stores;
    // Reads of a band after the first say which: acc[2048 + c] (up beside gate).
    auto accumulator = describeAccumulator(group);
    for (const Store &store : group.stores) {
      // An output written by several stores (a concatenation's pieces) says where each goes.
      bool shared = std::count_if(group.stores.begin(), group.stores.end(),
                                  [&](const Store &other) { return other.param == store.param; }) > 1;
      int64_t column = store.offset.evaluate({{"m", 0}, {"c", 0}, {"bt", 0}});
      std::string where = !shared ? "" : column ? fmt::format("[.., {} + c]", column) : "[.., c]";
      stores.push_back(
          fmt::format("{}{} = {}", source.name(store.param), where, describe(store.value, source.names(), accumulator)));
    }
    std::vector<std::string> bands;
    for (int64_t start : group.bands) bands.push_back(fmt::format("{}..{}", start, start + group.width - 1));
    result.details.push_back(
        fmt::format("epilogue, accumulator columns {}: {}", fmt::join(bands, " with "), fmt::join(stores, "; ")));
  }
  // Flat tiles: these 8 accumulator columns' group, and the tile's start in its columns.
  std::string groupOfChunk;
  if (flat) {
    groupOfChunk = "    const int a = tile.col0 + lc;\n    const tl_tile_cols t = ";
    for (size_t g = 0; g + 1 < gemm.groups.size(); ++g)
      groupOfChunk += fmt::format("a < {0} ? tl_tile_cols{{{1}, a - {2} - lc, tile.width}}\n                           : ",
                                  gemm.groups[g].bands[0] + gemm.groups[g].width, g, gemm.groups[g].bands[0]);
    groupOfChunk += fmt::format("tl_tile_cols{{{0}, a - {1} - lc, tile.width}};\n", gemm.groups.size() - 1,
                                gemm.groups.back().bands[0]);
  }
  result.hook += fmt::format("  TL_DEVICE static void epilogue(const Params &p, const tl_tile_cols &{}, int bt, int m, int lc, "
                             "const float (&v)[8],\n                                const float *row) {{\n",
                             flat ? "tile" : "t");
  result.hook += groupOfChunk;
  result.hook += "    (void)p; (void)bt; (void)v; (void)row;\n    switch (t.group) {\n";
  result.hook += epilogue;
  result.hook += "    }\n  }\n};\n";
  return result;
}

// RMSNorm's backward in the epilogue, in words: what it computes and how a row's tiles
// share their sums.
std::vector<std::string> normGradDetails(const KernelSource &source, const GemmSpec &gemm, const GemmPlan &plan) {
  const RowSpec &norm = *gemm.normGrad;
  std::vector<std::string> details = {fmt::format(
      "epilogue, RMSNorm's backward (eps {}) on the accumulator d y: {} = r (g dy - x r mean){} with x = {}, g = {}, "
      "r = 1 / sqrt(mean(x^2) + eps), mean = r sum(g dy x) / {}; {} = sum over rows of dy x r{}",
      norm.eps, source.name(norm.y), norm.residual >= 0 ? fmt::format(" + {}", source.name(norm.residual)) : "",
      source.name(norm.x), source.name(norm.gain), gemm.N, source.name(norm.gainGrad),
      norm.normalized >= 0 ? fmt::format("; {} = x r g", source.name(norm.normalized)) : "")};
  details.push_back(
      plan.clusterTiles > 1 || plan.hopperCluster > 1
          ? fmt::format("the row sums span {} column tiles{}: on sm_90 they are one thread-block cluster, each "
                        "tile's partial sums read by the others from its shared memory (distributed shared "
                        "memory), so d y is never stored; elsewhere each tile leaves d y and its sums in the "
                        "workspace and the row's last tile finishes the row. d gain: each tile's column sums, "
                        "added in order by the last row tile",
                        plan.nvidiaColumnTiles,
                        plan.hopper && plan.hopperColumnTiles != plan.nvidiaColumnTiles
                            ? fmt::format(" ({} on sm_90a)", plan.hopperColumnTiles)
                            : "")
      : plan.nvidiaColumnTiles == 1
          ? std::string("a row is one column tile: it leaves d y and its sums in the workspace and finishes the row "
                        "from there. d gain: each tile's column sums, added in order by the last row tile")
          : fmt::format("the row sums span {} column tiles (more than a portable cluster): each tile leaves d y and "
                        "its sums in the workspace and the row's last tile finishes the row. d gain: each tile's "
                        "column sums, added in order by the last row tile",
                        plan.nvidiaColumnTiles));
  return details;
}

// What an fp32 GEMM multiplies on the tensor cores, at its precision and on each path.
std::string fp32ProductsLine(const GemmPlan &plan) {
  const std::string weights = plan.weightParts ? "B, a weight, split into its parts once, when the weights are loaded" : "";
  if (plan.operands.tf32Products == 3)
    return "fp32 operands on NVIDIA tensor cores (matmul precision high): " +
           (plan.bf16Parts ? "on sm_90a each element a bf16 high part and residual, three bf16 products accumulated in "
                             "fp32 (3xBF16" + (weights.empty() ? "" : "; " + weights) + "); elsewhere tf32 parts (3xTF32)"
                           : std::string("each element a tf32 high part and residual, three tf32 products accumulated "
                                         "in fp32 (3xTF32)"));
  return "fp32 operands on NVIDIA tensor cores (matmul precision medium): one product, " +
         (plan.bf16Parts ? "of the bf16 high parts on sm_90a" + (weights.empty() ? "" : " (" + weights + ")") +
                               "; of the tf32-rounded operands elsewhere (plain TF32)"
                         : std::string("of the tf32-rounded operands (plain TF32)"));
}

std::string describeOperandA(const KernelSource &source, const GemmSpec &gemm, const GemmPlan &plan) {
  return fmt::format("{}{}",
                     plan.computedA ? describe(gemm.aValue, source.names()) + " computed as it is loaded" : source.name(gemm.a),
                     !gemm.rowNorm ? ""
                     : gemm.gain >= 0
                         ? fmt::format(" normalized per row (rmsnorm, gain {}, eps {}): the gain scales A as it "
                                       "is loaded, the inverse RMS the accumulator rows",
                                       source.name(gemm.gain), gemm.eps)
                         : fmt::format(" normalized per row (rmsnorm, eps {}; its gain was folded into {}'s "
                                       "columns when the weights were loaded): the inverse RMS scales the "
                                       "accumulator rows",
                                       gemm.eps, source.name(gemm.b)));
}

// The kernel's header comment: what it computes and on which path with which tile.
std::vector<std::string> gemmHeader(const KernelSource &source, const GemmSpec &gemm, const GemmPlan &plan,
                                    const std::vector<std::string> &epilogueDetails) {
  const std::optional<WgmmaTile> &hopper = plan.hopper;
  std::vector<std::string> headerLines;
  headerLines.push_back(fmt::format("GEMM [batch {}] M {} x N {} x K {}: acc = A · B{} in fp32{}", gemm.batch, gemm.M,
                                    gemm.N, gemm.K, gemm.bKN ? " (B stored [K, N])" : "ᵀ",
                                    plan.aKM ? " (A stored [K, M])" : ""));
  headerLines.push_back("prologue: A = " + describeOperandA(source, gemm, plan));
  std::vector<std::string> details = gemm.normGrad ? normGradDetails(source, gemm, plan) : epilogueDetails;
  headerLines.insert(headerLines.end(), details.begin(), details.end());
  if (plan.gemv) {
    const GemvTile &gemv = *plan.gemv;
    // Groups whose tiles are two runs of columns (RoPE's pairs in a tile narrower than a head).
    std::vector<std::string> paired;
    for (size_t g = 0; g < gemv.pairs.size() && g < gemm.groups.size(); ++g)
      if (gemv.pairs[g] != 0)
        paired.push_back(fmt::format("{}..{} as two runs of {}, {} apart", gemm.groups[g].bands[0],
                                     gemm.groups[g].bands[0] + gemm.groups[g].width - 1,
                                     gemv.BN / int64_t(gemm.groups[g].bands.size()) / 2, gemv.pairs[g]));
    const std::string runs = paired.empty() ? "" : fmt::format(" (accumulator columns {})", fmt::join(paired, "; "));
    const std::string split =
        gemv.splits > 1 ? fmt::format(", K split {} ways (partial tiles added by the last split to arrive)", gemv.splits)
                        : std::string();
    if (gemv.tensorCores)
      headerLines.push_back(fmt::format(
          "NVIDIA: matrix-vector on tensor cores (gemm_gemv.cuh v9), {} rows: A's rows staged in shared memory in bf16, "
          "mma.sync m16n8k16 with 16 columns of weights a warp as the 16-row operand; blocks of {} warps over {} "
          "columns{}{}{} (AMD: fp32 FMAs over the bf16 rows)",
          gemv.BM, gemv.warps, gemv.BN, runs,
          gemv.warpsSplitK() ? fmt::format(", {} warps a 16 columns splitting K", gemv.warps / (gemv.BN / 16)) : "",
          split));
    else
      headerLines.push_back(fmt::format("every target: matrix-vector (gemm_gemv.cuh), {} row{}: A's rows staged in shared "
                                        "memory in fp32, blocks of {} warps over {} columns{}{}, fp32 FMAs on B streamed "
                                        "with 16-byte loads",
                                        gemv.BM, gemv.BM == 1 ? "" : "s", gemv.warps, gemv.BN, runs, split));
    if (source.chained() && gemv.dependentsEarly)
      headerLines.push_back(fmt::format("NVIDIA: blocks {} on (the last wave) let the next kernel launch before their wait",
                                        gemv.dependentsEarlyFrom(gemm, source.machine().multiprocessors)));
    return headerLines;
  }
  if (plan.matrixUnits && plan.operands.tf32Products > 0) headerLines.push_back(fp32ProductsLine(plan));
  if (hopper)
    headerLines.push_back(fmt::format("sm_90a: warpgroup tensor cores (wgmma), {}x{} tiles, {} warpgroups{}, {} stages{}{}{}",
                                      hopper->BM, hopper->BN, hopper->BM / 64,
                                      !hopper->producer ? ""
                                      : hopper->tf32    ? " fed by a producer warpgroup that also splits each stage "
                                                          "(cp.async; a full and an empty mbarrier per stage)"
                                      : gemm.rowNorm    ? " fed by a producer warpgroup (cp.async; a full and an empty "
                                                          "mbarrier per stage), which also sums the squares of A's rows"
                                                        : " fed by a producer warpgroup (cp.async; a full and an empty "
                                                          "mbarrier per stage)",
                                      hopper->stages,
                                      hopper->resident > 1 ? fmt::format(", {} blocks per SM", hopper->resident) : "",
                                      hopper->splits == 1 ? ""
                                      : plan.hopperSplitTiles == plan.hopperTiles
                                          ? fmt::format(", K split {} ways (partial tiles in the workspace, added by "
                                                        "the last split of each tile)",
                                                        hopper->splits)
                                          : fmt::format(", the last wave's {} tiles split K {} ways among the SMs "
                                                        "the full waves leave idle (partial tiles in the workspace, "
                                                        "added by the last split of each tile)",
                                                        plan.hopperSplitTiles, hopper->splits),
                                      plan.normShared ? "; RMSNorm's sums of squares once per row, by the blocks of "
                                                        "column tile 0, read by every column tile before its epilogue"
                                                      : ""));
  const GemmTile &nvidia = plan.nvidia;
  headerLines.push_back(plan.matrixUnits
                            ? fmt::format("{}: tensor cores (mma.sync), {}x{} tiles, {} warps{}, {} stages; AMD: "
                                          "{}, 64x64 tiles",
                                          hopper ? "other NVIDIA" : "NVIDIA", nvidia.BM, nvidia.BN, nvidia.threads() / 32,
                                          nvidia.slices > 1 ? fmt::format(" in {} k slices", nvidia.slices) : "",
                                          nvidia.stages, plan.aKM                   ? "fp32 FMAs"
                                                         : plan.operands.tf32Products ? "fp32 MFMA on gfx90a"
                                                                                      : "MFMA on gfx90a")
                            : "fp32 FMAs (gemm_simt.cuh), 64x64 tiles");
  return headerLines;
}

// The entry point: which mainloop each compiler runs (chosen by the preprocessor, as NVRTC
// or hipRTC and the arch define), its launch bounds and clusters.
std::string gemmEntry(const KernelSource &source, const GemmPlan &plan) {
  const std::string &entry = source.entry();
  const GemmTile &nvidia = plan.nvidia;
  const std::optional<WgmmaTile> &hopper = plan.hopper;
  const bool tf32 = plan.matrixUnits && plan.operands.tf32Products;
  std::string out;
  if (plan.gemv) {
    const GemvTile &gemv = *plan.gemv;
    std::string spec =
        fmt::format("{}_spec<{}, {}, 1, {}, 1, 1, {}, 0>", entry, gemv.BM, gemv.BN, gemv.warps, gemv.splits);
    out += fmt::format("#define {}_BOUNDS {} * TL_WARP\n", entry, gemv.warps);
    return out + source.entryPoint(entry + "_BOUNDS", fmt::format("  tl_gemm_gemv<{}>(p);\n", spec), {}, "",
                                   fmt::format("  tl_gemm_gemv_prefetch<{}>(p, thread, threads);\n", spec),
                                   fmt::format("  tl_gemm_gemv_produce<{}>(p, block, produced);\n", spec));
  }
  std::string nvSpec = fmt::format("{}_spec<{}, {}, {}, {}, {}, {}, 1, 0>", entry, nvidia.BM, nvidia.BN, nvidia.warpsM,
                                   nvidia.warpsN, nvidia.stages, nvidia.slices);
  std::string fixedSpec = fmt::format("{}_spec<64, 64, 2, 2, 1, 1, 1, 0>", entry);
  std::string hopperSpec =
      hopper ? fmt::format("{}_spec<{}, {}, 1, 1, {}, 1, {}, {}>", entry, hopper->BM, hopper->BN, hopper->stages,
                           hopper->splits, plan.hopperSplitTiles)
             : "";
  std::string hopperCase = hopper ? "defined(TL_NVIDIA) && defined(__CUDA_ARCH_FEAT_SM90_ALL)" : "0";
  // Launch bounds: threads per block, and blocks meant to share an SM.
  out += fmt::format("#if {}\n#define {}_BOUNDS {}, {}\n#elif defined(TL_NVIDIA)\n#define {}_BOUNDS {}\n#else\n"
                     "#define {}_BOUNDS 256\n#endif\n",
                     hopperCase, entry, hopper ? hopper->threads() : 0, hopper ? hopper->resident : 1, entry,
                     plan.matrixUnits ? nvidia.threads() : 256, entry);
  std::string clusterAttribute;
  if (plan.clusterTiles > 1 || plan.hopperCluster > 1) {
    auto dims = [](int64_t blocks) { return blocks > 1 ? fmt::format("__cluster_dims__({}, 1, 1)", blocks) : ""; };
    out += fmt::format("#if {1}\n#define {0}_CLUSTER {2}\n#elif TL_HAS_CLUSTERS\n#define {0}_CLUSTER {3}\n#else\n"
                       "#define {0}_CLUSTER\n#endif\n",
                       entry, hopperCase, dims(plan.hopperCluster), dims(plan.clusterTiles));
    clusterAttribute = entry + "_CLUSTER";
  }
  // AMD's MFMA path reads A along k only: A stored [K, M] runs on FMAs there.
  std::string body =
      plan.matrixUnits
          ? fmt::format("#if {}\n  tl_gemm_wgmma{}<{}>(p);\n#elif defined(TL_NVIDIA)\n  tl_gemm_mma{}<{}>(p);\n"
                        "{}#else\n  tl_gemm_simt<{}>(p);\n#endif\n",
                        hopperCase,
                        std::string(tf32 ? "_tf32" : "") + (hopper && hopper->producer ? "_ws" : ""), hopperSpec,
                        tf32 ? "_tf32" : "", nvSpec,
                        plan.aKM ? "" : fmt::format("#elif defined(__gfx90a__)\n  tl_gemm_mfma<{}>(p);\n", fixedSpec),
                        fixedSpec)
          : fmt::format("  tl_gemm_simt<{}>(p);\n", fixedSpec);
  out += source.entryPoint(entry + "_BOUNDS", body, {}, clusterAttribute);
  return out;
}

// Each path's launch shape, the workspace and sync words its tiles share, and the tile
// tasks a persistent kernel runs it as.
void gemvLaunches(const GemmSpec &gemm, const GemvTile &gemv, bool bConstant, EmittedKernel &emitted) {
  const int64_t tiles = gemv.tiles(gemm);
  emitted.launch["cuda"] = {gemv.blocks(gemm), gemv.threads(32), gemv.sharedBytes(gemm)};
  emitted.launch["hip"] = {gemv.blocks(gemm), gemv.threads(64), gemv.sharedBytes(gemm)};
  if (gemv.splits > 1) {
    emitted.workspaceBytes = gemv.blocks(gemm) * gemv.BM * gemv.BN * 4;
    emitted.syncWords = tiles;
  }
  // A split's task reads A and B over all of K (a superset) and may write its whole tile
  // (the last split to arrive does): what reads the tile waits for every split.
  const KernelLaunch &launch = emitted.launch.at("cuda");
  GemmTileShape shape{gemv.BM, gemv.BN, flatColumns(gemm), gemv.pairs};
  emitted.tasks = {launch.gridBlocks, launch.blockThreads, launch.sharedBytes,
                   [gemm, shape, tiles](int64_t block) { return gemmBlockAccess(gemm, shape, block % tiles); },
                   /*streamsWeights=*/true, /*joinsSplits=*/gemv.splits > 1, /*weightsConstant=*/bConstant};
}

void gemmLaunches(const GemmSpec &gemm, const GemmPlan &plan, EmittedKernel &emitted) {
  if (plan.gemv) return gemvLaunches(gemm, *plan.gemv, plan.bConstant, emitted);
  const GemmTile &nvidia = plan.nvidia;
  const std::optional<WgmmaTile> &hopper = plan.hopper;
  int64_t fixedTiles = gemmTiles(gemm, kFixedTile, kFixedTile);
  int64_t fixedShared = kSimtSharedBytes + (gemm.normGrad ? normGradSharedBytes(kFixedTile, 256) : 0);
  if (plan.matrixUnits)
    emitted.launch["cuda"] = {gemmTiles(gemm, nvidia.BM, nvidia.BN), nvidia.threads(),
                              nvidia.sharedBytes(gemm.normGrad ? normGradSharedBytes(nvidia.BM, nvidia.threads()) : 0)};
  else emitted.launch["cuda"] = {fixedTiles, 256, fixedShared};
  if (gemm.normGrad) {  // either tile's layout (AMD and SIMT run 64x64 tiles)
    emitted.workspaceBytes = std::max(normGradWorkspaceBytes(gemm, kFixedTile, kFixedTile),
                                      plan.matrixUnits ? normGradWorkspaceBytes(gemm, nvidia.BM, nvidia.BN) : 0);
    emitted.syncWords = std::max(normGradSyncWords(gemm, kFixedTile, kFixedTile),
                                 plan.matrixUnits ? normGradSyncWords(gemm, nvidia.BM, nvidia.BN) : 0);
  }
  if (hopper) {
    emitted.launch["cuda:sm_90a"] = {plan.hopperTiles + plan.hopperSplitTiles * (hopper->splits - 1), hopper->threads(),
                                     hopper->sharedBytes(gemm.normGrad ? normGradSharedBytes(hopper->BM, hopper->threads()) : 0)};
    // The rows' sums of squares and a flag and a reader count per row tile, then the split
    // tiles' parts (with the rows' partial sums) and arrivals (gemm_wgmma.cuh's order).
    if (plan.normShared) {
      emitted.workspaceBytes = plan.hopperRowTiles * hopper->BM * 4;
      emitted.syncWords = 2 * plan.hopperRowTiles;
    }
    if (gemm.normGrad) {  // d gain's column sums and counts (never split)
      emitted.workspaceBytes = std::max(emitted.workspaceBytes, normGradWorkspaceBytes(gemm, hopper->BM, hopper->BN));
      emitted.syncWords = std::max(emitted.syncWords, normGradSyncWords(gemm, hopper->BM, hopper->BN));
    } else if (hopper->splits > 1) {
      emitted.workspaceBytes += plan.hopperSplitTiles * hopper->splits * (hopper->BM * hopper->BN + hopper->BM) * 4;
      emitted.syncWords += plan.hopperSplitTiles;
    }
  }
  emitted.launch["hip"] = {fixedTiles, 256, fixedShared};
  // As tasks of a persistent kernel: the machine's path, unsplit (RMSNorm's backward, in
  // clusters, has no such form).
  if (!gemm.normGrad && (!hopper || hopper->splits == 1)) {
    const KernelLaunch &launch = hopper ? emitted.launch.at("cuda:sm_90a") : emitted.launch.at("cuda");
    GemmTileShape shape{hopper ? hopper->BM : plan.matrixUnits ? nvidia.BM : kFixedTile,
                        hopper ? hopper->BN : plan.matrixUnits ? nvidia.BN : kFixedTile, plan.flat};
    emitted.tasks = {launch.gridBlocks, launch.blockThreads, launch.sharedBytes,
                     [gemm, shape](int64_t block) { return gemmBlockAccess(gemm, shape, block); }};
  }
}

} // namespace tlc::codegen::gemm

namespace tlc::codegen {
using namespace gemm;

// A GEMM kernel in five steps: decide its paths and tiles, write the spec (constants,
// operand hooks, epilogue), describe it, write the entry point, give its launches.
EmittedKernel emitGemm(const KernelSource &source, const GemmSpec &gemm) {
  if (gemm.producer) return emitGemvChain(source, gemm);
  const GemmPlan plan = planGemm(source, gemm);
  const std::vector<int64_t> pairs = plan.gemv ? plan.gemv->pairs : std::vector<int64_t>{};
  const ColumnMapping columns = columnMapping(gemm, plan.flat, pairs);
  ElementCode code(source.entry(), source.names());
  std::string spec = specConstants(source, gemm, plan, columns);
  spec += operandAHooks(source, gemm, plan, code) + operandBHooks(source, gemm, plan, columns);
  EpilogueCode epilogue = epilogueHook(source, gemm, plan.flat, pairs, code);
  spec += epilogue.hook;

  std::string out = source.header("a fused linear", gemmHeader(source, gemm, plan, epilogue.details));
  // The mainloops: bf16, or fp32 operands split for tf32 products.
  const bool tf32 = plan.matrixUnits && plan.operands.tf32Products;
  out += source.prelude(plan.gemv ? std::vector<std::string>{"gemm_gemv.cuh"}
                        : tf32  ? std::vector<std::string>{"gemm_wgmma_tf32.cuh", "gemm_mfma.cuh", "gemm_simt.cuh"}
                                : std::vector<std::string>{"gemm_mma.cuh", "gemm_wgmma.cuh", "gemm_mfma.cuh", "gemm_simt.cuh"});
  out += code.globals();
  out += source.paramsStruct();
  out += spec;
  out += gemmEntry(source, plan);

  EmittedKernel emitted;
  emitted.source = std::move(out);
  gemmLaunches(gemm, plan, emitted);
  if (plan.weightParts) emitted.launch.at("cuda:sm_90a").bf16PartsInputs = {source.valueId(gemm.b)};
  return emitted;
}

// Chained, the tensor-core GEMVs measured slower than on their own (docs/codegen.md, "O3"),
// before v12's early trigger (--chain-tensor-core-gemvs chains them with it).
bool gemmLaunchesApart(const KernelSource &source, const GemmSpec &gemm) {
  if (gemm.producer) return false;
  const GemmPlan plan = planGemm(source, gemm);
  return plan.gemv && plan.gemv->tensorCores && !source.machine().overrides.chainTensorCoreGemvs;
}

} // namespace tlc::codegen
