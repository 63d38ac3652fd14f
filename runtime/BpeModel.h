// The BPE model of a tokenizer.json ("model": {"type": "BPE", ...}): a vocabulary of
// pieces and a ranked list of merges. A word starts as its characters (or, with byte
// fallback, the <0xHH> pieces of a character the vocabulary lacks) and the adjacent pair
// of lowest rank is merged until no pair has a merge, as Hugging Face tokenizers does.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace tlc {

class BpeModel {
public:
  struct Options {
    std::optional<std::string> unknown;  // unk_token: what a character with no piece becomes
    bool byteFallback = false;           // such a character as its bytes' <0xHH> pieces instead
    bool fuseUnknown = false;            // consecutive unknown characters as one unk_token
    bool ignoreMerges = false;           // a word in the vocabulary is one piece, unmerged
  };

  // `merges`: pairs of pieces in rank order, each pair's concatenation a piece too.
  // Throws tlc::Error naming a merge whose pieces are not in the vocabulary.
  BpeModel(std::unordered_map<std::string, int32_t> vocab, const std::vector<std::pair<std::string, std::string>> &merges,
           Options options);

  // The ids of one pre-tokenized word. Throws tlc::Error for a character with no piece,
  // no byte pieces and no unk_token.
  void encodeWord(std::string_view word, std::vector<int32_t> &ids) const;

  const std::string *piece(int32_t id) const;  // null for an id the vocabulary lacks
  std::optional<int32_t> id(const std::string &piece) const;
  int64_t size() const { return int64_t(pieces_.size()); }
  int64_t idLimit() const { return pieces_.empty() ? 0 : int64_t(pieces_.rbegin()->first) + 1; }  // the largest id + 1

private:
  struct Merge {
    int32_t rank, result;
  };
  std::vector<int32_t> symbolsOf(std::string_view word) const;
  void mergeAll(std::vector<int32_t> &symbols) const;

  std::unordered_map<std::string, int32_t> vocab_;
  std::map<int32_t, std::string> pieces_;
  std::unordered_map<uint64_t, Merge> merges_;  // by (left id, right id)
  Options options_;
};

} // namespace tlc
