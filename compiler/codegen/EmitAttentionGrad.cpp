// The backward of flash attention: a Spec for attention_grad_mma.cuh (NVIDIA tensor cores,
// head size 64: bf16, or fp32 split for tf32 products) and attention_grad.cuh (fp32 FMAs:
// fp32 at the highest matmul precision, AMD, other head sizes).
#include "compiler/codegen/EmitterSupport.h"

#include "runtime/Error.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <cstdlib>
#include <string>
#include <tuple>
#include <vector>

namespace tlc::codegen {

namespace {

// Where the gradients go: each to its argument's rows, and which are rotated back by RoPE
// (the backward's tl.rope_grad and layout ops folded into the stores).
std::string storesLine(const AttentionGradSpec &spec, const KernelSource &source) {
  std::vector<std::string> parts;
  for (auto [name, param, rows] : {std::tuple{"dq", spec.dq, &spec.dqRows}, std::tuple{"dk", spec.dk, &spec.dkRows},
                                   std::tuple{"dv", spec.dv, &spec.dvRows}})
    parts.push_back(fmt::format("{}{} -> {}[{}]",
                                rows->ropeTheta == 0 ? "" : rows->ropeHalves ? "rope_grad (halves) " : "rope_grad ",
                                name, source.name(param), rows->row.str()));
  return fmt::format("stores, row (b, h, s) of each: {}", fmt::join(parts, "; "));
}

// A gradient row's store of columns c, c+1 and c + COLS/2, c + COLS/2 + 1 (c even, below
// COLS/2), which hold both styles' RoPE pairs: rotated back where tl.rope_grad was folded
// in (its frequencies in the element code's table), then stored two at a time. Only for
// head sizes a multiple of 4 (empty otherwise): the templates store other rows a column at
// a time through dq_dst and the like (no RoPE folded in then).
std::string ropeStore4(ElementCode &code, int64_t headDim, const char *hook, const char *dst, const GradRows &rows,
                       int64_t cols) {
  if (cols % 4 != 0) return std::string();
  std::string body;
  if (rows.ropeTheta == 0) {
    body = fmt::format("auto *row = {}(p, b, h, s);\n    tl_st2(row, c, lo0, lo1);\n    tl_st2(row, c + {}, hi0, hi1);",
                       dst, cols / 2);
  } else {
    // Two pairs, k = 0 and 1, each rotated back by minus its angle (pair i's frequency is
    // the (hi, lo) floats at [2i] and [2i + 1] of the table): by halves (lo0, hi0) and
    // (lo1, hi1), pairs c and c+1; adjacent (lo0, lo1) and (hi0, hi1), pairs c/2 and
    // (c + COLS/2)/2. pair() returns the pair's first and second element rotated.
    std::string table = code.ropeTable(rows.ropeTheta, headDim), lines = "float c0, s0, c1, s1;";
    auto pair = [&](int k, const std::string &hi, const std::string &lo, const char *first, const char *second) {
      lines += fmt::format("\n    tl_rope_cos_sin((float)s, {0}[{1}], {0}[{2}], c{3}, s{3});", table, hi, lo, k);
      return std::pair{fmt::format("tl_rope({}, {}, false, c{}, -s{})", first, second, k, k),
                       fmt::format("tl_rope({}, {}, true, c{}, -s{})", first, second, k, k)};
    };
    std::string low[2], high[2];  // columns c, c+1 and c + COLS/2, c + COLS/2 + 1
    if (rows.ropeHalves) {
      std::tie(low[0], high[0]) = pair(0, "2 * c", "2 * c + 1", "lo0", "hi0");
      std::tie(low[1], high[1]) = pair(1, "2 * c + 2", "2 * c + 3", "lo1", "hi1");
    } else {
      std::tie(low[0], low[1]) = pair(0, "c", "c + 1", "lo0", "lo1");
      std::tie(high[0], high[1]) =
          pair(1, fmt::format("c + {}", cols / 2), fmt::format("c + {} + 1", cols / 2), "hi0", "hi1");
    }
    body = fmt::format("{}\n    auto *row = {}(p, b, h, s);\n    tl_st2(row, c, {}, {});\n    tl_st2(row, c + {}, {}, {});",
                       lines, dst, low[0], low[1], cols / 2, high[0], high[1]);
  }
  return fmt::format("  TL_DEVICE static void {}(const Params &p, int b, int h, int s, int c, float lo0, float lo1, "
                     "float hi0, float hi1) {{\n"
                     "    {}\n  }}\n",
                     hook, body);
}

// The kernel's opening comment: shapes, the tiles, where the gradients go, which path runs.
std::string gradHeader(const KernelSource &source, const AttentionGradSpec &spec, bool matrixUnits, int tf32,
                       int64_t rows) {
  const AttentionSpec &f = spec.forward;
  return source.header(
      "flash attention backward: dq, dk, dv from the saved output and log-sum-exp; no score matrix in memory",
      {fmt::format("q [{}, {}, {}, {}], k/v [{}, {}, {}, {}]; GQA: dk and dv summed over the {} query heads of each kv "
                   "head",
                   f.B, f.H, f.SQ, f.D, f.B, f.HKV, f.SK, f.D, f.H / f.HKV),
       fmt::format("scale {}, {}; a block per tile of query rows (dq) and per tile of key rows and query head (its "
                   "share of dk, dv; the last head of a kv group adds the shares)",
                   f.scale, f.causal ? "causal (tiles past the diagonal skipped)" : "not causal"),
       storesLine(spec, source),
       matrixUnits ? fmt::format("NVIDIA: tensor cores{}, tiles of 64 rows, 16 a warp; other targets: tiles of {} rows "
                                 "staged in shared memory, fp32 FMAs",
                                 tf32 == 3   ? " (fp32 operands, 3xTF32: a tf32 high part and residual each, three "
                                               "products; matmul precision high)"
                                 : tf32 == 1 ? " (fp32 operands, plain TF32; matmul precision medium)"
                                             : "",
                                 rows)
                   : fmt::format("tiles of {} rows staged in shared memory, fp32 FMAs (attention_grad.cuh)", rows)});
}

// The Spec's hooks: each operand's and gradient's row, the RoPE-folding stores, the saved
// log-sum-exp, and the workspace and counters of the dK/dV shares.
std::string gradHooks(const KernelSource &source, const AttentionGradSpec &spec, ElementCode &code) {
  const AttentionSpec &f = spec.forward;
  auto row = [&](const char *hook, int param, const IndexExpr &offset, bool output) {
    return fmt::format("  TL_DEVICE static {}{} *{}(const Params &p, int b, int h, int s) {{ return p.{} + ({}); }}\n",
                       output ? "" : "const ", source.type(param), hook, source.name(param), indexCode(offset));
  };
  std::string stores = ropeStore4(code, f.D, "dq_store4", "dq_dst", spec.dqRows, f.D);
  stores += ropeStore4(code, f.D, "dk_store4", "dk_dst", spec.dkRows, f.D);
  stores += ropeStore4(code, f.D, "dv_store4", "dv_dst", spec.dvRows, f.DV);
  std::string out = row("q_src", f.q, f.qRow, false) + row("k_src", f.k, f.kRow, false) + row("v_src", f.v, f.vRow, false) +
                    row("o_src", f.out, f.outRow, false) + row("do_src", spec.dout, f.outRow, false) +
                    row("dq_dst", spec.dq, spec.dqRows.row, true) + row("dk_dst", spec.dk, spec.dkRows.row, true) +
                    row("dv_dst", spec.dv, spec.dvRows.row, true) + stores;
  out += fmt::format("  TL_DEVICE static const float *lse_src(const Params &p, int b, int h, int s) {{ return p.{} + "
                     "((tl_i64)(b * {} + h) * {} + s); }}\n",
                     source.name(f.lse), f.H, f.SQ);
  return out + "  TL_DEVICE static float *partial(const Params &p) { return p.ws; }\n"
               "  TL_DEVICE static unsigned *counter(const Params &p) { return p.sync; }\n";
}

// The launches: NVIDIA's tensor-core tiles of 64 rows where they run, else the FMA kernel's
// tiles of `rows`; the dK/dV shares of a GQA group in the workspace, a counter a kv head's
// key tile.
void gradLaunches(EmittedKernel &emitted, const AttentionSpec &f, bool matrixUnits, int tf32, int64_t rows) {
  int64_t keyTiles = (f.SK + rows - 1) / rows;
  KernelLaunch fmaLaunch{f.B * f.H * ((f.SQ + rows - 1) / rows) + f.B * f.H * keyTiles, 256, 0};
  constexpr int64_t kMmaTile = 64;  // tl_attention_grad_mma_shape::TILE
  // Buffers of a tile of two operands: two, and fp32 a third for the block's own rows
  // (tl_attention_grad_mma_shape::SHARED_BYTES).
  int64_t mmaShared = (tf32 ? 3 * 4 : 2 * 2) * kMmaTile * (f.D + f.DV);
  KernelLaunch mmaLaunch{f.B * f.H * ((f.SQ + kMmaTile - 1) / kMmaTile + (f.SK + kMmaTile - 1) / kMmaTile), 128,
                         mmaShared};
  emitted.launch["cuda"] = matrixUnits ? mmaLaunch : fmaLaunch;
  emitted.launch["hip"] = fmaLaunch;
  // Each query head's share of dK and dV; an arrival count per kv head's key tile (the
  // FMA kernel's tiles are the smaller, so its count serves both).
  if (f.H > f.HKV) {
    emitted.workspaceBytes = f.B * f.H * f.SK * (f.D + f.DV) * 4;
    emitted.syncWords = f.B * f.HKV * keyTiles;
  }
}

} // namespace

EmittedKernel emitAttentionGrad(const KernelSource &source, const AttentionGradSpec &spec) {
  const std::string &entry = source.entry();
  const AttentionSpec &f = spec.forward;
  if (f.HKV < 1 || f.H % f.HKV)
    throw Error(fmt::format("code generation: kernel '{}': {} query heads are not a multiple of {} kv heads", entry,
                            f.H, f.HKV));
  if (f.D > 256 || f.DV > 256)
    throw Error(fmt::format("code generation: kernel '{}': head sizes {} and {} must be at most 256", entry, f.D, f.DV));
  // Rows per tile: 16 measured faster than 32 on an H100 (more blocks, shorter walks).
  // overrides.attentionGradRows = 8, 16 or 32 forces it, for measuring alternatives.
  int64_t rows = 16;
  if (int asked = source.machine().overrides.attentionGradRows; asked == 8 || asked == 16 || asked == 32) rows = asked;
  auto all = [&](DType dtype) {
    bool same = true;
    for (int param : {f.q, f.k, f.v, f.out, spec.dout, spec.dq, spec.dk, spec.dv}) same = same && source.dtype(param) == dtype;
    return same;
  };
  // fp32 runs on tensor cores too unless the precision asks for exact products.
  const int tf32 = all(DType::F32) ? tf32Products(source.matmulPrecision()) : 0;
  bool matrixUnits = (all(DType::BF16) || tf32) && f.D == 64 && f.DV == 64;
  std::string out = gradHeader(source, spec, matrixUnits, tf32, rows);
  out += source.prelude({"attention_grad_mma.cuh", "attention_grad.cuh"});
  out += source.paramsStruct();
  ElementCode code(entry, source.names());
  std::string hooks = gradHooks(source, spec, code);  // before the globals: the RoPE tables it asks for
  out += code.globals();
  out += fmt::format("struct {}_spec {{\n  using Params = {}_params;\n", entry, entry);
  out += fmt::format("  static constexpr int D = {}, DV = {}, B = {}, H = {}, HKV = {}, SQ = {}, SK = {};\n", f.D, f.DV,
                     f.B, f.H, f.HKV, f.SQ, f.SK);
  out += fmt::format("  static constexpr bool CAUSAL = {};\n  static constexpr float SCALE = {};\n  static constexpr int ROWS = {};\n",
                     f.causal, floatLiteral(f.scale), rows);
  out += hooks + "};\n";
  out += fmt::format("#if defined(TL_NVIDIA)\n#define {}_THREADS {}\n#else\n#define {}_THREADS 256\n#endif\n", entry,
                     matrixUnits ? 128 : 256, entry);
  std::string fma = fmt::format("tl_attention_grad_rows<{}_spec>(p);", entry);
  out += source.entryPoint(entry + "_THREADS",
                           matrixUnits ? fmt::format("#if defined(TL_NVIDIA)\n  tl_attention_grad_mma<{}_spec{}>(p);\n#else\n  "
                                                     "{}\n#endif\n",
                                                     entry, tf32 ? fmt::format(", tl_attention_tf32<{}>", tf32) : "", fma)
                                       : "  " + fma + "\n");
  EmittedKernel emitted;
  emitted.source = std::move(out);
  gradLaunches(emitted, f, matrixUnits, tf32, rows);
  return emitted;
}

} // namespace tlc::codegen
