// tokenizer.json, as the Hugging Face tokenizers library defines it: added tokens split
// out first, then each stretch of text normalized, pre-tokenized into words and each word
// merged by the BPE model; decoding runs the decoders over the pieces. tlc reads the
// components Llama-family tokenizers use and refuses any other by its type.
#include "runtime/Tokenizer.h"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <functional>
#include <limits>
#include <optional>
#include <tuple>

#include "runtime/BpeModel.h"
#include "runtime/Error.h"
#include "runtime/PreTokenize.h"
#include "runtime/StrictJson.h"
#include "runtime/Unicode.h"

namespace tlc {
namespace {

using Json = nlohmann::json;

// A word on its way through the pre-tokenizers; `atStart`: it begins the whole text.
struct Word {
  std::string text;
  bool atStart;
};
using Words = std::vector<Word>;
using PreTokenizer = std::function<Words(const Word &)>;
using Normalizer = std::function<std::string(std::string)>;
using Pieces = std::vector<std::string>;
using Decoder = std::function<Pieces(Pieces)>;

struct AddedToken {
  std::string content;
  int32_t id;
  bool special, lstrip, rstrip;
};

[[noreturn]] void unsupported(const std::string &what, const Json &json) {
  throw Error(fmt::format("{} {} is not supported (tlc reads BPE tokenizers of the Llama family)", what,
                          json.dump(-1, ' ', false, Json::error_handler_t::replace).substr(0, 200)));
}

std::string stringField(const Json &json, const char *field, const std::string &fallback = {}) {
  auto found = json.find(field);
  if (found == json.end() || found->is_null()) return fallback;
  if (!found->is_string()) throw Error(fmt::format("'{}' is {}, expected a string", field, found->dump()));
  return found->get<std::string>();
}

bool flagField(const Json &json, const char *field, bool fallback) {
  auto found = json.find(field);
  if (found == json.end() || found->is_null()) return fallback;
  if (!found->is_boolean()) throw Error(fmt::format("'{}' is {}, expected true or false", field, found->dump()));
  return found->get<bool>();
}

// A JSON number that is a whole number from 0 to 2^31 - 1 (an id, a count); none for a
// float, a negative number or anything else, which is refused rather than converted.
std::optional<int32_t> nonNegativeInt32(const Json &json) {
  if (!json.is_number_integer() || json.get<int64_t>() < 0 || json.get<int64_t>() > std::numeric_limits<int32_t>::max())
    return std::nullopt;
  return int32_t(json.get<int64_t>());
}

// A count (Strip's "start" and "stop").
size_t countField(const Json &json, const char *field, size_t fallback) {
  auto found = json.find(field);
  if (found == json.end() || found->is_null()) return fallback;
  std::optional<int32_t> count = nonNegativeInt32(*found);
  if (!count) throw Error(fmt::format("'{}' is {}, expected a whole number from 0 to 2^31 - 1", field, found->dump()));
  return size_t(*count);
}

// {"String": "x"}: the literal; a regex pattern is refused.
std::string literalPattern(const Json &json) {
  if (json.is_object() && json.contains("String") && json["String"].is_string()) return json["String"];
  unsupported("pattern", json);
}

std::string replaceAll(std::string text, const std::string &from, const std::string &to) {
  if (from.empty()) return text;
  for (size_t at = text.find(from); at != std::string::npos; at = text.find(from, at + to.size()))
    text.replace(at, from.size(), to);
  return text;
}

char32_t singleCharacter(const std::string &text, const char *field) {
  CodePoints points = decodeUtf8(text, field);
  if (points.points.size() != 1) throw Error(fmt::format("'{}' is '{}', expected one character", field, text));
  return points.points[0];
}

// Components that are a list of others ("Sequence") are flattened.
void eachComponent(const Json &json, const char *listField, const std::function<void(const Json &)> &visit) {
  if (json.is_null()) return;
  if (!json.is_object()) unsupported("component", json);
  if (stringField(json, "type") == "Sequence") {
    if (!json.contains(listField) || !json[listField].is_array()) unsupported("Sequence", json);
    for (const Json &item : json[listField]) eachComponent(item, listField, visit);
    return;
  }
  visit(json);
}

Normalizer normalizerOf(const Json &json) {
  std::string type = stringField(json, "type");
  if (type == "Prepend") {
    std::string prefix = stringField(json, "prepend");
    return [prefix](std::string text) { return text.empty() ? text : prefix + text; };
  }
  if (type == "Replace") {
    std::string from = literalPattern(json.value("pattern", Json())), to = stringField(json, "content");
    return [from, to](std::string text) { return replaceAll(std::move(text), from, to); };
  }
  unsupported("normalizer", json);
}

// Metaspace: spaces become the replacement character, which starts the text ("always",
// or "first": only where the text begins), and with `split` each word.
PreTokenizer metaspaceOf(const Json &json) {
  std::string replacement = stringField(json, "replacement", "\xE2\x96\x81");
  singleCharacter(replacement, "replacement");
  std::string scheme = stringField(json, "prepend_scheme", flagField(json, "add_prefix_space", true) ? "always" : "never");
  if (scheme != "always" && scheme != "first" && scheme != "never") unsupported("Metaspace prepend_scheme", json);
  bool split = flagField(json, "split", true);
  return [replacement, scheme, split](const Word &word) {
    std::string text = replaceAll(word.text, " ", replacement);
    bool prepend = scheme == "always" || (scheme == "first" && word.atStart);
    if (prepend && text.compare(0, replacement.size(), replacement) != 0) text = replacement + text;
    if (!split) return Words{{text, word.atStart}};
    Words words;
    for (size_t at = 0; at < text.size();) {  // each replacement begins a word
      size_t from = text.compare(at, replacement.size(), replacement) == 0 ? at + replacement.size() : at;
      size_t next = std::min(text.find(replacement, from), text.size());
      words.push_back({text.substr(at, next - at), word.atStart && at == 0});
      at = next;
    }
    return words;
  };
}

PreTokenizer preTokenizerOf(const Json &json) {
  std::string type = stringField(json, "type");
  if (type == "ByteLevel") {
    bool prefixSpace = flagField(json, "add_prefix_space", false), useRegex = flagField(json, "use_regex", true);
    return [prefixSpace, useRegex](const Word &word) {
      std::string text = prefixSpace && word.text.compare(0, 1, " ") != 0 ? " " + word.text : word.text;
      Words words;
      for (const std::string &piece : useRegex ? splitByPattern(SplitPattern::Gpt2, text) : Pieces{text})
        words.push_back({bytesToAlphabet(piece), word.atStart && words.empty()});
      return words;
    };
  }
  if (type == "Split") {
    const Json &pattern = json.value("pattern", Json());
    std::optional<SplitPattern> known;
    if (pattern.is_object() && pattern.contains("Regex") && pattern["Regex"].is_string())
      known = knownSplitPattern(pattern["Regex"].get<std::string>());
    if (!known || stringField(json, "behavior") != "Isolated" || flagField(json, "invert", false))
      unsupported("Split pre-tokenizer", json);
    return [pattern = *known](const Word &word) {
      Words words;
      for (const std::string &piece : splitByPattern(pattern, word.text)) words.push_back({piece, word.atStart && words.empty()});
      return words;
    };
  }
  if (type == "Metaspace") return metaspaceOf(json);
  unsupported("pre_tokenizer", json);
}

// ByteFallback: runs of <0xHH> pieces become their bytes, as text when they make UTF-8,
// else one U+FFFD a byte.
Pieces decodeBytePieces(Pieces pieces) {
  Pieces out;
  std::string bytes;
  auto flushBytes = [&] {
    if (bytes.empty()) return;
    if (lossyUtf8(bytes) == bytes) out.push_back(bytes);
    else out.insert(out.end(), bytes.size(), kReplacementCharacter);
    bytes.clear();
  };
  for (std::string &piece : pieces) {
    unsigned value = 0;
    bool isByte = piece.size() == 6 && piece.compare(0, 3, "<0x") == 0 && piece[5] == '>' &&
                  std::isxdigit(static_cast<unsigned char>(piece[3])) && std::isxdigit(static_cast<unsigned char>(piece[4]));
    if (isByte) {
      value = unsigned(std::stoul(piece.substr(3, 2), nullptr, 16));
      bytes += char(value);
      continue;
    }
    flushBytes();
    out.push_back(std::move(piece));
  }
  flushBytes();
  return out;
}

// Strip: up to `start` leading and `stop` trailing `content` characters off a piece.
std::string stripCharacters(const std::string &piece, char32_t content, size_t start, size_t stop) {
  CodePoints points = decodeUtf8(piece, "piece");
  size_t first = 0, last = points.points.size();
  while (first < start && first < last && points.points[first] == content) ++first;
  for (size_t cut = 0; cut < stop && last > first && points.points[last - 1] == content; ++cut) --last;
  return piece.substr(points.offsets[first], points.offsets[last] - points.offsets[first]);
}

// Each decoder maps the list of pieces to a new list, as the library's decode_chain.
Decoder decoderOf(const Json &json) {
  std::string type = stringField(json, "type");
  if (type == "ByteLevel")
    return [](Pieces pieces) {
      std::string bytes;
      for (const std::string &piece : pieces)
        if (std::string spelled; alphabetToBytes(piece, spelled)) bytes += spelled;
        else bytes += piece;
      return Pieces{lossyUtf8(bytes)};
    };
  if (type == "Replace") {
    std::string from = literalPattern(json.value("pattern", Json())), to = stringField(json, "content");
    return [from, to](Pieces pieces) {
      for (std::string &piece : pieces) piece = replaceAll(piece, from, to);
      return pieces;
    };
  }
  if (type == "ByteFallback") return [](Pieces pieces) { return decodeBytePieces(std::move(pieces)); };
  if (type == "Fuse")
    return [](Pieces pieces) {
      std::string joined;
      for (const std::string &piece : pieces) joined += piece;
      return Pieces{joined};
    };
  if (type == "Strip") {
    char32_t content = singleCharacter(stringField(json, "content"), "content");
    size_t start = countField(json, "start", 0), stop = countField(json, "stop", 0);
    return [content, start, stop](Pieces pieces) {
      for (std::string &piece : pieces) piece = stripCharacters(piece, content, start, stop);
      return pieces;
    };
  }
  if (type == "Metaspace") {
    std::string replacement = stringField(json, "replacement", "\xE2\x96\x81");
    std::string scheme = stringField(json, "prepend_scheme", flagField(json, "add_prefix_space", true) ? "always" : "never");
    return [replacement, scheme](Pieces pieces) {
      for (size_t i = 0; i < pieces.size(); ++i)  // the first piece's replacements are dropped when prepended
        pieces[i] = replaceAll(pieces[i], replacement, i == 0 && scheme != "never" ? "" : " ");
      return pieces;
    };
  }
  unsupported("decoder", json);
}

std::vector<std::pair<std::string, std::string>> mergesOf(const Json &json) {
  std::vector<std::pair<std::string, std::string>> merges;
  for (const Json &merge : json) {
    if (merge.is_string()) {  // "left right", the older form
      std::string text = merge.get<std::string>();
      size_t space = text.find(' ');
      if (space == std::string::npos || text.find(' ', space + 1) != std::string::npos)
        throw Error(fmt::format("merge '{}' is not two pieces separated by a space", text));
      merges.emplace_back(text.substr(0, space), text.substr(space + 1));
    } else if (merge.is_array() && merge.size() == 2 && merge[0].is_string() && merge[1].is_string()) {
      merges.emplace_back(merge[0].get<std::string>(), merge[1].get<std::string>());
    } else {
      throw Error(fmt::format("merge {} is not [left, right] or \"left right\"", merge.dump()));
    }
  }
  return merges;
}

std::unique_ptr<BpeModel> modelOf(const Json &json) {
  if (!json.is_object() || stringField(json, "type", "BPE") != "BPE") unsupported("model", json.value("type", Json()));
  for (const char *field : {"continuing_subword_prefix", "end_of_word_suffix"})
    if (!stringField(json, field).empty()) unsupported(fmt::format("BPE {}", field).c_str(), json[field]);
  if (json.contains("dropout") && !json["dropout"].is_null() && json["dropout"] != 0)
    unsupported("BPE dropout", json["dropout"]);
  if (!json.contains("vocab") || !json["vocab"].is_object() || !json.contains("merges") || !json["merges"].is_array())
    throw Error("the BPE model needs a \"vocab\" object and a \"merges\" list");
  std::unordered_map<std::string, int32_t> vocab;
  for (const auto &[piece, id] : json["vocab"].items()) {
    std::optional<int32_t> value = nonNegativeInt32(id);
    if (!value) throw Error(fmt::format("vocab piece '{}' has id {}, expected 0 to 2^31 - 1", piece, id.dump()));
    vocab[piece] = *value;
  }
  BpeModel::Options options;
  if (std::string unknown = stringField(json, "unk_token"); !unknown.empty()) options.unknown = unknown;
  options.byteFallback = flagField(json, "byte_fallback", false);
  options.fuseUnknown = flagField(json, "fuse_unk", false);
  options.ignoreMerges = flagField(json, "ignore_merges", false);
  return std::make_unique<BpeModel>(std::move(vocab), mergesOf(json["merges"]), options);
}

std::vector<AddedToken> addedTokensOf(const Json &json) {
  std::vector<AddedToken> tokens;
  if (json.is_null()) return tokens;
  if (!json.is_array()) throw Error("\"added_tokens\" is not a list");
  for (const Json &token : json) {
    std::optional<int32_t> id = token.is_object() && token.contains("id") ? nonNegativeInt32(token["id"]) : std::nullopt;
    if (!id || stringField(token, "content").empty())
      throw Error(fmt::format("added token {} needs an id and a content", token.dump().substr(0, 200)));
    if (flagField(token, "single_word", false)) unsupported("added token with single_word", token);
    tokens.push_back({stringField(token, "content"), *id, flagField(token, "special", false),
                      flagField(token, "lstrip", false), flagField(token, "rstrip", false)});
  }
  return tokens;
}

class HfTokenizer : public Tokenizer {
public:
  HfTokenizer(const Json &json, std::string origin) : origin_(std::move(origin)) {
    added_ = addedTokensOf(json.value("added_tokens", Json()));
    eachComponent(json.value("normalizer", Json()), "normalizers",
                  [&](const Json &item) { normalizers_.push_back(normalizerOf(item)); });
    eachComponent(json.value("pre_tokenizer", Json()), "pretokenizers",
                  [&](const Json &item) { preTokenizers_.push_back(preTokenizerOf(item)); });
    eachComponent(json.value("decoder", Json()), "decoders",
                  [&](const Json &item) { decoders_.push_back(decoderOf(item)); });
    if (!json.contains("model")) throw Error("no \"model\"");
    model_ = modelOf(json["model"]);
    vocabSize_ = model_->idLimit();
    for (const AddedToken &token : added_) vocabSize_ = std::max<int64_t>(vocabSize_, int64_t(token.id) + 1);
  }

