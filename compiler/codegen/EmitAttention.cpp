// Flash attention: a Spec for attention_mma.cuh (NVIDIA tensor cores: bf16, or fp32 split
// for 3xBF16 or TF32 products) and attention_rows.cuh (fp32 FMAs: fp32 at the highest matmul
// precision, AMD, head sizes the former does not take).
#include "compiler/codegen/EmitterSupport.h"
#include "compiler/codegen/Schedule.h"

#include "runtime/Error.h"

#include <fmt/format.h>

#include <cmath>

namespace tlc::codegen {

namespace {

// Which path runs the attention: NVIDIA's tensor cores (bf16, or fp32 as split products)
// with a tile of queries and heads a block, or fp32 FMAs a query row a block.
struct AttentionPath {
  int fp32Products = 0;  // fp32 operands on tensor cores: 3 (3xBF16), 1 (plain TF32), 0 (neither)
  bool matrixUnits = false;
  AttentionTile tile{16, 1};
};

AttentionPath choosePath(const KernelSource &source, const AttentionSpec &spec) {
  auto all = [&](DType dtype) {
    return source.dtype(spec.q) == dtype && source.dtype(spec.k) == dtype && source.dtype(spec.v) == dtype &&
           source.dtype(spec.out) == dtype;
  };
  AttentionPath path;
  // fp32 runs on tensor cores too unless the precision asks for exact products.
  path.fp32Products = all(DType::F32) ? tf32Products(source.matmulPrecision()) : 0;
  // The FMA path where --attention-tile=rows asks for it, and in a persistent kernel's
  // decode step (one query row: a tensor-core tile would be mostly padding), where it needs
  // no shared memory, so the weight ring gets the room.
  const std::string &forced = source.machine().overrides.attentionTile;
  const bool rows = forced == "rows" || (forced.empty() && source.machine().persistent && spec.SQ == 1);
  path.matrixUnits = (all(DType::BF16) || path.fp32Products) && (spec.D == 64 || spec.D == 128) &&
                     (spec.DV == 64 || spec.DV == 128) && !rows;
  if (path.matrixUnits) path.tile = chooseAttentionTile(spec, source.machine(), path.fp32Products > 0);
  return path;
}

// The kernel's header comment: shapes, masking, and the path with its tile.
std::string attentionHeader(const KernelSource &source, const AttentionSpec &spec, const AttentionPath &path) {
  const AttentionTile &tile = path.tile;
  return source.header(
      "flash attention, softmax(q kᵀ · scale + causal mask) v with an online softmax; no score matrix in memory",
      {fmt::format("q {} = [{}, {}, {}, {}], k/v {}, {} = [{}, {}, {}, {}]; GQA: query head h reads kv head h / {}",
                   source.name(spec.q), spec.B, spec.H, spec.SQ, spec.D, source.name(spec.k), source.name(spec.v), spec.B,
                   spec.HKV, spec.SK, spec.D, spec.H / spec.HKV),
       fmt::format("scale {}, {}{}", spec.scale, spec.causal ? "causal (tiles above the diagonal skipped)" : "not causal",
                   spec.lse >= 0 ? "; also writes each query row's log-sum-exp (for the backward)" : ""),
       path.matrixUnits
           ? fmt::format("NVIDIA: tensor cores{}, {} queries x {} heads per block sharing their K/V tiles, {} "
                         "queries per warp{}; other targets: one query row per block",
                         path.fp32Products == 3   ? " (fp32 operands, 3xBF16: a bf16 high part and residual each, three "
                                            "products; matmul precision high)"
                         : path.fp32Products == 1 ? " (fp32 operands, plain TF32; matmul precision medium)"
                                          : "",
                         tile.queries, tile.heads, 16 * tile.mTiles,
                         tile.resident > 1 ? fmt::format(", registers capped for {} blocks per SM", tile.resident) : "")
           : "one query row per block, fp32 FMAs (attention_rows.cuh)"});
}

// The Spec both templates read: shapes, masking, scale and where each row lies.
std::string attentionSpecStruct(const KernelSource &source, const AttentionSpec &spec) {
  const std::string &entry = source.entry();
  auto row = [&](int param, const IndexExpr &offset) {
    return fmt::format("TL_DEVICE static {0}{1} *{2}(const Params &p, int b, int h, int s) {{ return p.{3} + ({4}); }}",
                       param != spec.out ? "const " : "",
                       source.type(param), param == spec.q ? "q_src" : param == spec.k ? "k_src" : param == spec.v ? "v_src" : "out_dst",
                       source.name(param), indexCode(offset));
  };
  std::string out = fmt::format("template <int QT_, int HB_, int MT_> struct {}_spec {{\n  using Params = {}_params;\n", entry, entry);
  out += fmt::format("  static constexpr int QT = QT_, HB = HB_, MT = MT_, D = {}, DV = {}, B = {}, H = {}, HKV = {}, SQ = {}, SK = {};\n",
                     spec.D, spec.DV, spec.B, spec.H, spec.HKV, spec.SQ, spec.SK);
  out += fmt::format("  static constexpr bool CAUSAL = {};\n  static constexpr float SCALE = {}, SCALE_LOG2 = {};\n",
                     spec.causal, floatLiteral(spec.scale), floatLiteral(spec.scale * 1.4426950408889634));
  out += "  " + row(spec.q, spec.qRow) + "\n  " + row(spec.k, spec.kRow) + "\n  " + row(spec.v, spec.vRow) + "\n  " +
         row(spec.out, spec.outRow) + "\n";
  out += fmt::format("  static constexpr bool LSE = {};\n", spec.lse >= 0);
  if (spec.lse >= 0)
    out += fmt::format("  TL_DEVICE static float *lse_dst(const Params &p, int b, int h, int s) {{ return p.{} + "
                       "((tl_i64)(b * {} + h) * {} + s); }}\n",
                       source.name(spec.lse), spec.H, spec.SQ);
  else out += "  TL_DEVICE static float *lse_dst(const Params &, int, int, int) { return nullptr; }\n";
  return out + "};\n";
}

// The template's operand policy after the Spec (attention_tiles.cuh): none for bf16 (its
// default), fp32 split into bf16 parts at high precision, plain TF32 at medium.
std::string operandPolicy(const AttentionPath &path) {
  return path.fp32Products == 3 ? ", tl_attention_bf16x3" : path.fp32Products ? fmt::format(", tl_attention_tf32<{}>", path.fp32Products) : "";
}

// Launch bounds (threads per block, and blocks meant to share an SM) and the entry point:
// the tensor-core template on NVIDIA where the path takes it, the FMA rows elsewhere.
std::string attentionEntry(const KernelSource &source, const AttentionPath &path) {
  const std::string &entry = source.entry();
  const AttentionTile &tile = path.tile;
  std::string out = fmt::format("#if defined(TL_NVIDIA)\n#define {}_BOUNDS {}, {}\n#else\n#define {}_BOUNDS 256\n#endif\n",
                                entry, path.matrixUnits ? tile.threads() : 256, path.matrixUnits ? tile.resident : 1, entry);
  std::string rows = fmt::format("tl_attention_rows<{}_spec<16, 1, 1>>(p);", entry);
  return out + source.entryPoint(entry + "_BOUNDS",
                                 path.matrixUnits
                                     ? fmt::format("#if defined(TL_NVIDIA)\n  tl_attention_mma<{}_spec<{}, {}, {}>{}>(p);\n"
                                                   "#else\n  {}\n#endif\n",
                                                   entry, tile.queries, tile.heads, tile.mTiles,
                                                   operandPolicy(path), rows)
                                     : "  " + rows + "\n");
}

} // namespace

EmittedKernel emitAttention(const KernelSource &source, const AttentionSpec &spec) {
  if (spec.HKV < 1 || spec.H % spec.HKV)
    throw Error(fmt::format("code generation: kernel '{}': {} query heads are not a multiple of {} kv heads",
                            source.entry(), spec.H, spec.HKV));
  if (spec.DV > 256)
    throw Error(fmt::format("code generation: kernel '{}': value head size {} is over 256", source.entry(), spec.DV));
  const AttentionPath path = choosePath(source, spec);
  const AttentionTile &tile = path.tile;
  EmittedKernel emitted;
  emitted.source = attentionHeader(source, spec, path) + source.prelude({"attention_mma.cuh", "attention_rows.cuh"}) +
                   source.paramsStruct() + attentionSpecStruct(source, spec) + attentionEntry(source, path);
  KernelLaunch perRow{spec.B * spec.H * spec.SQ, 256, 0};
  emitted.launch["cuda"] = path.matrixUnits ? KernelLaunch{tile.blocks(spec), tile.threads(), tile.sharedBytes(spec)} : perRow;
  emitted.launch["hip"] = perRow;
  // As tasks of a persistent kernel: the tensor-core path's blocks, or a query row a task
  // on the FMA path where that is not too many tasks.
  if (path.matrixUnits)
    emitted.tasks = {tile.blocks(spec), tile.threads(), tile.sharedBytes(spec),
                     [spec, tile](int64_t block) { return attentionBlockAccess(spec, tile.queries, tile.heads, block); }};
  else if (perRow.gridBlocks <= 1024)
    emitted.tasks = {perRow.gridBlocks, perRow.blockThreads, 0,
                     [spec](int64_t block) { return attentionRowBlockAccess(spec, block); }};
  return emitted;
}

} // namespace tlc::codegen
