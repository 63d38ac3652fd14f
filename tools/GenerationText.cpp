#include "tools/GenerationText.h"

#include "runtime/Error.h"
#include "runtime/MappedFile.h"
#include "runtime/StrictJson.h"
#include "tools/Generation.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

namespace tlc {
namespace {

bool exists(const std::string &path) { return inputFileProblem(path).empty(); }

// tokenizer_config.json's add_bos_token (Llama's tokenizers add BOS unless it says false).
bool addsBos(const std::string &checkpointDir) {
  std::string path = checkpointDir + "/tokenizer_config.json";
  if (!exists(path)) return true;
  nlohmann::json json = readStrictJsonFile(path, "tokenizer config");
  auto found = json.is_object() ? json.find("add_bos_token") : json.end();
  return !(json.is_object() && found != json.end() && found->is_boolean() && !found->get<bool>());
}

std::unique_ptr<Tokenizer> tokenizerFor(const PromptFlags &flags, const std::string &checkpointDir) {
  if (!flags.tokenizer.empty()) return loadTokenizer(flags.tokenizer);
  if (!checkpointDir.empty() &&
      (exists(checkpointDir + "/tokenizer.model") || exists(checkpointDir + "/tokenizer.json")))
    return loadTokenizer(checkpointDir);
  return nullptr;
}

// The file's lines that hold more than white space, each a prompt.
std::vector<std::string> promptLines(const std::string &path) {
  MappedFile file(path, "prompts file");
  std::vector<std::string> lines;
  std::string_view text = file.text();
  for (size_t at = 0; at < text.size();) {
    size_t end = std::min(text.find('\n', at), text.size());
    std::string line(text.substr(at, end - at));
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.find_first_not_of(" \t") != std::string::npos) lines.push_back(line);
    at = end + 1;
  }
  if (lines.empty()) throw Error(fmt::format("--prompts: '{}' holds no prompt (one a line)", path));
  return lines;
}

} // namespace

std::string Prompts::describe() const {
  std::string text = tokenizer ? tokenizer->describe() : std::string("token ids (no tokenizer)");
  if (bos && tokenizer) text += fmt::format("; BOS {}", *bos);
  if (stops.empty()) return text + "; no stop token";
  return text + fmt::format("; stops at {}", fmt::join(stops, ", "));
}

Prompts readPrompts(const PromptFlags &flags, const std::string &checkpointDir, const HfConfig *checkpoint) {
  Prompts prompts;
  prompts.tokenizer = tokenizerFor(flags, checkpointDir);
  std::vector<int32_t> eos;
  if (checkpoint) {  // the config says; the tokenizer's own ids serve where it does not
    if (addsBos(checkpointDir)) prompts.bos = checkpoint->bos;
    eos = checkpoint->eos;
  }
  if (prompts.tokenizer && !checkpoint) prompts.bos = prompts.tokenizer->bos();
  if (prompts.tokenizer && eos.empty())
    if (auto id = prompts.tokenizer->eos()) eos.push_back(*id);
  if (!flags.ignoreEos) prompts.stops.insert(eos.begin(), eos.end());
  for (int64_t id : flags.stopTokens) prompts.stops.insert(int32_t(id));

  prompts.source = flags.ids ? "--prompt-ids" : flags.file ? "--prompts" : "--prompt";
  if (flags.ids) {
    prompts.ids.push_back(parseTokenIds(*flags.ids, "--prompt-ids"));
    return prompts;
  }
  std::vector<std::string> lines = flags.file ? promptLines(*flags.file) : std::vector<std::string>{flags.text.value_or("")};
  if (!prompts.tokenizer) {
    if (!flags.file)
      throw Error("--prompt needs a tokenizer: a --checkpoint directory with tokenizer.model or tokenizer.json, or "
                  "--tokenizer FILE (or give --prompt-ids)");
    for (const std::string &line : lines) prompts.ids.push_back(parseTokenIds(line, "--prompts (ids: no tokenizer)"));
    return prompts;
  }
  for (const std::string &line : lines) {
    std::vector<int32_t> ids = prompts.tokenizer->encode(line);
    if (prompts.bos) ids.insert(ids.begin(), *prompts.bos);
    if (ids.empty()) throw Error(fmt::format("{}: '{}' makes no tokens", prompts.source, line));
    prompts.ids.push_back(std::move(ids));
    prompts.texts.push_back(line);
  }
  return prompts;
}

} // namespace tlc
