// Strict JSON: duplicate keys and excessive nesting caught while parsing.
#include "runtime/StrictJson.h"

#include <fmt/format.h>

#include <set>
#include <vector>

#include "runtime/Error.h"
#include "runtime/MappedFile.h"

namespace tlc {

nlohmann::json parseStrictJson(const std::string &text) {
  using Event = nlohmann::json::parse_event_t;
  std::vector<std::set<std::string>> openObjects; // the keys seen in each object being read
  auto check = [&](int depth, Event event, nlohmann::json &parsed) {
    if (depth > kMaxJsonDepth)
      throw Error(fmt::format("malformed JSON: nested deeper than {} levels", kMaxJsonDepth));
    if (event == Event::object_start) openObjects.emplace_back();
    if (event == Event::object_end && !openObjects.empty()) openObjects.pop_back();
    if (event == Event::key && !openObjects.empty() &&
        !openObjects.back().insert(parsed.get<std::string>()).second)
      throw Error(fmt::format("malformed JSON: duplicate key {}",
                              parsed.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace)));
    return true;
  };
  try {
    return nlohmann::json::parse(text, check);
  } catch (const nlohmann::json::exception &error) {
    throw Error(fmt::format("malformed JSON: {}", error.what()));
  }
}

nlohmann::json readStrictJsonFile(const std::string &path, const std::string &what) {
  MappedFile file(path, what);
  try {
    return parseStrictJson(std::string(file.text()));
  } catch (const Error &error) {
    throw Error(fmt::format("{}: {}", path, error.what()));
  }
}

} // namespace tlc
