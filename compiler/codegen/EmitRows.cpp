// Row kernels (row_ops.cuh): RMSNorm, softmax, embedding lookup, cross-entropy; and their
// backward (row_grad_ops.cuh).
#include "compiler/codegen/EmitterSupport.h"

#include <fmt/format.h>

#include <algorithm>

namespace tlc::codegen {

namespace {

// What a row kernel's source and launch are made of: its comment, its Spec's hooks, the
// template function it calls (and the file), its blocks, threads and workspace.
struct RowPlan {
  std::string what, hooks, call, templateFile = "row_ops.cuh";
  int64_t blocks = 1, workspace = 0, rowsPerBlock = 16;
  int threads = 256, vec = 1;
};

// The Spec's accessors of kernel arguments: `hook`(p) returns the argument's pointer; an
// optional one absent is a null pointer the template never reads (its flag false).
struct RowHooks {
  const KernelSource &source;
  std::string operator()(const char *hook, int param, bool output) const {
    return fmt::format("  TL_DEVICE static {}{} *{}(const Params &p) {{ return p.{}; }}\n", output ? "" : "const ",
                       source.type(param), hook, source.name(param));
  }
  std::string optional(const char *hook, const char *flag, int param, bool output) const {
    return param >= 0 ? fmt::format("  static constexpr bool {} = true;\n", flag) + (*this)(hook, param, output)
                      : fmt::format("  static constexpr bool {} = false;\n  TL_DEVICE static {}float *{}(const Params "
                                    "&) {{ return nullptr; }}\n",
                                    flag, output ? "" : "const ", hook);
  }
};

// Cross-entropy's row losses, which the last block to arrive at the counter averages.
const char *const kLossWorkspace = "  TL_DEVICE static float *rowLoss(const Params &p) { return p.ws; }\n"
                                   "  TL_DEVICE static unsigned *counter(const Params &p) { return p.sync; }\n";

int64_t predictionsOf(const RowSpec &spec) { return spec.batch * std::max<int64_t>(spec.seq - 1, 0); }

// The forward's row kernels (row_ops.cuh).
void planForwardRows(const KernelSource &source, const RowSpec &spec, RowPlan &plan) {
  const RowHooks accessor{source};
  const int64_t predictions = predictionsOf(spec);
  switch (spec.kind) {
  case RowSpec::Kind::RmsNorm:
    plan.what = fmt::format("RMSNorm of {} rows of {}: y = x / sqrt(mean(x^2) + {}){}; one warp per row", spec.rows,
                            spec.cols, spec.eps, spec.gain >= 0 ? " * gain" : "");
    plan.hooks = accessor("x", spec.x, false) + accessor.optional("gain", "GAIN", spec.gain, false) +
                 accessor("y", spec.y, true);
    plan.call = "tl_rmsnorm_rows";
    break;
  case RowSpec::Kind::Softmax:
    plan.what = fmt::format("softmax of {} rows of {}; one warp per row", spec.rows, spec.cols);
    plan.hooks = accessor("x", spec.x, false) + accessor("y", spec.y, true);
    plan.call = "tl_softmax_rows";
    break;
  case RowSpec::Kind::Embedding:
    plan.what = fmt::format("embedding lookup of {} tokens, rows of {}; one warp per token", spec.rows, spec.cols);
    plan.hooks = accessor("table", spec.x, false) + accessor("ids", spec.ids, false) + accessor("y", spec.y, true);
    plan.call = "tl_embedding_rows";
    break;
  case RowSpec::Kind::CrossEntropy:
    plan.what = fmt::format("cross-entropy of {} next-token predictions over {} logits; one block per prediction, "
                            "the mean taken in order by the last block",
                            predictions, spec.cols);
    plan.hooks = accessor("logits", spec.x, false) + accessor("ids", spec.ids, false) + accessor("loss", spec.y, true) +
                 kLossWorkspace;
    plan.call = "tl_cross_entropy_rows";
    // A block a prediction, at most 4096 (or, as a persistent kernel's part, a block an SM:
    // a task a prediction would spend more on waiting and publishing than on the row).
    plan.blocks = std::max<int64_t>(1, std::min<int64_t>(predictions, source.machine().persistent
                                                                          ? source.machine().multiprocessors
                                                                          : 4096));
    plan.workspace = std::max<int64_t>(predictions, 1) * 4;
    break;
  case RowSpec::Kind::RmsNormGrad:
  case RowSpec::Kind::SoftmaxGrad:
  case RowSpec::Kind::CrossEntropyGrad:
  case RowSpec::Kind::EmbeddingGrad: break;  // planGradRows'
  }
}

// The backward's row kernels (row_grad_ops.cuh).
void planGradRows(const KernelSource &source, const RowSpec &spec, RowPlan &plan) {
  const RowHooks accessor{source};
  const int64_t predictions = predictionsOf(spec);
  plan.templateFile = "row_grad_ops.cuh";
  switch (spec.kind) {
  case RowSpec::Kind::RmsNormGrad:
    plan.what = fmt::format("RMSNorm backward of {} rows of {}: d x per row (one warp){}{}, d gain summed in each "
                            "lane's registers over its block's {} rows, the blocks' sums added in order by the last "
                            "block",
                            spec.rows, spec.cols, spec.residual >= 0 ? " added to the residual's gradient" : "",
                            spec.normalized >= 0 ? " and the normalized input x r g" : "", plan.rowsPerBlock);
    plan.hooks = accessor("x", spec.x, false) + accessor("gain", spec.gain, false) + accessor("dy", spec.dy, false) +
                 accessor("dx", spec.y, true) + accessor("dgain", spec.gainGrad, true) +
                 accessor.optional("residual", "RESIDUAL", spec.residual, false) +
                 accessor.optional("normalized", "NORMALIZED", spec.normalized, true) +
                 "  TL_DEVICE static float *partial(const Params &p) { return p.ws; }\n"
                 "  TL_DEVICE static unsigned *counter(const Params &p) { return p.sync; }\n";
    plan.call = "tl_rmsnorm_grad_rows";
    plan.blocks = std::max<int64_t>(1, (spec.rows + plan.rowsPerBlock - 1) / plan.rowsPerBlock);
    plan.workspace = plan.blocks * spec.cols * 4;
    break;
  case RowSpec::Kind::SoftmaxGrad:
    plan.what = fmt::format("softmax backward of {} rows of {}: y (dy - sum(dy y)); one warp per row", spec.rows,
                            spec.cols);
    plan.hooks = accessor("y", spec.x, false) + accessor("dy", spec.dy, false) + accessor("dx", spec.y, true);
    plan.call = "tl_softmax_grad_rows";
    break;
  case RowSpec::Kind::CrossEntropyGrad: {
    // A block wide enough to hold a row in registers (8 loads a thread) where one can.
    plan.threads = spec.cols > 256 * 8 * 8 ? 1024 : spec.cols <= 128 * plan.vec ? 128 : 256;
    bool held = spec.cols <= plan.threads * plan.vec * 8;
    plan.what = fmt::format("cross-entropy backward over {} rows of {} logits: (softmax - onehot(next id)) / {} "
                            "predictions, zeros at each sequence's last position{}; one block per row, {}",
                            spec.rows, spec.cols, predictions,
                            spec.loss >= 0 ? ", and the loss (the mean taken in order by the last block)" : "",
                            held ? "the row read once and held in registers" : "the row read twice");
    plan.hooks = accessor("logits", spec.x, false) + accessor("ids", spec.ids, false) +
                 accessor("dlogits", spec.y, true) + accessor.optional("loss", "LOSS", spec.loss, true) + kLossWorkspace;
    plan.call = "tl_cross_entropy_grad_rows";
    plan.blocks = std::max<int64_t>(1, std::min<int64_t>(spec.rows, 8192));
    if (spec.loss >= 0) plan.workspace = std::max<int64_t>(predictions, 1) * 4;
    break;
  }
  case RowSpec::Kind::EmbeddingGrad:
    plan.what = fmt::format("embedding backward: each of {} table rows of {} sums the rows of d y of the tokens that "
                            "read it, in token order ({} tokens); one block per table row, no atomics",
                            spec.rows, spec.cols, spec.tokens);
    plan.hooks = accessor("dy", spec.dy, false) + accessor("ids", spec.ids, false) + accessor("dtable", spec.y, true);
    plan.call = "tl_embedding_grad_rows";
    plan.blocks = std::max<int64_t>(1, std::min<int64_t>(spec.rows, 65536));
    break;
  case RowSpec::Kind::RmsNorm:
  case RowSpec::Kind::Softmax:
  case RowSpec::Kind::Embedding:
  case RowSpec::Kind::CrossEntropy: break;  // planForwardRows'
  }
}

bool isForwardRow(RowSpec::Kind kind) {
  return kind == RowSpec::Kind::RmsNorm || kind == RowSpec::Kind::Softmax || kind == RowSpec::Kind::Embedding ||
         kind == RowSpec::Kind::CrossEntropy;
}

} // namespace

EmittedKernel emitRows(const KernelSource &source, const RowSpec &spec) {
  const std::string &entry = source.entry();
  RowPlan plan;
  plan.blocks = std::max<int64_t>(1, (spec.rows + 7) / 8);
  plan.vec = spec.cols % 8 == 0 ? 8 : 1;
  if (isForwardRow(spec.kind)) planForwardRows(source, spec, plan);
  else planGradRows(source, spec, plan);
  std::string out = source.header(plan.what, {});
  out += source.prelude({plan.templateFile});
  out += source.paramsStruct();
  out += fmt::format("struct {}_spec {{\n  using Params = {}_params;\n", entry, entry);
  out += fmt::format("  static constexpr tl_i64 ROWS = {}, TOKENS = {};\n  static constexpr int COLS = {}, VEC = {}, BATCH = {}, "
                     "SEQ = {}, VOCAB = {}, ROWS_PER_BLOCK = {}, THREADS = {};\n  static constexpr float EPS = {};\n",
                     spec.rows, spec.tokens, spec.cols, plan.vec, spec.batch, spec.seq, spec.cols, plan.rowsPerBlock,
                     plan.threads, floatLiteral(spec.eps));
  out += plan.hooks + "};\n";
  out += source.entryPoint(std::to_string(plan.threads), fmt::format("  {}<{}_spec>(p);\n", plan.call, entry));
  EmittedKernel emitted;
  emitted.source = std::move(out);
  emitted.launch["cuda"] = emitted.launch["hip"] = {plan.blocks, plan.threads, 0};
  emitted.workspaceBytes = plan.workspace;
  // The last block finds itself with a counter: cross-entropy's mean, RMSNorm's d gain.
  if (spec.kind == RowSpec::Kind::CrossEntropy || spec.kind == RowSpec::Kind::RmsNormGrad || spec.loss >= 0)
    emitted.syncWords = 1;
  // As tasks of a persistent kernel: the forward's row kernels (a warp a row, or for
  // cross-entropy a block a prediction).
  if (isForwardRow(spec.kind)) {
    const int64_t rows = spec.kind == RowSpec::Kind::CrossEntropy ? 1 : plan.threads / 32, blocks = plan.blocks;
    emitted.tasks = {blocks, plan.threads, 0,
                     [spec, rows, blocks](int64_t block) { return rowBlockAccess(spec, rows, blocks, block); }};
  }
  return emitted;
}

} // namespace tlc::codegen
