// The backward of flash attention: a Spec for attention_grad_mma.cuh (bf16 on NVIDIA tensor
// cores, head size 64) and attention_grad.cuh (fp32 FMAs: fp32 models, AMD, other head sizes).
#include "compiler/codegen/EmitterSupport.h"

#include "runtime/Error.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <cstdlib>
#include <string>
#include <tuple>
#include <vector>

namespace tlc::codegen {

// Where the gradients go: each to its argument's rows, and which are rotated back by RoPE
// (the backward's tl.rope_grad and layout ops folded into the stores).
static std::string storesLine(const AttentionGradSpec &spec, const KernelSource &source) {
  std::vector<std::string> parts;
  for (auto [name, param, rows] : {std::tuple{"dq", spec.dq, &spec.dqRows}, std::tuple{"dk", spec.dk, &spec.dkRows},
                                   std::tuple{"dv", spec.dv, &spec.dvRows}})
    parts.push_back(fmt::format("{}{} -> {}[{}]", rows->ropeTheta != 0 ? "rope_grad " : "", name, source.name(param),
                                rows->row.str()));
  return fmt::format("stores, row (b, h, s) of each: {}", fmt::join(parts, "; "));
}

EmittedKernel emitAttentionGrad(const KernelSource &source, const AttentionGradSpec &spec) {
  const std::string &entry = source.entry();
  const AttentionSpec &f = spec.forward;
  if (f.HKV < 1 || f.H % f.HKV)
    throw Error(fmt::format("code generation: kernel '{}': {} query heads are not a multiple of {} kv heads", entry,
                            f.H, f.HKV));
  if (f.D > 256 || f.DV > 256)
    throw Error(fmt::format("code generation: kernel '{}': head sizes {} and {} must be at most 256", entry, f.D, f.DV));
  // Rows per tile: 16 measured faster than 32 on an H100 (more blocks, shorter walks).
  // TLC_ATTENTION_GRAD_ROWS=8|16|32 overrides, for measuring alternatives.
  int64_t rows = 16;
  if (const char *forced = std::getenv("TLC_ATTENTION_GRAD_ROWS")) {
    int64_t asked = std::atoi(forced);
    if (asked == 8 || asked == 16 || asked == 32) rows = asked;
  }
  bool bf16 = true;
  for (int param : {f.q, f.k, f.v, f.out, spec.dout, spec.dq, spec.dk, spec.dv})
    bf16 = bf16 && source.dtype(param) == DType::BF16;
  bool matrixUnits = bf16 && f.D == 64 && f.DV == 64;
  auto row = [&](const char *hook, int param, const IndexExpr &offset, bool output) {
    return fmt::format("  TL_DEVICE static {}{} *{}(const Params &p, int b, int h, int s) {{ return p.{} + ({}); }}\n",
                       output ? "" : "const ", source.type(param), hook, source.name(param), indexCode(offset));
  };
  std::string out = source.header(
      "flash attention backward: dq, dk, dv from the saved output and log-sum-exp; no score matrix in memory",
      {fmt::format("q [{}, {}, {}, {}], k/v [{}, {}, {}, {}]; GQA: dk and dv summed over the {} query heads of each kv "
                   "head",
                   f.B, f.H, f.SQ, f.D, f.B, f.HKV, f.SK, f.D, f.H / f.HKV),
       fmt::format("scale {}, {}; a block per tile of query rows (dq) and per tile of key rows and query head (its "
                   "share of dk, dv; the last head of a kv group adds the shares)",
                   f.scale, f.causal ? "causal (tiles past the diagonal skipped)" : "not causal"),
       storesLine(spec, source),
       matrixUnits ? fmt::format("NVIDIA: tensor cores, tiles of 64 rows, 16 a warp; other targets: tiles of {} rows "
                                 "staged in shared memory, fp32 FMAs",
                                 rows)
                   : fmt::format("tiles of {} rows staged in shared memory, fp32 FMAs (attention_grad.cuh)", rows)});
  out += source.prelude({"attention_grad_mma.cuh", "attention_grad.cuh"});
  out += source.paramsStruct();
  // A pair of columns of a gradient's row: rotated back by RoPE where tl.rope_grad was
  // folded in (its frequencies in the element code's table), then stored.
  ElementCode code(entry, source.names());
  auto store2 = [&](const char *hook, const char *dst, const GradRows &rows) {
    std::string body = fmt::format("tl_st2({}(p, b, h, s), c, v0, v1);", dst);
    if (rows.ropeTheta != 0) {
      std::string table = code.ropeTable(rows.ropeTheta, f.D);
      body = fmt::format("float co, si;\n    tl_rope_cos_sin((float)s, {0}[c], {0}[c + 1], co, si);\n"
                         "    tl_st2({1}(p, b, h, s), c, tl_rope(v0, v1, false, co, -si), tl_rope(v0, v1, true, co, -si));",
                         table, dst);
    }
    return fmt::format("  TL_DEVICE static void {}(const Params &p, int b, int h, int s, int c, float v0, float v1) {{\n"
                       "    {}\n  }}\n",
                       hook, body);
  };
  std::string stores = store2("dq_store2", "dq_dst", spec.dqRows);
  stores += store2("dk_store2", "dk_dst", spec.dkRows);
  stores += store2("dv_store2", "dv_dst", spec.dvRows);
  out += code.globals();
  out += fmt::format("struct {}_spec {{\n  using Params = {}_params;\n", entry, entry);
  out += fmt::format("  static constexpr int D = {}, DV = {}, B = {}, H = {}, HKV = {}, SQ = {}, SK = {};\n", f.D, f.DV,
                     f.B, f.H, f.HKV, f.SQ, f.SK);
  out += fmt::format("  static constexpr bool CAUSAL = {};\n  static constexpr float SCALE = {};\n  static constexpr int ROWS = {};\n",
                     f.causal, floatLiteral(f.scale), rows);
  out += row("q_src", f.q, f.qRow, false) + row("k_src", f.k, f.kRow, false) + row("v_src", f.v, f.vRow, false) +
         row("o_src", f.out, f.outRow, false) + row("do_src", spec.dout, f.outRow, false) +
         row("dq_dst", spec.dq, spec.dqRows.row, true) + row("dk_dst", spec.dk, spec.dkRows.row, true) +
         row("dv_dst", spec.dv, spec.dvRows.row, true) + stores;
  out += fmt::format("  TL_DEVICE static const float *lse_src(const Params &p, int b, int h, int s) {{ return p.{} + "
                     "((tl_i64)(b * {} + h) * {} + s); }}\n",
                     source.name(f.lse), f.H, f.SQ);
  out += "  TL_DEVICE static float *partial(const Params &p) { return p.ws; }\n"
         "  TL_DEVICE static unsigned *counter(const Params &p) { return p.sync; }\n";
  out += "};\n";
  out += fmt::format("#if defined(TL_NVIDIA)\n#define {}_THREADS {}\n#else\n#define {}_THREADS 256\n#endif\n", entry,
                     matrixUnits ? 128 : 256, entry);
  out += source.entryOpen(entry + "_THREADS");
  std::string fma = fmt::format("tl_attention_grad_rows<{}_spec>(p);", entry);
  if (matrixUnits)
    out += fmt::format("#if defined(TL_NVIDIA)\n  tl_attention_grad_mma<{}_spec>(p);\n#else\n  {}\n#endif\n}}\n", entry, fma);
  else out += "  " + fma + "\n}\n";
  EmittedKernel emitted;
  emitted.source = std::move(out);
  int64_t keyTiles = (f.SK + rows - 1) / rows;
  KernelLaunch fmaLaunch{f.B * f.H * ((f.SQ + rows - 1) / rows) + f.B * f.H * keyTiles, 256, 0};
  constexpr int64_t kMmaTile = 64;  // tl_attention_grad_mma_shape::TILE
  KernelLaunch mmaLaunch{f.B * f.H * ((f.SQ + kMmaTile - 1) / kMmaTile + (f.SK + kMmaTile - 1) / kMmaTile), 128, 0};
  emitted.launch["cuda"] = matrixUnits ? mmaLaunch : fmaLaunch;
  emitted.launch["hip"] = fmaLaunch;
  // Each query head's share of dK and dV; an arrival count per kv head's key tile (the
  // FMA kernel's tiles are the smaller, so its count serves both).
  if (f.H > f.HKV) {
    emitted.workspaceBytes = f.B * f.H * f.SK * (f.D + f.DV) * 4;
    emitted.syncWords = f.B * f.HKV * keyTiles;
  }
  return emitted;
}

} // namespace tlc::codegen
