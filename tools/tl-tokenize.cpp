// tl-tokenize: text to token ids and back with the tokenizers tlc generate reads
// (SentencePiece's tokenizer.model, Hugging Face's tokenizer.json), to see what a prompt
// becomes and to compare tlc's tokenizers with others. The runtime alone: no MLIR.
//
//   tl-tokenize tinyllama-hf/ --text "Hello world"      # 15043 3186
//   tl-tokenize tinyllama-hf/ --ids "15043 3186"        # Hello world
//   tl-tokenize tinyllama-hf/ --json < texts.json       # {"ids": [[...], ...], "decoded": [...]}
#include "runtime/Error.h"
#include "runtime/FlagRanges.h"
#include "runtime/OutputFile.h"
#include "runtime/StrictJson.h"
#include "runtime/Tokenizer.h"

#include <tlc/Version.h>

#include <fmt/format.h>

#include <cstring>
#include <iostream>
#include <iterator>
#include <limits>
#include <string>

namespace {

const char *kUsage =
    "usage: tl-tokenize TOKENIZER (--text=TEXT | --ids=IDS | --json | --describe)\n"
    "Encodes text into token ids, or decodes ids into text, with the tokenizers tlc generate reads.\n"
    "TOKENIZER: a tokenizer.model (SentencePiece), a tokenizer.json, or a directory holding one.\n"
    "\n"
    "  --text=TEXT     print TEXT's token ids (no BOS or EOS), space-separated\n"
    "  --ids=IDS       print the text of the ids (\"1 2 3\" or \"1,2,3\"; special tokens left out)\n"
    "  --json          read a JSON list of texts from stdin; print {\"ids\": [[...]], \"decoded\": [...]},\n"
    "                  each text's ids and the text they decode to\n"
    "  --describe      print which tokenizer it is, its vocabulary size, BOS and EOS\n"
    "  --version       which tlc this is\n";

std::vector<int32_t> parseIds(const std::string &text) {
  std::vector<int32_t> ids;
  for (size_t at = text.find_first_not_of(" ,\t\n"); at != std::string::npos; at = text.find_first_not_of(" ,\t\n", at)) {
    size_t end = text.find_first_of(" ,\t\n", at);
    std::string word = text.substr(at, end == std::string::npos ? std::string::npos : end - at);
    ids.push_back(int32_t(tlc::parseFlagInteger("--ids", word, {0, std::numeric_limits<int32_t>::max()})));
    at = end;
  }
  return ids;
}

std::string optionalId(const std::optional<int32_t> &id) { return id ? std::to_string(*id) : "none"; }

// Every text of a JSON list, encoded and decoded again.
std::string encodeJson(const tlc::Tokenizer &tokenizer, const std::string &input) {
  nlohmann::json texts = tlc::parseStrictJson(input);
  if (!texts.is_array()) throw tlc::Error("--json: stdin must hold a JSON list of strings");
  nlohmann::json ids = nlohmann::json::array(), decoded = nlohmann::json::array();
  for (const nlohmann::json &text : texts) {
    if (!text.is_string()) throw tlc::Error(fmt::format("--json: {} is not a string", text.dump()));
    std::vector<int32_t> encoded = tokenizer.encode(text.get<std::string>());
    ids.push_back(encoded);
    decoded.push_back(tokenizer.decode(encoded));
  }
  nlohmann::json out = {{"tokenizer", tokenizer.describe()}, {"ids", ids}, {"decoded", decoded}};
  return out.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
}

} // namespace

int main(int argc, char **argv) {
  tlc::reportOversizedWrites();
  std::string path, value, text, ids;
  bool haveText = false, json = false, describe = false;
  try {
    for (int i = 1; i < argc; ++i) {
      const char *arg = argv[i];
      if (tlc::printHelpOrVersion(arg, kUsage, tlc::versionLine("tl-tokenize"))) return 0;
      if (tlc::flagValue(arg, "--text", value)) text = value, haveText = true;
      else if (tlc::flagValue(arg, "--ids", value)) ids = value;
      else if (!std::strcmp(arg, "--json")) json = true;
      else if (!std::strcmp(arg, "--describe")) describe = true;
      else if (arg[0] != '-' && path.empty()) path = arg;
      else throw tlc::Error(fmt::format("unexpected argument '{}' (tl-tokenize --help lists the options)", arg));
    }
    if (path.empty()) throw tlc::Error("no tokenizer given (tl-tokenize --help)");
    if (int(haveText) + int(!ids.empty()) + int(json) + int(describe) != 1)
      throw tlc::Error("give one of --text, --ids, --json and --describe");
    std::unique_ptr<tlc::Tokenizer> tokenizer = tlc::loadTokenizer(path);
    if (describe)
      fmt::print("{}\nvocabulary {}, BOS {}, EOS {}\n", tokenizer->describe(), tokenizer->vocabSize(),
                 optionalId(tokenizer->bos()), optionalId(tokenizer->eos()));
    if (haveText) fmt::print("{}\n", fmt::join(tokenizer->encode(text), " "));
    if (!ids.empty()) fmt::print("{}\n", tlc::printable(tokenizer->decode(parseIds(ids))));
    if (json)
      fmt::print("{}", encodeJson(*tokenizer, std::string(std::istreambuf_iterator<char>(std::cin), {})));
    tlc::checkStdout();
  } catch (const tlc::Error &error) {
    fmt::print(stderr, "tl-tokenize: error: {}\n", error.what());
    return 1;
  }
  return 0;
}
