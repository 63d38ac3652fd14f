// tlc generate's text: the prompts, from the flags to token ids (text through the
// checkpoint's tokenizer or --tokenizer, BOS first as the config says), and the tokens
// that end a sequence (EOS, --stop-token).
#pragma once

#include "models/HfConfig.h"
#include "runtime/Tokenizer.h"

#include <cstdint>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

namespace tlc {

// One of the three prompt flags is given (an empty --prompt is a prompt of BOS alone).
struct PromptFlags {
  std::optional<std::string> text;  // --prompt
  std::optional<std::string> ids;   // --prompt-ids
  std::optional<std::string> file;  // --prompts: one prompt a line (text with a tokenizer, else ids)
  std::string tokenizer;            // --tokenizer: a file or a directory; else the checkpoint's
  std::vector<int64_t> stopTokens;  // --stop-token
  bool ignoreEos = false;           // --ignore-eos
};

struct Prompts {
  std::unique_ptr<Tokenizer> tokenizer;      // null: ids in, ids out
  std::optional<int32_t> bos;                // put before each text prompt
  std::set<int32_t> stops;                   // a sequence ends at the first of these it generates
  std::vector<std::vector<int32_t>> ids;     // one list a sequence: a ragged batch
  std::vector<std::string> texts;            // the text prompts as given (empty for ids)
  std::string source;                        // the flag they came from: --prompt, --prompts or --prompt-ids

  // For the summary's header: "SentencePiece model '...' (32000 pieces); BOS 1; stops at 2".
  std::string describe() const;
};

// The prompts the flags give. `checkpoint`: the directory and its config when the model
// is one (its tokenizer, BOS and EOS; tokenizer_config.json's add_bos_token). Throws
// tlc::Error naming the flag: text with no tokenizer, a file with no prompt, ...
Prompts readPrompts(const PromptFlags &flags, const std::string &checkpointDir, const HfConfig *checkpoint);

} // namespace tlc
