#include "compiler/codegen/Templates.h"

#include "runtime/Error.h"

#include <fmt/format.h>

#include <set>
#include <sstream>

namespace tlc::codegen {
namespace {

void append(const std::string &name, std::set<std::string> &done, std::string &out) {
  if (!done.insert(name).second) return;
  auto found = embeddedTemplates().find(name);
  if (found == embeddedTemplates().end()) throw Error(fmt::format("code generation: no template '{}'", name));
  std::istringstream lines(found->second);
  for (std::string line; std::getline(lines, line);) {
    if (line.rfind("#pragma once", 0) == 0) continue;
    if (line.rfind("#include \"", 0) == 0) {
      std::string included = line.substr(10, line.find('"', 10) - 10);
      included = included.substr(included.rfind('/') + 1);
      if (embeddedTemplates().count(included)) {
        append(included, done, out);
        continue;
      }
    }
    out += line;
    out += '\n';
  }
}

} // namespace

std::string assembleTemplates(const std::vector<std::string> &names) {
  std::set<std::string> done;
  std::string out;
  for (const std::string &name : names) append(name, done, out);
  return out;
}

} // namespace tlc::codegen
