// JSON as tlc reads it from files (program.json, safetensors headers): nlohmann's
// parser, refusing what it would otherwise accept silently or choke on.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

namespace tlc {

// Deeper nesting than any file tlc reads has; bounds the recursion of whatever walks
// the parsed value (printing it in a message, comparing it).
constexpr int kMaxJsonDepth = 64;

// Parses `text`. Throws tlc::Error ("malformed JSON: ...", "duplicate key 'x'",
// "nested deeper than 64 levels") without naming the file: callers add it. Duplicate
// keys are an error because JSON parsers disagree on which one wins.
nlohmann::json parseStrictJson(const std::string &text);

// The file at `path` (a regular file, `what` in messages: "checkpoint index") parsed the
// same way; its problems are said as "<path>: malformed JSON: ...".
nlohmann::json readStrictJsonFile(const std::string &path, const std::string &what);

} // namespace tlc