  std::vector<int32_t> encode(std::string_view text) const override {
    decodeUtf8(text, "the text to tokenize");  // says where it is not UTF-8
    std::vector<int32_t> ids;
    size_t at = 0;
    while (at <= text.size()) {
      auto [begin, end, token] = nextAddedToken(text, at);
      encodeStretch(text.substr(at, begin - at), at == 0, ids);
      if (!token) break;
      ids.push_back(token->id);
      at = end;
    }
    return ids;
  }

  std::string decode(const std::vector<int32_t> &ids) const override {
    Pieces pieces;
    for (int32_t id : ids) {
      if (const AddedToken *token = addedById(id)) {
        if (!token->special) pieces.push_back(token->content);
      } else if (const std::string *piece = model_->piece(id)) {
        pieces.push_back(*piece);
      } else {
        throw Error(fmt::format("token id {} is not in the vocabulary of {}", id, origin_));
      }
    }
    for (const Decoder &decoder : decoders_) pieces = decoder(std::move(pieces));
    std::string text;
    for (const std::string &piece : pieces) text += piece;
    return text;
  }

  int64_t vocabSize() const override { return vocabSize_; }

  std::string describe() const override {
    return fmt::format("tokenizer.json '{}' (BPE, {} pieces, {} added tokens)", origin_, model_->size(), added_.size());
  }

private:
  const AddedToken *addedById(int32_t id) const {
    for (const AddedToken &token : added_)
      if (token.id == id) return &token;
    return nullptr;
  }

