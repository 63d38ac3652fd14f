#include "runtime/FiniteResults.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "runtime/Error.h"

namespace tlc {

bool hasLoss(const Program &program) { return program.outputs.size() > 1 && program.seqLen > 1; }

std::string nonFiniteResults(const Program &program, const ForwardResult &result) {
  const std::vector<float> &logits = result.logits.data;
  auto first = std::find_if(logits.begin(), logits.end(), [](float x) { return !std::isfinite(x); });
  if (first != logits.end()) {
    size_t index = size_t(first - logits.begin());
    size_t count = size_t(std::count_if(first, logits.end(), [](float x) { return !std::isfinite(x); }));
    int64_t vocab = std::max<int64_t>(1, program.vocab), seq = std::max<int64_t>(1, program.seqLen);
    return fmt::format("the logits are not finite: {} at [{}, {}, {}] (batch, position, vocab index), {} of {} values",
                       *first, int64_t(index) / vocab / seq, int64_t(index) / vocab % seq, int64_t(index) % vocab,
                       count, logits.size());
  }
  if (hasLoss(program) && !std::isfinite(result.loss))
    return fmt::format("the loss is {} while every logit is finite", result.loss);
  return "";
}

void checkFiniteForward(const Program &program, const ForwardResult &result, const Weights &weights,
                        const std::vector<int32_t> &tokenIds, int threads) {
  std::string problem = nonFiniteResults(program, result);
  if (problem.empty()) return;
  int64_t flops = 0;
  for (const Kernel &kernel : program.kernels) flops += kernel.flops;
  std::string where;
  // The CPU reference again, op by op: moments at the sizes it runs at, minutes at a
  // 1.1B model's; beyond that the user is told how to find it.
  if (flops > int64_t(200e9)) {
    where = "not located: the CPU reference would take long at this size (a smaller --batch-size or --seq-len "
            "with --target=cpu finds it)";
  } else {
    try {
      std::string located = locateNonFinite(program, weights, tokenIds, threads);
      where = located.empty() ? "the CPU reference, run op by op, keeps every value finite: the backend's kernels "
                                "differ from it"
                              : "first: " + located + " (the CPU reference, op by op)";
    } catch (const Error &error) {
      where = fmt::format("not located: {}", error.what());
    }
  }
  throw Error(fmt::format("{}; {} (--allow-nonfinite reports them anyway)", problem, where));
}

std::string nonFiniteWeight(const Weights &weights) {
  for (const auto &[key, tensor] : weights.all()) {
    auto bad = std::find_if(tensor.data.begin(), tensor.data.end(), [](float x) { return !std::isfinite(x); });
    if (bad != tensor.data.end())
      return fmt::format("tensor '{}' holds {} at element {}", key, *bad, bad - tensor.data.begin());
  }
  return "";
}

} // namespace tlc
