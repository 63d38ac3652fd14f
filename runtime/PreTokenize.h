// What byte-level BPE tokenizers (GPT-2, Llama 3) do to text before merging: split it
// into words by a regular expression, and spell each word's bytes as printable
// characters (GPT-2's byte alphabet). tlc matches the expressions tokenizer.json files
// use by hand, each one known by its exact text, rather than through a regex engine.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace tlc {

// The splitting expressions tlc knows.
enum class SplitPattern {
  Gpt2,    // 's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
  Llama3,  // (?i:'s|...|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+
};

// The pattern a tokenizer.json "Regex" spells, if tlc knows it.
std::optional<SplitPattern> knownSplitPattern(std::string_view regex);

// `text` (valid UTF-8) cut into the pattern's matches, found left to right as a
// backtracking regex engine finds them; text between matches is a piece of its own.
std::vector<std::string> splitByPattern(SplitPattern pattern, std::string_view text);

// GPT-2's byte alphabet: each byte as one printable character (UTF-8), and back.
std::string bytesToAlphabet(std::string_view bytes);
// The bytes a string of that alphabet spells; false when a character is not of it.
bool alphabetToBytes(std::string_view text, std::string &bytes);

} // namespace tlc