  // The leftmost added token at or after `from` (the longest where several start there),
  // its span widened over the white space it strips: [begin, end), or text.size() and null.
  std::tuple<size_t, size_t, const AddedToken *> nextAddedToken(std::string_view text, size_t from) const {
    size_t best = std::string_view::npos;
    const AddedToken *found = nullptr;
    for (const AddedToken &token : added_) {
      size_t at = text.find(token.content, from);
      if (at < best || (at == best && at != std::string_view::npos && token.content.size() > found->content.size())) {
        best = at;
        found = &token;
      }
    }
    if (!found) return {text.size(), text.size(), nullptr};
    size_t begin = best, end = best + found->content.size();
    if (found->lstrip)
      while (begin > from && std::isspace(static_cast<unsigned char>(text[begin - 1]))) --begin;
    if (found->rstrip)
      while (end < text.size() && std::isspace(static_cast<unsigned char>(text[end]))) ++end;
    return {begin, end, found};
  }

  void encodeStretch(std::string_view stretch, bool atStart, std::vector<int32_t> &ids) const {
    if (stretch.empty()) return;
    std::string text(stretch);
    for (const Normalizer &normalize : normalizers_) text = normalize(std::move(text));
    Words words{{text, atStart}};
    for (const PreTokenizer &split : preTokenizers_) {
      Words next;
      for (const Word &word : words)
        for (Word &piece : split(word)) next.push_back(std::move(piece));
      words = std::move(next);
    }
    for (const Word &word : words) model_->encodeWord(word.text, ids);
  }

  std::string origin_;
  std::vector<AddedToken> added_;
  std::vector<Normalizer> normalizers_;
  std::vector<PreTokenizer> preTokenizers_;
  std::vector<Decoder> decoders_;
  std::unique_ptr<BpeModel> model_;
  int64_t vocabSize_ = 0;
};

} // namespace

namespace {

std::unique_ptr<Tokenizer> fromJson(const Json &json, const std::string &origin) {
  try {
    return std::make_unique<HfTokenizer>(json, origin);
  } catch (const Json::exception &error) {
    throw Error(fmt::format("tokenizer '{}': malformed: {}", origin, error.what()));
  } catch (const Error &error) {
    throw Error(fmt::format("tokenizer '{}': {}", origin, error.what()));
  }
}

} // namespace

std::unique_ptr<Tokenizer> loadHfTokenizer(const std::string &path) {
  return fromJson(readStrictJsonFile(path, "tokenizer"), path);
}

std::unique_ptr<Tokenizer> parseHfTokenizer(const std::string &text, const std::string &origin) {
  Json json;
  try {
    json = parseStrictJson(text);
  } catch (const Error &error) {
    throw Error(fmt::format("{}: {}", origin, error.what()));
  }
  return fromJson(json, origin);
}

} // namespace tlc
