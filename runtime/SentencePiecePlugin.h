// What tlc's SentencePiece plugin (libtlc-sentencepiece.so, runtime/plugins/) offers.
// The plugin links Debian's libsentencepiece; tlc loads it only when it reads a
// tokenizer.model, so tlc itself still starts where that library is not installed.
// Nothing crosses the boundary as an exception: failures come back as messages.
#pragma once

#include <string>
#include <vector>

namespace tlc {

constexpr int kSentencePiecePluginVersion = 1;
constexpr const char *kSentencePiecePluginFile = "libtlc-sentencepiece.so";

struct SentencePiecePlugin {
  int version;  // kSentencePiecePluginVersion
  // A loaded model, or null with `error` set.
  void *(*load)(const std::string &path, std::string &error);
  void (*release)(void *model);
  bool (*encode)(const void *model, const std::string &text, std::vector<int> &ids, std::string &error);
  bool (*decode)(const void *model, const std::vector<int> &ids, std::string &text, std::string &error);
  int (*pieceCount)(const void *model);
  int (*bos)(const void *model);  // -1 where the model has none
  int (*eos)(const void *model);
};

} // namespace tlc

// The plugin's one exported symbol.
extern "C" const tlc::SentencePiecePlugin *tlc_sentencepiece_plugin();
