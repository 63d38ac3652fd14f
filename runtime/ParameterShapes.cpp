#include "runtime/ParameterShapes.h"

#include <fmt/format.h>

#include "runtime/Error.h"
#include "runtime/Tensor.h"

namespace tlc {

void checkParameterShapes(const std::vector<Parameter> &parameters, const std::string &origin,
                          const std::function<const std::vector<int64_t> *(const std::string &key)> &shapeOf) {
  std::vector<std::string> problems;
  for (const Parameter &parameter : parameters) {
    const std::vector<int64_t> *shape = shapeOf(parameter.key);
    if (!shape)
      problems.push_back(fmt::format("missing '{}' (expected shape {})", parameter.key,
                                     shapeString(parameter.shape)));
    else if (*shape != parameter.shape)
      problems.push_back(fmt::format("'{}' has shape {}, expected {}", parameter.key, shapeString(*shape),
                                     shapeString(parameter.shape)));
  }
  if (problems.empty()) return;
  std::string message = fmt::format("{}: weights do not match the model's parameters ({} problem{}):", origin,
                                    problems.size(), problems.size() == 1 ? "" : "s");
  for (const std::string &problem : problems) message += "\n  " + problem;
  throw Error(message);
}

} // namespace tlc
