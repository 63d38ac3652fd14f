// Text to token ids and back, for prompts and generated text: a SentencePiece model
// (tokenizer.model, through Debian's libsentencepiece) or a Hugging Face tokenizer.json
// (BPE: byte-level as GPT-2 and Llama 3, or SentencePiece-style with byte fallback as
// Llama 2 and TinyLlama), read as the tokenizers library's format defines it.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace tlc {

class Tokenizer {
public:
  virtual ~Tokenizer() = default;

  // The ids of `text`, with no BOS or EOS added. Throws tlc::Error for text that is not
  // UTF-8 or a character the tokenizer cannot spell.
  virtual std::vector<int32_t> encode(std::string_view text) const = 0;
  // The text of `ids`, special tokens (BOS, EOS, ...) left out; bytes that make no
  // UTF-8 become U+FFFD. Throws tlc::Error for an id outside the vocabulary.
  virtual std::string decode(const std::vector<int32_t> &ids) const = 0;
  // Ids are 0 .. vocabSize() - 1.
  virtual int64_t vocabSize() const = 0;
  // BOS and EOS where the tokenizer itself names them (a SentencePiece model does).
  virtual std::optional<int32_t> bos() const { return std::nullopt; }
  virtual std::optional<int32_t> eos() const { return std::nullopt; }
  // "SentencePiece model 'dir/tokenizer.model' (32000 pieces)", for summaries.
  virtual std::string describe() const = 0;
};

// `path`: a tokenizer.model, a tokenizer.json, or a directory holding either
// (tokenizer.model preferred; tokenizer.json when SentencePiece cannot be loaded, with
// a note on stderr). Throws tlc::Error naming what is wrong.
std::unique_ptr<Tokenizer> loadTokenizer(const std::string &path);

std::unique_ptr<Tokenizer> loadHfTokenizer(const std::string &path);       // tokenizer.json
// tokenizer.json's text, named `origin` in messages.
std::unique_ptr<Tokenizer> parseHfTokenizer(const std::string &text, const std::string &origin);
std::unique_ptr<Tokenizer> loadSentencePiece(const std::string &path);     // tokenizer.model

// Generated text as it comes: fed one id at a time after `context` (the prompt's ids),
// it gives the text each id adds, holding it back while it ends inside a character
// (a byte-fallback piece, a byte-level piece) and giving it once the character is whole.
class TextStream {
public:
  TextStream(const Tokenizer &tokenizer, std::vector<int32_t> context);
  std::string add(int32_t id);
  std::string flush();  // what is still held back, as it decodes now

private:
  const Tokenizer &tokenizer_;
  std::vector<int32_t> ids_;
  size_t prefix_ = 0, read_ = 0;  // ids_[prefix_, read_) was decoded last; ids_[read_, ...) not yet shown
};

} // namespace tlc
