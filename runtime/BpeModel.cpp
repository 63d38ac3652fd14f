#include "runtime/BpeModel.h"

#include <fmt/format.h>

#include <queue>

#include "runtime/Error.h"
#include "runtime/Unicode.h"

namespace tlc {
namespace {

uint64_t pairKey(int32_t left, int32_t right) { return (uint64_t(uint32_t(left)) << 32) | uint32_t(right); }

} // namespace

BpeModel::BpeModel(std::unordered_map<std::string, int32_t> vocab,
                   const std::vector<std::pair<std::string, std::string>> &merges, Options options)
    : vocab_(std::move(vocab)), options_(std::move(options)) {
  for (const auto &[piece, id] : vocab_) pieces_[id] = piece;
  for (size_t rank = 0; rank < merges.size(); ++rank) {
    const auto &[left, right] = merges[rank];
    auto a = vocab_.find(left), b = vocab_.find(right), joined = vocab_.find(left + right);
    if (a == vocab_.end() || b == vocab_.end() || joined == vocab_.end())
      throw Error(fmt::format("merge {} ('{}' '{}'): {} is not in the vocabulary", rank, left, right,
                              a == vocab_.end() ? "'" + left + "'" : b == vocab_.end() ? "'" + right + "'"
                                                                                       : "'" + left + right + "'"));
    merges_[pairKey(a->second, b->second)] = {int32_t(rank), joined->second};  // a repeated pair: its last rank
  }
  if (options_.unknown && !vocab_.count(*options_.unknown))
    throw Error(fmt::format("unk_token '{}' is not in the vocabulary", *options_.unknown));
}

const std::string *BpeModel::piece(int32_t id) const {
  auto found = pieces_.find(id);
  return found == pieces_.end() ? nullptr : &found->second;
}

std::optional<int32_t> BpeModel::id(const std::string &piece) const {
  auto found = vocab_.find(piece);
  return found == vocab_.end() ? std::nullopt : std::optional<int32_t>(found->second);
}

// A character at a time: its piece, else its bytes' pieces, else unk_token (fused with
// an unknown character before it when asked).
std::vector<int32_t> BpeModel::symbolsOf(std::string_view word) const {
  CodePoints characters = decodeUtf8(word, "text");
  std::vector<int32_t> symbols;
  bool lastUnknown = false;
  for (size_t i = 0; i < characters.points.size(); ++i) {
    std::string character(word.substr(characters.offsets[i], characters.offsets[i + 1] - characters.offsets[i]));
    if (auto found = vocab_.find(character); found != vocab_.end()) {
      symbols.push_back(found->second);
      lastUnknown = false;
      continue;
    }
    std::vector<int32_t> bytes;
    for (unsigned char byte : character)
      if (auto found = vocab_.find(fmt::format("<0x{:02X}>", byte)); options_.byteFallback && found != vocab_.end())
        bytes.push_back(found->second);
    if (bytes.size() == character.size()) {
      symbols.insert(symbols.end(), bytes.begin(), bytes.end());
      lastUnknown = false;
      continue;
    }
    if (!options_.unknown)
      throw Error(fmt::format("the tokenizer has no piece for the character U+{:04X} (nor its bytes, nor unk_token)",
                              uint32_t(characters.points[i])));
    if (!(lastUnknown && options_.fuseUnknown)) symbols.push_back(vocab_.at(*options_.unknown));
    lastUnknown = true;
  }
  return symbols;
}

// The adjacent pair of lowest rank first (the leftmost on a tie), until none has a merge;
// a queued pair whose symbols have changed since is passed over.
void BpeModel::mergeAll(std::vector<int32_t> &symbols) const {
  struct Candidate {
    int32_t rank;
    size_t position;
    int32_t result;
    bool operator>(const Candidate &other) const {
      return rank != other.rank ? rank > other.rank : position > other.position;
    }
  };
  const size_t n = symbols.size();
  std::vector<size_t> next(n), previous(n);
  std::vector<bool> alive(n, true);
  std::priority_queue<Candidate, std::vector<Candidate>, std::greater<Candidate>> queue;
  auto consider = [&](size_t left) {
    if (next[left] >= n) return;
    if (auto merge = merges_.find(pairKey(symbols[left], symbols[next[left]])); merge != merges_.end())
      queue.push({merge->second.rank, left, merge->second.result});
  };
  for (size_t i = 0; i < n; ++i) {
    next[i] = i + 1;
    previous[i] = i == 0 ? n : i - 1;
  }
  for (size_t i = 0; i + 1 < n; ++i) consider(i);
  while (!queue.empty()) {
    Candidate top = queue.top();
    queue.pop();
    size_t left = top.position;
    if (!alive[left] || next[left] >= n) continue;
    auto merge = merges_.find(pairKey(symbols[left], symbols[next[left]]));
    if (merge == merges_.end() || merge->second.result != top.result) continue;
    size_t right = next[left];
    symbols[left] = top.result;
    alive[right] = false;
    next[left] = next[right];
    if (next[left] < n) previous[next[left]] = left;
    if (previous[left] < n) consider(previous[left]);
    consider(left);
  }
  std::vector<int32_t> merged;
  for (size_t i = 0; i < n; ++i)
    if (alive[i]) merged.push_back(symbols[i]);
  symbols = std::move(merged);
}

void BpeModel::encodeWord(std::string_view word, std::vector<int32_t> &ids) const {
  if (word.empty()) return;
  if (options_.ignoreMerges)
    if (auto whole = vocab_.find(std::string(word)); whole != vocab_.end()) {
      ids.push_back(whole->second);
      return;
    }
  std::vector<int32_t> symbols = symbolsOf(word);
  mergeAll(symbols);
  ids.insert(ids.end(), symbols.begin(), symbols.end());
}

} // namespace tlc
