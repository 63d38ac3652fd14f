// Row kernels (row_ops.cuh): RMSNorm, softmax, embedding lookup, cross-entropy; and their
// backward (row_grad_ops.cuh).
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
  int64_t rowsPerBlock = 16;
  int threads = 256;
  std::string templateFile = "row_ops.cuh";
  // An absent optional operand or result: a null pointer the template never reads.
  auto optional = [&](const char *hook, const char *flag, int param, bool output) {
    return param >= 0 ? fmt::format("  static constexpr bool {} = true;\n", flag) + accessor(hook, param, output)
                      : fmt::format("  static constexpr bool {} = false;\n  TL_DEVICE static {}float *{}(const Params "
                                    "&) {{ return nullptr; }}\n",
                                    flag, output ? "" : "const ", hook);
  };
  // Cross-entropy's row losses, which the last block to arrive at the counter averages.
  const std::string lossWorkspace = "  TL_DEVICE static float *rowLoss(const Params &p) { return p.ws; }\n"
                                    "  TL_DEVICE static unsigned *counter(const Params &p) { return p.sync; }\n";
  const int64_t predictions = spec.batch * std::max<int64_t>(spec.seq - 1, 0);
  switch (spec.kind) {
  case RowSpec::Kind::RmsNorm:
    what = fmt::format("RMSNorm of {} rows of {}: y = x / sqrt(mean(x^2) + {}){}; one warp per row", spec.rows,
                       spec.cols, spec.eps, spec.gain >= 0 ? " * gain" : "");
    hooks = accessor("x", spec.x, false) + optional("gain", "GAIN", spec.gain, false) + accessor("y", spec.y, true);
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
  case RowSpec::Kind::CrossEntropy:
    what = fmt::format("cross-entropy of {} next-token predictions over {} logits; one block per prediction, "
                       "the mean taken in order by the last block",
                       predictions, spec.cols);
    hooks = accessor("logits", spec.x, false) + accessor("ids", spec.ids, false) + accessor("loss", spec.y, true) +
            lossWorkspace;
    call = "tl_cross_entropy_rows";
    // A block a prediction, at most 4096 (or, as a persistent kernel's part, a block an SM:
    // a task a prediction would spend more on waiting and publishing than on the row).
    blocks = std::max<int64_t>(1, std::min<int64_t>(predictions, source.machine().persistent
                                                                     ? source.machine().multiprocessors
                                                                     : 4096));
    workspace = std::max<int64_t>(predictions, 1) * 4;
    break;
  case RowSpec::Kind::RmsNormGrad: {
    what = fmt::format("RMSNorm backward of {} rows of {}: d x per row (one warp){}{}, d gain summed in each lane's "
                       "registers over its block's {} rows, the blocks' sums added in order by the last block",
                       spec.rows, spec.cols, spec.residual >= 0 ? " added to the residual's gradient" : "",
                       spec.normalized >= 0 ? " and the normalized input x r g" : "", rowsPerBlock);
    hooks = accessor("x", spec.x, false) + accessor("gain", spec.gain, false) + accessor("dy", spec.dy, false) +
            accessor("dx", spec.y, true) + accessor("dgain", spec.gainGrad, true) +
            optional("residual", "RESIDUAL", spec.residual, false) +
            optional("normalized", "NORMALIZED", spec.normalized, true) +
            "  TL_DEVICE static float *partial(const Params &p) { return p.ws; }\n"
            "  TL_DEVICE static unsigned *counter(const Params &p) { return p.sync; }\n";
    call = "tl_rmsnorm_grad_rows";
    templateFile = "row_grad_ops.cuh";
    blocks = std::max<int64_t>(1, (spec.rows + rowsPerBlock - 1) / rowsPerBlock);
    workspace = blocks * spec.cols * 4;
    break;
  }
  case RowSpec::Kind::SoftmaxGrad:
    what = fmt::format("softmax backward of {} rows of {}: y (dy - sum(dy y)); one warp per row", spec.rows, spec.cols);
    hooks = accessor("y", spec.x, false) + accessor("dy", spec.dy, false) + accessor("dx", spec.y, true);
    call = "tl_softmax_grad_rows";
    templateFile = "row_grad_ops.cuh";
    break;
  case RowSpec::Kind::CrossEntropyGrad: {
    // A block wide enough to hold a row in registers (8 loads a thread) where one can.
    threads = spec.cols > 256 * 8 * 8 ? 1024 : spec.cols <= 128 * vec ? 128 : 256;
    bool held = spec.cols <= threads * vec * 8;
    what = fmt::format("cross-entropy backward over {} rows of {} logits: (softmax - onehot(next id)) / {} "
                       "predictions, zeros at each sequence's last position{}; one block per row, {}",
                       spec.rows, spec.cols, predictions,
                       spec.loss >= 0 ? ", and the loss (the mean taken in order by the last block)" : "",
                       held ? "the row read once and held in registers" : "the row read twice");
    hooks = accessor("logits", spec.x, false) + accessor("ids", spec.ids, false) + accessor("dlogits", spec.y, true) +
            optional("loss", "LOSS", spec.loss, true) +
            lossWorkspace;
    call = "tl_cross_entropy_grad_rows";
    templateFile = "row_grad_ops.cuh";
    blocks = std::max<int64_t>(1, std::min<int64_t>(spec.rows, 8192));
    if (spec.loss >= 0) workspace = std::max<int64_t>(predictions, 1) * 4;
    break;
  }
  case RowSpec::Kind::EmbeddingGrad:
    what = fmt::format("embedding backward: each of {} table rows of {} sums the rows of d y of the tokens that read "
                       "it, in token order ({} tokens); one block per table row, no atomics",
                       spec.rows, spec.cols, spec.tokens);
    hooks = accessor("dy", spec.dy, false) + accessor("ids", spec.ids, false) + accessor("dtable", spec.y, true);
    call = "tl_embedding_grad_rows";
    templateFile = "row_grad_ops.cuh";
    blocks = std::max<int64_t>(1, std::min<int64_t>(spec.rows, 65536));
    break;
  }
  std::string out = source.header(what, {});
  out += source.prelude({templateFile});
  out += source.paramsStruct();
  out += fmt::format("struct {}_spec {{\n  using Params = {}_params;\n", entry, entry);
  out += fmt::format("  static constexpr tl_i64 ROWS = {}, TOKENS = {};\n  static constexpr int COLS = {}, VEC = {}, BATCH = {}, "
                     "SEQ = {}, VOCAB = {}, ROWS_PER_BLOCK = {}, THREADS = {};\n  static constexpr float EPS = {};\n",
                     spec.rows, spec.tokens, spec.cols, vec, spec.batch, spec.seq, spec.cols, rowsPerBlock, threads,
                     floatLiteral(spec.eps));
  out += hooks + "};\n";
  out += source.entryPoint(std::to_string(threads), fmt::format("  {}<{}_spec>(p);\n", call, entry));
  EmittedKernel emitted;
  emitted.source = std::move(out);
  emitted.launch["cuda"] = emitted.launch["hip"] = {blocks, threads, 0};
  emitted.workspaceBytes = workspace;
  // The last block finds itself with a counter: cross-entropy's mean, RMSNorm's d gain.
  if (spec.kind == RowSpec::Kind::CrossEntropy || spec.kind == RowSpec::Kind::RmsNormGrad || spec.loss >= 0)
    emitted.syncWords = 1;
  // As tasks of a persistent kernel: the forward's row kernels (a warp a row, or for
  // cross-entropy a block a prediction).
  if (spec.kind == RowSpec::Kind::RmsNorm || spec.kind == RowSpec::Kind::Softmax ||
      spec.kind == RowSpec::Kind::Embedding || spec.kind == RowSpec::Kind::CrossEntropy) {
    int64_t rows = spec.kind == RowSpec::Kind::CrossEntropy ? 1 : threads / 32;
    emitted.tasks = {blocks, threads, 0,
                     [spec, rows, blocks](int64_t block) { return rowBlockAccess(spec, rows, blocks, block); }};
  }
  return emitted;
}

} // namespace tlc::codegen
