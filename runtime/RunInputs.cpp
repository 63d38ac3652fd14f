#include "runtime/RunInputs.h"

#include <fmt/format.h>


#include "runtime/Backend.h"
#include "runtime/CheckpointWeights.h"
#include "runtime/Error.h"
#include "runtime/TokenFile.h"

namespace tlc {

Weights loadWeights(const RunInputs &inputs, const Program &program) {
  if (!inputs.checkpointDir.empty()) return loadCheckpointWeights(inputs.checkpointDir, program.parameters);
  if (inputs.weightsPath.empty()) return Weights::random(program.parameters, inputs.seed, inputs.threads);
  return Weights::loadSafetensors(inputs.weightsPath, program.parameters);  // only the model's tensors
}

std::vector<int32_t> loadTokens(const RunInputs &inputs, const Program &program) {
  std::vector<int32_t> tokens =
      inputs.tokensPath.empty() ? randomTokenIds(program, inputs.seed) : readTokenFile(inputs.tokensPath, program);
  checkTokenIds(program, tokens);
  return tokens;
}

std::string describeWeights(const RunInputs &inputs) {
  if (!inputs.checkpointDir.empty()) {
    std::vector<std::string> files = checkpointWeightFiles(inputs.checkpointDir);
    return fmt::format("checkpoint '{}' ({})", inputs.checkpointDir,
                       files.size() == 1 ? files[0] : fmt::format("{} shards", files.size()));
  }
  return inputs.weightsPath.empty() ? fmt::format("seeded random normal(0, 0.02), seed {}", inputs.seed)
                                    : fmt::format("file '{}'", inputs.weightsPath);
}

std::string describeTokens(const RunInputs &inputs) {
  return inputs.tokensPath.empty() ? fmt::format("seeded random, seed {}", inputs.seed)
                                   : fmt::format("file '{}'", inputs.tokensPath);
}

} // namespace tlc
