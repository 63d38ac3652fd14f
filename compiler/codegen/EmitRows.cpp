// Row kernels (row_ops.cuh): RMSNorm, softmax, embedding lookup, cross-entropy.
#include "compiler/codegen/EmitterSupport.h"

#include <fmt/format.h>

#include <algorithm>

namespace tlc::codegen {

EmittedKernel emitRows(const KernelSource &source, const RowSpec &spec) {
  const std::string &entry = source.entry();
  auto accessor = [&](const char *hook, int param, bool output) {
    return fmt::format("  TL_DEVICE static {}{} *{}(const Params &p) {{ return p.{}; }}\n", output ? "" : "const ",
                       source.type(param), hook, source.name(param));
  };
  std::string what, call, hooks;
  int64_t blocks = std::max<int64_t>(1, (spec.rows + 7) / 8), workspace = 0;
  int vec = spec.cols % 8 == 0 ? 8 : 1;
  switch (spec.kind) {
  case RowSpec::Kind::RmsNorm:
    what = fmt::format("RMSNorm of {} rows of {}: y = x / sqrt(mean(x^2) + {}) * gain; one warp per row", spec.rows,
                       spec.cols, spec.eps);
    hooks = accessor("x", spec.x, false) + accessor("gain", spec.gain, false) + accessor("y", spec.y, true);
    call = "tl_rmsnorm_rows";
    break;
  case RowSpec::Kind::Softmax:
    what = fmt::format("softmax of {} rows of {}; one warp per row", spec.rows, spec.cols);
    hooks = accessor("x", spec.x, false) + accessor("y", spec.y, true);
    call = "tl_softmax_rows";
    break;
  case RowSpec::Kind::Embedding:
    what = fmt::format("embedding lookup of {} tokens, rows of {}; one warp per token", spec.rows, spec.cols);
    hooks = accessor("table", spec.x, false) + accessor("ids", spec.ids, false) + accessor("y", spec.y, true);
    call = "tl_embedding_rows";
    break;
  case RowSpec::Kind::CrossEntropy: {
    int64_t predictions = spec.batch * std::max<int64_t>(spec.seq - 1, 0);
    what = fmt::format("cross-entropy of {} next-token predictions over {} logits; one block per prediction, "
                       "the mean taken in order by the last block",
                       predictions, spec.cols);
    hooks = accessor("logits", spec.x, false) + accessor("ids", spec.ids, false) + accessor("loss", spec.y, true) +
            "  TL_DEVICE static float *rowLoss(const Params &p) { return p.ws; }\n"
            "  TL_DEVICE static unsigned *counter(const Params &p) { return p.sync; }\n";
    call = "tl_cross_entropy_rows";
    blocks = std::max<int64_t>(1, std::min<int64_t>(predictions, 4096));
    workspace = std::max<int64_t>(predictions, 1) * 4;
    break;
  }
  }
  std::string out = source.header(what, {});
  out += source.prelude({"row_ops.cuh"});
  out += source.paramsStruct();
  out += fmt::format("struct {}_spec {{\n  using Params = {}_params;\n", entry, entry);
  out += fmt::format("  static constexpr tl_i64 ROWS = {};\n  static constexpr int COLS = {}, VEC = {}, BATCH = {}, SEQ = {}, "
                     "VOCAB = {};\n  static constexpr float EPS = {};\n",
                     spec.rows, spec.cols, vec, spec.batch, spec.seq, spec.cols, floatLiteral(spec.eps));
  out += hooks + "};\n";
  out += source.entryOpen("256");
  out += fmt::format("  {}<{}_spec>(p);\n}}\n", call, entry);
  EmittedKernel emitted;
  emitted.source = std::move(out);
  emitted.launch["cuda"] = emitted.launch["hip"] = {blocks, 256, 0};
  emitted.workspaceBytes = workspace;
  return emitted;
}

} // namespace tlc::codegen
