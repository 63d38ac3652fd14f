#include "runtime/Tokenizer.h"

#include <fmt/format.h>

#include <sys/stat.h>

#include <algorithm>
#include <cstdio>

#include "runtime/Error.h"
#include "runtime/MappedFile.h"
#include "runtime/Unicode.h"

namespace tlc {
namespace {

bool isDirectory(const std::string &path) {
  struct stat status;
  return ::stat(path.c_str(), &status) == 0 && S_ISDIR(status.st_mode);
}

bool endsWith(const std::string &text, const std::string &suffix) {
  return text.size() >= suffix.size() && text.compare(text.size() - suffix.size(), suffix.size(), suffix) == 0;
}

bool endsWithReplacement(const std::string &text) { return endsWith(text, kReplacementCharacter); }

// A directory's tokenizer: tokenizer.model, else (or when SentencePiece cannot be
// loaded) tokenizer.json.
std::unique_ptr<Tokenizer> loadFromDirectory(const std::string &directory) {
  std::string model = directory + "/tokenizer.model", json = directory + "/tokenizer.json";
  bool hasModel = inputFileProblem(model).empty(), hasJson = inputFileProblem(json).empty();
  if (hasModel) {
    try {
      return loadSentencePiece(model);
    } catch (const Error &error) {
      if (!hasJson) throw;
      std::fprintf(stderr, "tlc: note: %s; reading %s instead\n", error.what(), json.c_str());
    }
  }
  if (hasJson) return loadHfTokenizer(json);
  throw Error(fmt::format("'{}' holds no tokenizer (tokenizer.model or tokenizer.json)", directory));
}

} // namespace

std::unique_ptr<Tokenizer> loadTokenizer(const std::string &path) {
  if (isDirectory(path)) return loadFromDirectory(path);
  if (endsWith(path, ".json")) return loadHfTokenizer(path);
  return loadSentencePiece(path);
}

TextStream::TextStream(const Tokenizer &tokenizer, std::vector<int32_t> context)
    : tokenizer_(tokenizer), ids_(std::move(context)) {
  // A few ids of context, so the first new piece decodes as it follows them (its space).
  read_ = ids_.size();
  prefix_ = read_ - std::min<size_t>(read_, 4);
}

std::string TextStream::add(int32_t id) {
  ids_.push_back(id);
  std::vector<int32_t> shown(ids_.begin() + ptrdiff_t(prefix_), ids_.begin() + ptrdiff_t(read_));
  std::vector<int32_t> all(ids_.begin() + ptrdiff_t(prefix_), ids_.end());
  std::string before = tokenizer_.decode(shown), now = tokenizer_.decode(all);
  // Held back while the text ends inside a character, or has not grown past what was shown.
  if (now.size() <= before.size() || endsWithReplacement(now)) return "";
  prefix_ = read_;
  read_ = ids_.size();
  return now.substr(before.size());
}

std::string TextStream::flush() {
  std::vector<int32_t> shown(ids_.begin() + ptrdiff_t(prefix_), ids_.begin() + ptrdiff_t(read_));
  std::vector<int32_t> all(ids_.begin() + ptrdiff_t(prefix_), ids_.end());
  std::string before = tokenizer_.decode(shown), now = tokenizer_.decode(all);
  prefix_ = read_ = ids_.size();
  return now.size() > before.size() ? now.substr(before.size()) : "";
}

} // namespace tlc
