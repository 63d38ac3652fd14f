#include "runtime/RunInputs.h"

#include <fmt/format.h>

#include <cerrno>
#include <climits>
#include <cstring>
#include <fstream>

#include "runtime/Backend.h"
#include "runtime/Error.h"

namespace tlc {

Weights loadWeights(const RunInputs &inputs, const Program &program) {
  if (inputs.weightsPath.empty()) return Weights::random(program.parameters, inputs.seed, inputs.threads);
  Weights weights = Weights::loadSafetensors(inputs.weightsPath);
  weights.checkAgainst(program.parameters, inputs.weightsPath);
  return weights;
}

std::vector<int32_t> loadTokens(const RunInputs &inputs, const Program &program) {
  std::vector<int32_t> tokens =
      inputs.tokensPath.empty() ? randomTokenIds(program, inputs.seed) : readTokenFile(inputs.tokensPath);
  checkTokenIds(program, tokens);
  return tokens;
}

std::vector<int32_t> readTokenFile(const std::string &path) {
  std::ifstream file(path);
  if (!file) throw Error(fmt::format("cannot open token file '{}': {}", path, std::strerror(errno)));
  std::vector<int32_t> tokens;
  for (std::string word; file >> word;) {
    char *end = nullptr;
    errno = 0;
    long long id = std::strtoll(word.c_str(), &end, 10);
    if (*end != '\0' || errno == ERANGE || id < INT32_MIN || id > INT32_MAX)
      throw Error(fmt::format("token file '{}': '{}' is not a token id", path, word));
    tokens.push_back(int32_t(id));
  }
  return tokens;
}

std::string describeWeights(const RunInputs &inputs) {
  return inputs.weightsPath.empty() ? fmt::format("seeded random normal(0, 0.02), seed {}", inputs.seed)
                                    : fmt::format("file '{}'", inputs.weightsPath);
}

std::string describeTokens(const RunInputs &inputs) {
  return inputs.tokensPath.empty() ? fmt::format("seeded random, seed {}", inputs.seed)
                                   : fmt::format("file '{}'", inputs.tokensPath);
}

} // namespace tlc
