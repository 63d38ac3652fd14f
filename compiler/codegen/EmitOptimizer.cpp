// The optimizer's kernels: AdamW over every parameter in one launch, and the gradients'
// global norm (optimizer.cuh).
#include "compiler/codegen/EmitterSupport.h"

#include "runtime/Error.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

namespace tlc::codegen {

EmittedKernel emitOptimizer(const KernelSource &source, const OptimizerSpec &spec) {
  const std::string &entry = source.entry();
  constexpr int64_t kChunk = 4096, kThreads = 256;
  bool adamw = spec.kind == OptimizerSpec::Kind::AdamW;
  if (spec.grads.empty()) throw Error(fmt::format("code generation: kernel '{}' has no gradients", entry));
  std::vector<int64_t> firstBlock;
  int64_t blocks = 0, elements = 0;
  for (int64_t count : spec.counts) {
    firstBlock.push_back(blocks);
    blocks += std::max<int64_t>(1, (count + kChunk - 1) / kChunk);
    elements += count;
  }
  std::string what =
      adamw ? fmt::format("AdamW over {} parameters ({} elements) in one launch: fp32 master weights and moments, "
                          "lr {}, betas ({}, {}), eps {}, weight decay {}{}",
                          spec.grads.size(), elements, spec.lr, spec.beta1, spec.beta2, spec.eps, spec.weightDecay,
                          spec.gradNorm >= 0 ? fmt::format(", gradients clipped to global norm {}", spec.maxGradNorm) : "")
            : fmt::format("the global L2 norm of {} gradients ({} elements)", spec.grads.size(), elements);
  std::vector<std::string> notes{
      fmt::format("chunks of {} elements, one block each ({} blocks); a block finds its tensor in a table", kChunk, blocks)};
  if (spec.pieces > 0)
    notes.push_back(fmt::format("merged weights' gradients split in place: {} updates read their piece where it lies "
                                "in the merged gradient (tl.concat_grad, no copy)",
                                spec.pieces));
  std::string out = source.header(what, notes);
  out += source.prelude({"optimizer.cuh"});
  out += source.paramsStruct();
  out += fmt::format("__constant__ tl_i64 {}_first_block[{}] = {{{}}};\n", entry, firstBlock.size(),
                     fmt::join(firstBlock, ", "));
  out += fmt::format("struct {}_spec {{\n  using Params = {}_params;\n  static constexpr tl_i64 CHUNK = {};\n", entry, entry,
                     kChunk);
  if (adamw)
    out += fmt::format("  static constexpr float LR = {}, BETA1 = {}, BETA2 = {}, EPS = {}, WEIGHT_DECAY = {};\n",
                       floatLiteral(spec.lr), floatLiteral(spec.beta1), floatLiteral(spec.beta2), floatLiteral(spec.eps),
                       floatLiteral(spec.weightDecay));
  else
    out += "  TL_DEVICE static float *partial(const Params &p) { return p.ws; }\n"
           "  TL_DEVICE static unsigned *counter(const Params &p) { return p.sync; }\n" +
           fmt::format("  TL_DEVICE static float *norm(const Params &p) {{ return p.{}; }}\n", source.name(spec.norm));
  out += "};\n";
  std::string body = fmt::format("  using S = {}_spec;\n  tl_wait_for_producers();\n", entry);
  body += fmt::format("  const int t = tl_tensor_of_block<{}>({}_first_block, tl_block_index());\n", spec.grads.size(), entry);
  body += fmt::format("  const tl_i64 chunk = tl_block_index() - {}_first_block[t];\n", entry);
  if (adamw) {
    if (spec.gradNorm >= 0)
      body += fmt::format("  const float norm = p.{}[0], clip = fminf(1.0f, {} / (norm + 1e-6f));\n",
                          source.name(spec.gradNorm), floatLiteral(spec.maxGradNorm));
    else body += "  const float clip = 1.0f;\n";
  }
  // The switch picks the block's gradient; one update (or sum) follows for all tensors.
  body += "  tl_grad_ref grad;\n  switch (t) {\n";
  for (size_t t = 0; t < spec.grads.size(); ++t)
    body += fmt::format("  case {}: grad = tl_grad_of(p.{}{}, {}); break;\n", t, source.name(spec.grads[t]),
                        spec.offsets[t] ? fmt::format(" + {}", spec.offsets[t]) : "", spec.counts[t]);
  body += "  }\n";
  if (adamw) body += "  tl_adamw_chunk<S>(grad, chunk, clip, state, t);\n";
  else body += "  __shared__ float red[1024 / TL_WARP];\n  tl_global_norm_finish<S>(p, tl_block_sum(tl_chunk_squares<S>(grad, chunk), red));\n";
  body += "  tl_allow_dependents();\n";
  out += source.entryPoint(std::to_string(kThreads), body,
                           adamw ? std::vector<std::string>{"const tl_optimizer_state *state"} : std::vector<std::string>{});
  EmittedKernel emitted;
  emitted.source = std::move(out);
  emitted.launch["cuda"] = emitted.launch["hip"] = {blocks, int(kThreads), 0};
  if (!adamw) {
    emitted.workspaceBytes = blocks * 4;
    emitted.syncWords = 1;
  }
  return emitted;
}

} // namespace tlc::codegen
